package reconcile

import (
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// The best pairs are taken first: a line whose reference names a payout
// goes to that payout even when another payout of the same amount comes
// first; without references, the nearest date wins; a failed payout takes
// no line.
func TestMatchBankRanksReferenceThenDate(t *testing.T) {
	t.Parallel()
	arr := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	po := func(id, ref, status string) bankPayout {
		return bankPayout{Payout: providers.Payout{ID: id, AmountMinor: 1000, Currency: "EUR", Status: status, Reference: ref},
			connector: "fake", window: 3, arrival: arr}
	}
	cr := func(ref string, days int) bankCredit {
		return bankCredit{amount: 1000, currency: "EUR", reference: ref, booking: arr.AddDate(0, 0, days)}
	}
	m := matchBank([]bankPayout{po("po_a", "REF-A", providers.PayoutPaid), po("po_b", "REF-B", providers.PayoutPaid)},
		[]bankCredit{cr("transfer REF-B", 0), cr("REF-A", 1)})
	if m.lineOf[0] != 1 || m.lineOf[1] != 0 {
		t.Fatalf("by reference: %v", m.lineOf)
	}
	m = matchBank([]bankPayout{po("po_a", "", providers.PayoutPaid)}, []bankCredit{cr("", 2), cr("", 0), cr("", 4)})
	if m.lineOf[0] != 1 || !m.taken[1] || m.taken[0] || m.taken[2] {
		t.Fatalf("by date: %v %v", m.lineOf, m.taken)
	}
	m = matchBank([]bankPayout{po("po_a", "REF-A", providers.PayoutFailed)}, []bankCredit{cr("REF-A", 0)})
	if m.lineOf[0] != -1 || m.taken[0] {
		t.Fatalf("failed payout: %v", m.lineOf)
	}
	// Outside the window (a day early is in, two days early is not).
	m = matchBank([]bankPayout{po("po_a", "", providers.PayoutPaid)}, []bankCredit{cr("", -2), cr("", 4)})
	if m.lineOf[0] != -1 {
		t.Fatalf("outside the window: %v", m.lineOf)
	}
	m = matchBank([]bankPayout{po("po_a", "", providers.PayoutPaid)}, []bankCredit{cr("", -1)})
	if m.lineOf[0] != 0 {
		t.Fatalf("a day early: %v", m.lineOf)
	}
}
