package reconcile

import (
	"math"
	"testing"

	"github.com/payorch/payorch/providers"
)

// TestDayTallyHoldsOutOnlyWhatSQLWouldFindNothingIn: the day's tally
// takes a charge only when feeMismatchesSQL would not report it and its
// sums are exact; everything else is left to staging, and the sums it
// keeps are those of the charges it took.
func TestDayTallyHoldsOutOnlyWhatSQLWouldFindNothingIn(t *testing.T) {
	v := &FeeVersion{Schedule: FeeSchedule{
		Currencies:     map[string]FeeRule{"EUR": {PercentBP: 140, FixedMinor: 25}},
		ToleranceMinor: 1,
	}}
	charge := func(cur string, gross, fee int64) providers.BalanceTransaction {
		return providers.BalanceTransaction{Type: providers.BalanceCharge, Currency: cur, GrossMinor: gross, FeeMinor: fee,
			NetMinor: gross - fee}
	}
	tally := newDayTally(v)
	for _, c := range []struct {
		name string
		bt   providers.BalanceTransaction
		take bool
	}{
		{"an agreeing fee", charge("EUR", 1000, 39), true},
		{"within the tolerance", charge("eur", 1000, 40), true},
		{"beyond the tolerance", charge("EUR", 1000, 41), false},
		{"a currency without a rule", charge("USD", 1000, 7), true},
		{"a refund", providers.BalanceTransaction{Type: providers.BalanceRefund, Currency: "EUR", GrossMinor: -500, NetMinor: -500}, false},
		{"a gross beyond exact arithmetic", charge("EUR", math.MaxInt64/1000, 0), false},
		{"a negative fee beyond it", charge("USD", 10, -tallyMaxMinor-1), false},
		{"a type that is not text", providers.BalanceTransaction{Type: "charge\x00", Currency: "EUR", GrossMinor: 1000, FeeMinor: 39}, false},
	} {
		if got := tally.take(c.bt); got != c.take {
			t.Errorf("%s: take %v, want %v", c.name, got, c.take)
		}
	}
	want := map[string]Settlement{"EUR": {ChargeCount: 2, Charges: 2000, Fees: 79, Net: 1921}, "USD": {ChargeCount: 1, Charges: 1000, Fees: 7, Net: 993}}
	for cur, w := range want {
		if got := tally.sums[cur]; got == nil || *got != w {
			t.Errorf("%s: sums %+v, want %+v", cur, got, w)
		}
	}

	// A schedule of a rule the tally cannot compute exactly stages every
	// charge; no schedule judges no fee.
	if off := newDayTally(&FeeVersion{Schedule: FeeSchedule{Default: &FeeRule{PercentBP: 140, FixedMinor: math.MaxInt64}}}); off.take(charge("EUR", 1000, 39)) {
		t.Error("a fixed fee beyond exact arithmetic: charge taken")
	}
	if none := newDayTally(nil); !none.take(charge("EUR", 1000, 999)) {
		t.Error("no schedule: charge not taken")
	}

	// The sums of the staged rows and of the tally add up, and an
	// overflow is an error, not a wrapped sum.
	out := map[string]*Settlement{"EUR": {ChargeCount: 1, Charges: 1000, Fees: 41, Net: 959, Refunds: -500}}
	if err := addTally(out, tally.sums); err != nil {
		t.Fatal(err)
	}
	if got := *out["EUR"]; got != (Settlement{ChargeCount: 3, Charges: 3000, Fees: 120, Net: 2880, Refunds: -500}) {
		t.Errorf("EUR after adding: %+v", got)
	}
	if out["USD"] == nil || out["USD"].ChargeCount != 1 {
		t.Errorf("USD after adding: %+v", out["USD"])
	}
	big := map[string]*Settlement{"EUR": {Charges: math.MaxInt64}}
	if err := addTally(big, map[string]*Settlement{"EUR": {Charges: 1}}); err == nil {
		t.Error("an overflowing sum added without an error")
	}
}
