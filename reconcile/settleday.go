package reconcile

import (
	"fmt"
	"strings"

	"github.com/payorch/payorch/providers"
)

// The day's charges are judged as they stream by (dayTally), not staged:
// a day of a million charges whose fees agree with the schedule is a
// million rows COPY would write and the fee rule and the sums would read
// back, for nothing found. Only what the tally cannot vouch for is staged
// as before, and judged by the same SQL: a charge whose fee the schedule
// disputes, any other movement, and any amount too large for int64
// arithmetic to be exact (feeMismatchesSQL and settlementSQL compute in
// numeric). A charge's fee agreeing is decided as feeMismatchesSQL
// decides it (FeeSchedule.Agrees is the same formula), so the findings
// are the same; the held-out charges' sums are added to those of the
// staged rows (settlementOf).

// tallyMaxMinor bounds the amounts dayTally takes: the product of such a
// gross and a rate of at most 10,000 basis points, plus a fixed fee of at
// most tallyMaxMinor, is far from overflowing int64.
const tallyMaxMinor = 100_000_000_000_000 // 10^14

// dayTally holds out of staging the day's charges whose fee agrees, and
// sums them by currency (the staged currency: upper case, printable).
type dayTally struct {
	// fees is the schedule the fees are checked against (nil: none, no
	// fee is judged); off when it has a rule dayTally does not take.
	fees *FeeSchedule
	off  bool
	sums map[string]*Settlement
}

func newDayTally(fees *FeeVersion) *dayTally {
	t := &dayTally{sums: map[string]*Settlement{}}
	if fees == nil {
		return t
	}
	s := fees.Schedule
	t.fees = &s
	rules := make([]FeeRule, 0, len(s.Currencies)+1)
	for _, r := range s.Currencies {
		rules = append(rules, r)
	}
	if s.Default != nil {
		rules = append(rules, *s.Default)
	}
	for _, r := range rules {
		if r.PercentBP < 0 || r.PercentBP > maxFeeBP || r.FixedMinor < 0 || r.FixedMinor > tallyMaxMinor {
			t.off = true
		}
	}
	return t
}

func inTallyRange(v int64) bool { return v >= -tallyMaxMinor && v <= tallyMaxMinor }

// take reports whether b, a balance transaction of the day, is held out
// of staging: a charge whose fee agrees with the schedule (or that no
// rule judges) and whose amounts the sums can take exactly. It is then
// summed.
func (t *dayTally) take(b providers.BalanceTransaction) bool {
	if t.off || printable(b.Type) != providers.BalanceCharge || !inTallyRange(b.GrossMinor) ||
		!inTallyRange(b.FeeMinor) || !inTallyRange(b.NetMinor) {
		return false
	}
	cur := strings.ToUpper(printable(b.Currency))
	if t.fees != nil && !t.fees.Agrees(cur, b.GrossMinor, b.FeeMinor) {
		return false
	}
	s := t.sums[cur]
	if s == nil {
		s = &Settlement{}
		t.sums[cur] = s
	}
	charges, ok1 := addInt64(s.Charges, b.GrossMinor)
	fees, ok2 := addInt64(s.Fees, b.FeeMinor)
	net, ok3 := addInt64(s.Net, b.NetMinor)
	if !ok1 || !ok2 || !ok3 {
		return false // staged: numeric sums it
	}
	s.ChargeCount++
	s.Charges, s.Fees, s.Net = charges, fees, net
	return true
}

// addTally adds the held-out charges' sums to the staged rows' (by
// currency); an error when a sum leaves int64, as settlementSQL's would.
func addTally(out map[string]*Settlement, tally map[string]*Settlement) error {
	for cur, t := range tally {
		s := out[cur]
		if s == nil {
			s = &Settlement{}
			out[cur] = s
		}
		var ok [4]bool
		s.ChargeCount, ok[0] = addInt64(s.ChargeCount, t.ChargeCount)
		s.Charges, ok[1] = addInt64(s.Charges, t.Charges)
		s.Fees, ok[2] = addInt64(s.Fees, t.Fees)
		s.Net, ok[3] = addInt64(s.Net, t.Net)
		if ok != [4]bool{true, true, true, true} {
			return fmt.Errorf("sum the day's settlement: %s out of range", cur)
		}
	}
	return nil
}
