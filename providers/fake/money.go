package fake

import (
	"slices"
	"strings"
	"time"

	"github.com/payorch/payorch/providers"
)

// balanceTxn is one movement of the fake's balance as stored: a charge (a
// capture), a refund, a dispute's withdrawal or a payout. Its net is
// gross − fee (netOf).
type balanceTxn struct {
	id        string
	typ       string
	source    string
	holdRef   string
	paymentID string
	opKey     string
	currency  string
	gross     int64
	fee       int64
	// payoutID is the payout that paid it out ("" until one has); a
	// payout's own movement carries its payout.
	payoutID    string
	created     time.Time
	availableOn time.Time
}

// payoutRec is one payout as stored. Its status is not stored: it is
// in_transit until ArrivalDate by the clock, paid from then (drifts aside).
type payoutRec struct {
	id        string
	amount    int64
	currency  string
	reference string
	created   time.Time
	arrival   time.Time
}

// utcDay is midnight UTC of t's day.
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// bookLocked records a movement of h's money made at now: a charge
// (gross > 0, the fee of the schedule), a refund (gross < 0, no fee: as
// Stripe, a refund does not return the charge's fee) or a dispute's
// withdrawal (gross < 0, the schedule's dispute fee). key is the
// idempotency key of the request that made it, source the object it is
// for. It becomes available PayoutDelayDays days after now's day.
// Called with s.mu held.
func (s *Server) bookLocked(now time.Time, typ string, h *hold, source, key string, gross int64) {
	rule := s.feeRule(h.currency)
	var fee int64
	switch typ {
	case providers.BalanceCharge:
		fee = rule.ChargeFee(gross)
	case providers.BalanceDispute:
		fee = rule.DisputeMinor
	}
	bt := &balanceTxn{
		id: newID("fbt_"), typ: typ, source: source, holdRef: h.ref, paymentID: h.metadata[metaPaymentID],
		opKey: key, currency: h.currency, gross: gross, fee: fee,
		created: now, availableOn: utcDay(now).AddDate(0, 0, s.cfg.PayoutDelayDays),
	}
	s.bts = append(s.bts, bt)
	s.unpaid = append(s.unpaid, bt)
}

// settleLocked computes the payouts due by now that are not yet made, one
// day at a time, so that what is asked for a window is stable: every day
// D after s.settledThrough up to now's day pays out, per currency, the
// movements available by D (availableOn ≤ D) not yet paid out, in one
// payout created at D's midnight, when their nets add up to more than
// zero. A day whose nets add up to zero or less pays nothing: they are
// carried to the next day that has more (Stripe carries a negative
// balance likewise). A movement booked with a time whose payout day was
// already settled (a hold seeded in the past) goes into the next day's
// payout. It reports whether it made any. Called with s.mu held.
func (s *Server) settleLocked(now time.Time) bool {
	today := utcDay(now)
	if !today.After(s.settledThrough) {
		return false
	}
	first := s.settledThrough.AddDate(0, 0, 1)
	dueDay := func(bt *balanceTxn) time.Time {
		if bt.availableOn.Before(first) {
			return first
		}
		return bt.availableOn
	}
	var due, later []*balanceTxn
	for _, bt := range s.unpaid {
		if dueDay(bt).After(today) {
			later = append(later, bt)
		} else {
			due = append(due, bt)
		}
	}
	// Stable: movements of a day keep their booking order.
	slices.SortStableFunc(due, func(a, b *balanceTxn) int { return dueDay(a).Compare(dueDay(b)) })
	carried := map[string][]*balanceTxn{}
	made := false
	for i := 0; i < len(due); {
		day := dueDay(due[i])
		currencies := map[string]bool{}
		for ; i < len(due) && dueDay(due[i]).Equal(day); i++ {
			currencies[due[i].currency] = true
			carried[due[i].currency] = append(carried[due[i].currency], due[i])
		}
		for _, cur := range sortedKeys(currencies) {
			var paid bool
			carried[cur], paid = s.payOutLocked(day, cur, carried[cur])
			made = made || paid
		}
	}
	s.unpaid = later
	for _, cur := range sortedKeys(carried) {
		s.unpaid = append(s.unpaid, carried[cur]...)
	}
	s.settledThrough = today
	return made
}

// payOutLocked pays items (of currency) out at day when their nets add up
// to more than zero, and returns those left unpaid: all of them when they
// do not, else any that would have made the amount overflow. The payout
// has a movement of its own (negative, its own payout). Called with s.mu
// held.
func (s *Server) payOutLocked(day time.Time, currency string, items []*balanceTxn) ([]*balanceTxn, bool) {
	var sum int64
	var in, left []*balanceTxn
	for _, bt := range items {
		next, err := addChecked(sum, netOf(bt.gross, bt.fee))
		if err != nil {
			left = append(left, bt)
			continue
		}
		sum = next
		in = append(in, bt)
	}
	if sum <= 0 {
		return items, false
	}
	p := &payoutRec{id: newID("fpo_"), amount: sum, currency: currency, created: day, arrival: day.AddDate(0, 0, 1)}
	p.reference = "FAKEPAYOUT-" + strings.ToUpper(strings.TrimPrefix(p.id, "fpo_"))
	for _, bt := range in {
		bt.payoutID = p.id
	}
	s.payouts = append(s.payouts, p)
	s.bts = append(s.bts, &balanceTxn{
		id: newID("fbt_"), typ: providers.BalancePayout, source: p.id, currency: currency,
		gross: -sum, payoutID: p.id, created: day, availableOn: day,
	})
	return left, true
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// payoutStatus is p's status at now: in transit until its arrival date,
// then paid.
func (p *payoutRec) status(now time.Time) string {
	if now.Before(p.arrival) {
		return providers.PayoutInTransit
	}
	return providers.PayoutPaid
}
