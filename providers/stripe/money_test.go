package stripe

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// TestBalanceTransactionsMapsEveryType: each kind of money movement at
// Stripe maps to its seam type with Stripe's signs (gross positive in,
// negative out; fee positive when charged, negative when returned; net =
// gross − fee), the upper-case currency, its source, the PaymentIntent it
// belongs to, the payment id of a charge, and the payout that paid it out
// (found through the payout's own list). Small pages exercise
// auto-pagination.
func TestBalanceTransactionsMapsEveryType(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	c.pageSize = 2
	ctx := t.Context()
	from := time.Now().Add(-time.Minute)

	capture := func(h providers.Hold, amount int64) {
		t.Helper()
		if _, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: amount}); err != nil {
			t.Fatalf("Capture: %v", err)
		}
	}
	full := mustAuthorize(t, c, 9000)
	capture(full, 0)
	if _, err := c.Refund(ctx, providers.RefundRequest{Key: fwdKey("refund"), Ref: full.Ref, AmountMinor: 4000}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	partial := mustAuthorize(t, c, 5000)
	capture(partial, 3000)
	e.dispute(full.Ref, 5000, 1500)
	e.book("adjustment", "dispute_reversal", "", "eur", 5000, -1500)
	e.book("stripe_fee", "fee", "", "eur", -300, 0)
	items := e.balanceIDs()
	// 8849 − 4000 + 4905 − 2000 − 6500 + 6500 − 300
	po := e.payOut(emuPayoutSpec{items: items, created: now()})
	e.book("payout_failure", "payout_reversal", po, "eur", 7454, 0)
	later := mustAuthorize(t, c, 1000)
	capture(later, 0)

	type want struct {
		typ, holdRef, paymentID, payoutID, source string
		fee, net                                  int64
	}
	// Keyed by gross, unique here. Emulated fees: 25 + 1.4 % on charges
	// (of the authorized amount, as Stripe books a partial capture).
	wants := map[int64]want{
		9000:  {providers.BalanceCharge, full.Ref, full.PaymentID, po, "ch_", 151, 8849},
		-4000: {providers.BalanceRefund, full.Ref, "", po, "re_", 0, -4000},
		5000:  {providers.BalanceCharge, partial.Ref, partial.PaymentID, po, "ch_", 95, 4905},
		-2000: {providers.BalanceAdjustment, partial.Ref, "", po, "re_", 0, -2000},
		-5000: {providers.BalanceDispute, full.Ref, "", po, "dp_", 1500, -6500},
		5001:  {providers.BalanceDispute, "", "", po, "", -1500, 6500},
		-300:  {providers.BalanceAdjustment, "", "", po, "", 0, -300},
		-7454: {providers.BalancePayout, "", "", po, "po_", 0, -7454},
		7454:  {providers.BalanceAdjustment, "", "", "", "po_", 0, 7454},
		1000:  {providers.BalanceCharge, later.Ref, later.PaymentID, "", "ch_", 39, 961},
	}
	seen := map[int64]int{}
	to := time.Now().Add(time.Minute)
	err := c.BalanceTransactions(ctx, providers.ReportRequest{From: from, To: to}, func(bt providers.BalanceTransaction) error {
		key := bt.GrossMinor
		if bt.Type == providers.BalanceDispute && key > 0 {
			key = 5001 // the reversal; the charge is 5000
		}
		seen[key]++
		w, ok := wants[key]
		if !ok {
			t.Errorf("unexpected transaction %+v", bt)
			return nil
		}
		got := want{bt.Type, bt.HoldRef, bt.PaymentID, bt.PayoutID, bt.Source, bt.FeeMinor, bt.NetMinor}
		if w.source != "" && strings.HasPrefix(got.source, w.source) {
			got.source = w.source
		}
		if got != w || bt.Currency != "EUR" || bt.OperationKey != "" || !strings.HasPrefix(bt.ID, "txn_") {
			t.Errorf("transaction of gross %d: %+v (%s, key %q), want %+v in EUR", bt.GrossMinor, got, bt.ID, bt.OperationKey, w)
		}
		if bt.CreatedAt.Before(from.Truncate(time.Second)) || bt.CreatedAt.After(to) || bt.CreatedAt.Location() != time.UTC {
			t.Errorf("transaction %s created %s, outside the window", bt.ID, bt.CreatedAt)
		}
		if bt.Type != providers.BalancePayout && !bt.AvailableOn.Equal(bt.CreatedAt.Add(48*time.Hour)) {
			t.Errorf("transaction %s available on %s, created %s: want T+2", bt.ID, bt.AvailableOn, bt.CreatedAt)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("BalanceTransactions: %v", err)
	}
	for gross := range wants {
		if seen[gross] != 1 {
			t.Errorf("transaction of gross %d listed %d times, want once", gross, seen[gross])
		}
	}
	wantListRequests(t, e, po)
}

// wantListRequests checks the lists BalanceTransactions sent: the window's
// transactions in several pages with their source expanded, and payout
// po's transactions in the window with the payout filter.
func wantListRequests(t *testing.T, e *emulator, po string) {
	t.Helper()
	pages, payoutPages := 0, 0
	for _, r := range e.recorded("") {
		if r.Method != http.MethodGet || r.Path != "/v1/balance_transactions" {
			continue
		}
		if r.Form.Get("created[gte]") == "" || r.Form.Get("created[lt]") == "" || r.Form.Get("limit") != "2" {
			t.Errorf("list request %v", r.Form)
		}
		switch r.Form.Get("payout") {
		case "":
			pages++
			if r.Form.Get("expand[0]") != "data.source" {
				t.Errorf("list request %v does not expand the source", r.Form)
			}
		case po:
			payoutPages++
		default:
			t.Errorf("list of the transactions of %s", r.Form.Get("payout"))
		}
	}
	if pages < 2 || payoutPages < 2 {
		t.Errorf("%d pages of transactions and %d of the payout's read, want several of each", pages, payoutPages)
	}
}

// TestMoneyOfADay: a day's window lists the transactions created that day
// only, those paid out by a payout created days later with that payout
// (the usual T+N case), those of a manual payout without one (Stripe lists
// only automatic payouts' transactions); the day's payouts are those
// created that day, whatever they paid, with amount, currency, status,
// arrival date (a UTC date), reference and creation.
func TestMoneyOfADay(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	c.pageSize = 2
	ctx := t.Context()
	charge := func(amount int64, ago time.Duration) string {
		t.Helper()
		h := mustAuthorize(t, c, amount)
		if _, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref}); err != nil {
			t.Fatalf("Capture: %v", err)
		}
		id := e.lastBT()
		e.backdateBT(id, ago)
		return id
	}
	n := time.Now()
	before := charge(1000, 48*time.Hour)
	inDay := charge(2000, 24*time.Hour)
	inDayManual := charge(3000, 24*time.Hour)
	inDayUnpaid := charge(4000, 23*time.Hour)
	today := charge(5000, 0)
	dayPayout := e.payOut(emuPayoutSpec{items: []string{before}, created: n.Add(-20 * time.Hour).Unix(), descriptor: "PAYORCH 17"})
	manual := e.payOut(emuPayoutSpec{items: []string{inDayManual}, created: n.Add(-19 * time.Hour).Unix(), manual: true, status: "in_transit"})
	laterPayout := e.payOut(emuPayoutSpec{items: []string{inDay, today}, created: n.Unix(), status: "pending"})
	day := providers.ReportRequest{From: n.Add(-30 * time.Hour), To: n.Add(-18 * time.Hour)}

	want := map[string]string{ // transaction → payout
		inDay: laterPayout, inDayManual: "", inDayUnpaid: "",
		e.payoutTx(dayPayout): dayPayout, e.payoutTx(manual): manual,
	}
	got := map[string]string{}
	err := c.BalanceTransactions(ctx, day, func(bt providers.BalanceTransaction) error {
		if _, dup := got[bt.ID]; dup {
			t.Errorf("%s listed twice", bt.ID)
		}
		got[bt.ID] = bt.PayoutID
		return nil
	})
	if err != nil {
		t.Fatalf("BalanceTransactions: %v", err)
	}
	if len(got) != len(want) {
		t.Errorf("the day's transactions %v, want %v", got, want)
	}
	for id, po := range want {
		if p, ok := got[id]; !ok || p != po {
			t.Errorf("transaction %s: listed %t, payout %q; want payout %q", id, ok, p, po)
		}
	}

	payouts := map[string]providers.Payout{}
	err = c.Payouts(ctx, day, func(p providers.Payout) error { payouts[p.ID] = p; return nil })
	if err != nil {
		t.Fatalf("Payouts: %v", err)
	}
	arrival := func(created time.Time) time.Time {
		y, m, d := created.Add(48 * time.Hour).UTC().Date()
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	wantPayouts := map[string]providers.Payout{
		dayPayout: {ID: dayPayout, AmountMinor: 1000 - 39, Currency: "EUR", Status: providers.PayoutPaid,
			ArrivalDate: arrival(n.Add(-20 * time.Hour)), Reference: "PAYORCH 17", CreatedAt: unix(n.Add(-20 * time.Hour).Unix())},
		manual: {ID: manual, AmountMinor: 3000 - 67, Currency: "EUR", Status: providers.PayoutInTransit,
			ArrivalDate: arrival(n.Add(-19 * time.Hour)), CreatedAt: unix(n.Add(-19 * time.Hour).Unix())},
	}
	if len(payouts) != len(wantPayouts) {
		t.Errorf("the day's payouts %v, want %v", payouts, wantPayouts)
	}
	for id, w := range wantPayouts {
		if p := payouts[id]; p != w {
			t.Errorf("payout %+v, want %+v", p, w)
		}
	}
}

// TestMoneyReadsStopAndFail: fn's error comes back as is and stops the
// list; an empty window is the caller's bug; a failed list, whichever it
// is, is a classified error.
func TestMoneyReadsStopAndFail(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	c.pageSize = 2
	ctx := t.Context()
	var items []string
	for range 5 {
		h := mustAuthorize(t, c, 1000)
		if _, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref}); err != nil {
			t.Fatalf("Capture: %v", err)
		}
		items = append(items, e.lastBT())
		e.payOut(emuPayoutSpec{items: items[len(items)-1:], created: now()})
	}
	day := providers.ReportRequest{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)}

	stop := errors.New("stop")
	for _, after := range []int{1, 3, 6} {
		calls := 0
		err := c.BalanceTransactions(ctx, day, func(providers.BalanceTransaction) error {
			if calls++; calls == after {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != after {
			t.Errorf("transactions, stop after %d: %v after %d calls", after, err, calls)
		}
		calls = 0
		err = c.Payouts(ctx, day, func(providers.Payout) error {
			if calls++; calls == min(after, 5) {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != min(after, 5) {
			t.Errorf("payouts, stop after %d: %v after %d calls", min(after, 5), err, calls)
		}
	}

	empty := providers.ReportRequest{From: day.To, To: day.From}
	wantKind(t, c.BalanceTransactions(ctx, empty, func(providers.BalanceTransaction) error { return nil }),
		providers.KindRejected, providers.CodeInvalidRequest)
	wantKind(t, c.Payouts(ctx, empty, func(providers.Payout) error { return nil }),
		providers.KindRejected, providers.CodeInvalidRequest)

	for _, tc := range []struct {
		path   string
		skip   int // pages answered before the fault
		status int
		kind   providers.Kind
		code   string
	}{
		{"/v1/payouts", 0, 500, providers.KindUnknown, providers.CodeProviderInternalError},
		// Five payouts' lists first, then the day's in five pages.
		{"/v1/balance_transactions", 1, 500, providers.KindUnknown, providers.CodeProviderInternalError},
		{"/v1/balance_transactions", 5, 429, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"/v1/balance_transactions", 7, 500, providers.KindUnknown, providers.CodeProviderInternalError},
	} {
		e.failAfter(tc.path, tc.skip, tc.status)
		err := c.BalanceTransactions(ctx, day, func(providers.BalanceTransaction) error { return nil })
		wantKind(t, err, tc.kind, tc.code)
	}
	e.failAfter("/v1/payouts", 1, 500)
	wantKind(t, c.Payouts(ctx, day, func(providers.Payout) error { return nil }),
		providers.KindUnknown, providers.CodeProviderInternalError)
}

// failAfter arms a scripted error answer for the request on a path ending
// in path that follows the next skip ones.
func (e *emulator) failAfter(path string, skip, status int) {
	errType := "api_error"
	if status < 500 {
		errType = "invalid_request_error"
	}
	e.arm(&emuFault{kind: faultAnswer, path: path, skip: skip, status: status,
		body: stripeError(status, errType, "", "scripted", "").body})
}

// TestPayoutItemsListsWhatAPayoutPaid: a payout's items are the
// transactions it paid, whenever they were created (one two days before
// the payout here), each with the payout as PayoutID and mapped as
// BalanceTransactions maps them, its own transaction among them; another
// payout's items and unpaid transactions are not; a payout Stripe does
// not have is a classified refusal. Small pages exercise
// auto-pagination.
func TestPayoutItemsListsWhatAPayoutPaid(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	c.pageSize = 2
	ctx := t.Context()
	charge := func(amount int64) (providers.Hold, string) {
		t.Helper()
		h := mustAuthorize(t, c, amount)
		if _, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref}); err != nil {
			t.Fatalf("Capture: %v", err)
		}
		return h, e.lastBT()
	}
	old, oldBT := charge(1000)
	e.backdateBT(oldBT, 48*time.Hour)
	h2, bt2 := charge(2000)
	_, bt3 := charge(3000)
	_, other := charge(4000)
	charge(5000) // never paid out
	po := e.payOut(emuPayoutSpec{items: []string{oldBT, bt2, bt3}, created: now()})
	e.payOut(emuPayoutSpec{items: []string{other}, created: now()})

	got := map[string]providers.BalanceTransaction{}
	err := c.PayoutItems(ctx, po, func(bt providers.BalanceTransaction) error {
		got[bt.ID] = bt
		return nil
	})
	if err != nil {
		t.Fatalf("PayoutItems: %v", err)
	}
	want := []string{oldBT, bt2, bt3, e.payoutTx(po)}
	if len(got) != len(want) {
		t.Fatalf("items %v, want %v", got, want)
	}
	var sum int64
	for _, id := range want {
		bt, ok := got[id]
		if !ok || bt.PayoutID != po {
			t.Fatalf("item %s: listed %t, payout %q; want payout %s", id, ok, bt.PayoutID, po)
		}
		if bt.Type != providers.BalancePayout {
			sum += bt.NetMinor
		} else if bt.GrossMinor != -sum {
			t.Errorf("the payout's own transaction %+v, want gross −%d", bt, sum)
		}
	}
	if b := got[oldBT]; b.Type != providers.BalanceCharge || b.HoldRef != old.Ref || b.PaymentID != old.PaymentID ||
		b.GrossMinor != 1000 || b.FeeMinor != 39 || b.NetMinor != 961 || b.Currency != "EUR" {
		t.Errorf("the old charge %+v", b)
	}
	if b := got[bt2]; b.HoldRef != h2.Ref {
		t.Errorf("charge %+v, want hold %s", b, h2.Ref)
	}
	stop := errors.New("stop")
	calls := 0
	if err := c.PayoutItems(ctx, po, func(providers.BalanceTransaction) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("stop: %v after %d calls", err, calls)
	}
	err = c.PayoutItems(ctx, "po_unknown", func(providers.BalanceTransaction) error { return nil })
	if providers.KindOf(err) != providers.KindRejected {
		t.Errorf("an unknown payout: %v (%s), want a refusal", err, providers.KindOf(err))
	}
	wantKind(t, c.PayoutItems(ctx, "", func(providers.BalanceTransaction) error { return nil }),
		providers.KindRejected, providers.CodeInvalidRequest)
}
