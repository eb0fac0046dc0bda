package fake_test

import (
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// moneyDay is the first day of the money tests; payouts are made at
// midnight UTC of later days.
var moneyDay = time.Date(2026, 4, 6, 0, 0, 0, 0, time.UTC)

// allTime is a window holding every movement and payout of these tests.
var allTime = providers.ReportRequest{From: moneyDay.AddDate(0, 0, -30), To: moneyDay.AddDate(0, 0, 60)}

// balance reads the balance transactions of req.
func balance(t *testing.T, c *fake.Client, req providers.ReportRequest) []providers.BalanceTransaction {
	t.Helper()
	var out []providers.BalanceTransaction
	if err := c.BalanceTransactions(t.Context(), req, func(b providers.BalanceTransaction) error {
		out = append(out, b)
		return nil
	}); err != nil {
		t.Fatalf("BalanceTransactions: %v", err)
	}
	return out
}

// payouts reads the payouts of req.
func payouts(t *testing.T, c *fake.Client, req providers.ReportRequest) []providers.Payout {
	t.Helper()
	var out []providers.Payout
	if err := c.Payouts(t.Context(), req, func(p providers.Payout) error {
		out = append(out, p)
		return nil
	}); err != nil {
		t.Fatalf("Payouts: %v", err)
	}
	return out
}

// movements leaves the payouts' own balance transactions out.
func movements(bts []providers.BalanceTransaction) []providers.BalanceTransaction {
	var out []providers.BalanceTransaction
	for _, b := range bts {
		if b.Type != providers.BalancePayout {
			out = append(out, b)
		}
	}
	return out
}

// captureOf captures amount of ref (0: all) with a fresh key and returns the
// key.
func captureOf(t *testing.T, c *fake.Client, ref string, amount int64, notFinal bool) string {
	t.Helper()
	key := newKey(t)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: ref, AmountMinor: amount, NotFinal: notFinal}); err != nil {
		t.Fatalf("Capture %s %d: %v", ref, amount, err)
	}
	return key
}

// refund refunds amount of ref with a fresh key and returns the refund.
func refund(t *testing.T, c *fake.Client, ref string, amount int64) (providers.Refund, string) {
	t.Helper()
	key := newKey(t)
	rf, err := c.Refund(t.Context(), providers.RefundRequest{Key: key, Ref: ref, AmountMinor: amount})
	if err != nil {
		t.Fatalf("Refund %s %d: %v", ref, amount, err)
	}
	return rf, key
}

// authorizeIn places an approving hold of amount in currency.
func authorizeIn(t *testing.T, c *fake.Client, amount int64, currency string) (providers.Hold, providers.AuthorizeRequest) {
	t.Helper()
	req := authReq(t, amount)
	req.Currency = currency
	h, err := c.Authorize(t.Context(), req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	return h, req
}

func TestChargeFeeRoundsHalfUpWithoutOverflow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule  fake.FeeRule
		gross int64
		want  int64
	}{
		{fake.FeeRule{PercentBP: 140, FixedMinor: 25}, 10000, 165},
		{fake.FeeRule{PercentBP: 140, FixedMinor: 25}, 1234, 42}, // 17.276 → 17
		{fake.FeeRule{PercentBP: 140, FixedMinor: 25}, 250, 29},  // 3.5 → 4
		{fake.FeeRule{PercentBP: 100}, 50, 1},                    // 0.5 → 1
		{fake.FeeRule{PercentBP: 100}, 49, 0},                    // 0.49 → 0
		{fake.FeeRule{PercentBP: 360}, 125, 5},                   // 4.5 → 5
		{fake.FeeRule{PercentBP: 140, FixedMinor: 25}, 0, 0},     // nothing charged
		{fake.FeeRule{PercentBP: 140, FixedMinor: 25}, -500, 0},  // not a charge
		{fake.FeeRule{PercentBP: 10000}, math.MaxInt64, math.MaxInt64},
		{fake.FeeRule{PercentBP: 10000, FixedMinor: 25}, math.MaxInt64, math.MaxInt64}, // saturates
		// 9223372036854775807 × 140 / 10000 = 129127208515966861.298 → …861
		{fake.FeeRule{PercentBP: 140}, math.MaxInt64, 129127208515966861},
	} {
		if got := tc.rule.ChargeFee(tc.gross); got != tc.want {
			t.Errorf("%+v.ChargeFee(%d) = %d, want %d", tc.rule, tc.gross, got, tc.want)
		}
	}
}

func TestFeesFollowTheConnectorsSchedule(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(moneyDay.Add(10 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now,
		Fees: map[string]fake.FeeRule{
			"EUR": {PercentBP: 140, FixedMinor: 25},
			"JPY": {PercentBP: 360}, // a zero-decimal currency: minor units are yen
		},
		DefaultFee: &fake.FeeRule{PercentBP: 290, FixedMinor: 30},
	})
	type want struct {
		currency   string
		gross, fee int64
	}
	cases := []want{
		{"EUR", 10000, 165}, {"EUR", 1234, 42}, {"EUR", 250, 29},
		{"JPY", 1000, 36}, {"JPY", 125, 5}, {"JPY", 1234, 44},
		{"USD", 1000, 59}, {"USD", 50, 31}, {"USD", 5, 30}, // a fee above the charge: net negative
	}
	keys := map[string]want{}
	holds := map[string]providers.AuthorizeRequest{}
	for _, w := range cases {
		h, req := authorizeIn(t, c, w.gross, w.currency)
		key := captureOf(t, c, h.Ref, 0, false)
		keys[key], holds[key] = w, req
	}
	bts := balance(t, c, providers.ReportRequest{From: moneyDay, To: moneyDay.AddDate(0, 0, 1)})
	if len(bts) != len(cases) {
		t.Fatalf("%d balance transactions, want one per capture (%d): the authorizations book none; %+v", len(bts), len(cases), bts)
	}
	for _, b := range bts {
		w, ok := keys[b.OperationKey]
		if !ok {
			t.Fatalf("balance transaction %+v carries no capture's key", b)
		}
		if b.Type != providers.BalanceCharge || b.Currency != w.currency || b.GrossMinor != w.gross || b.FeeMinor != w.fee ||
			b.NetMinor != w.gross-w.fee || b.PaymentID != holds[b.OperationKey].PaymentID || b.HoldRef == "" || b.Source != b.HoldRef {
			t.Errorf("balance transaction %+v, want a charge of %d %s with fee %d of payment %s", b, w.gross, w.currency, w.fee, holds[b.OperationKey].PaymentID)
		}
		if !b.CreatedAt.Equal(clk.Now()) || !b.AvailableOn.Equal(moneyDay.AddDate(0, 0, fake.DefaultPayoutDelayDays)) || b.PayoutID != "" {
			t.Errorf("balance transaction %+v: created %s, available %s, payout %q; want now, T+%d, none yet",
				b, b.CreatedAt, b.AvailableOn, b.PayoutID, fake.DefaultPayoutDelayDays)
		}
	}
}

func TestTheDefaultFeeSchedule(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(moneyDay.Add(10 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now})
	h, _ := authorizeIn(t, c, 2000, "GBP")
	captureOf(t, c, h.Ref, 0, false)
	if _, err := c.OpenDispute(t.Context(), fake.Dispute{HoldRef: h.Ref}); err != nil {
		t.Fatalf("OpenDispute: %v", err)
	}
	bts := balance(t, c, allTime)
	// 2000 × 1.4 % = 28, + 25; the dispute costs 1500.
	if len(bts) != 2 || bts[0].FeeMinor != 53 || bts[1].Type != providers.BalanceDispute || bts[1].FeeMinor != fake.DefaultDisputeFeeMinor {
		t.Fatalf("balance transactions %+v, want a charge with fee 53 and a dispute with fee %d", bts, fake.DefaultDisputeFeeMinor)
	}
}

func TestADaysMovesAreItsBalanceTransactions(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(moneyDay.Add(9 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now, Fees: map[string]fake.FeeRule{"EUR": {PercentBP: 100, FixedMinor: 10, DisputeMinor: 1500}}})
	ctx := t.Context()

	authorize(t, c, 500) // authorized only: no money moves
	refunded, refundedReq := authorizeIn(t, c, 3000, "EUR")
	captureKey := captureOf(t, c, refunded.Ref, 0, false)
	rf1, rf1Key := refund(t, c, refunded.Ref, 500)
	rf2, rf2Key := refund(t, c, refunded.Ref, 0)
	disputed, disputedReq := authorizeIn(t, c, 4000, "EUR")
	disputeCapture := captureOf(t, c, disputed.Ref, 0, false)
	ev, err := c.OpenDispute(ctx, fake.Dispute{HoldRef: disputed.Ref, AmountMinor: 800})
	if err != nil {
		t.Fatalf("OpenDispute: %v", err)
	}
	canceled := authorize(t, c, 700)
	if _, err := c.Cancel(ctx, providers.CancelRequest{Key: newKey(t), Ref: canceled.Ref}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	declinedReq := authReq(t, 900)
	declinedReq.PaymentMethod = "pm_card_chargeDeclined"
	_, err = c.Authorize(ctx, declinedReq)
	wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
	// A replayed capture and a refused one move nothing either.
	if _, err := c.Capture(ctx, providers.CaptureRequest{Key: captureKey, Ref: refunded.Ref}); err != nil {
		t.Fatalf("replayed capture: %v", err)
	}
	_, err = c.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: canceled.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)

	got := balance(t, c, providers.ReportRequest{From: moneyDay, To: moneyDay.AddDate(0, 0, 1)})
	type row struct {
		typ, source, hold, payment, key string
		gross, fee, net                 int64
	}
	want := []row{
		{providers.BalanceCharge, refunded.Ref, refunded.Ref, refundedReq.PaymentID, captureKey, 3000, 40, 2960},
		{providers.BalanceRefund, rf1.Ref, refunded.Ref, refundedReq.PaymentID, rf1Key, -500, 0, -500},
		{providers.BalanceRefund, rf2.Ref, refunded.Ref, refundedReq.PaymentID, rf2Key, -2500, 0, -2500},
		{providers.BalanceCharge, disputed.Ref, disputed.Ref, disputedReq.PaymentID, disputeCapture, 4000, 50, 3950},
		{providers.BalanceDispute, ev.Data.ObjectID, disputed.Ref, disputedReq.PaymentID, "", -800, 1500, -2300},
	}
	if len(got) != len(want) {
		t.Fatalf("%d balance transactions, want %d: %+v", len(got), len(want), got)
	}
	ids := map[string]bool{}
	for i, b := range got {
		g := row{b.Type, b.Source, b.HoldRef, b.PaymentID, b.OperationKey, b.GrossMinor, b.FeeMinor, b.NetMinor}
		if g != want[i] || b.Currency != "EUR" || ids[b.ID] || !strings.HasPrefix(b.ID, "fbt_") {
			t.Errorf("balance transaction %d: %+v, want %+v in EUR with an id of its own", i+1, b, want[i])
		}
		ids[b.ID] = true
	}
	// The window is of their creation.
	if next := balance(t, c, providers.ReportRequest{From: moneyDay.AddDate(0, 0, 1), To: moneyDay.AddDate(0, 0, 2)}); len(next) != 0 {
		t.Errorf("the next day lists %+v, want nothing", next)
	}
}

func TestEachPartOfAMulticaptureIsACharge(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(moneyDay.Add(9 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now})
	req := authReq(t, 1000)
	req.RequestMulticapture = true
	h, err := c.Authorize(t.Context(), req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	k1 := captureOf(t, c, h.Ref, 300, true)
	clk.Add(time.Minute)
	k2 := captureOf(t, c, h.Ref, 200, true)
	clk.Add(time.Minute)
	k3 := captureOf(t, c, h.Ref, 100, false) // final: the rest released, not charged
	got := balance(t, c, allTime)
	if len(got) != 3 {
		t.Fatalf("%d balance transactions, want one per capture: %+v", len(got), got)
	}
	for i, w := range []struct {
		key   string
		gross int64
	}{{k1, 300}, {k2, 200}, {k3, 100}} {
		if b := got[i]; b.Type != providers.BalanceCharge || b.OperationKey != w.key || b.GrossMinor != w.gross || b.HoldRef != h.Ref || b.PaymentID != req.PaymentID {
			t.Errorf("part %d: %+v, want a charge of %d under key %s", i+1, b, w.gross, w.key)
		}
	}
}

// checkPayoutsAddUp checks that every payout's items add up to its amount,
// in its currency, and were available by its day, that its own movement
// takes its amount out, and that no movement is in two payouts.
func checkPayoutsAddUp(t *testing.T, bts []providers.BalanceTransaction, pos []providers.Payout) {
	t.Helper()
	sum, own := map[string]int64{}, map[string]int64{}
	for _, b := range bts {
		if b.PayoutID == "" {
			continue
		}
		if b.Type == providers.BalancePayout {
			own[b.PayoutID] += b.NetMinor
			continue
		}
		sum[b.PayoutID] += b.NetMinor
	}
	byID := map[string]providers.Payout{}
	for _, p := range pos {
		if _, dup := byID[p.ID]; dup {
			t.Errorf("payout %s listed twice", p.ID)
		}
		byID[p.ID] = p
		if sum[p.ID] != p.AmountMinor || own[p.ID] != -p.AmountMinor || p.AmountMinor <= 0 {
			t.Errorf("payout %+v: its items add up to %d, its own movement is %d", p, sum[p.ID], own[p.ID])
		}
	}
	for _, b := range bts {
		p, ok := byID[b.PayoutID]
		switch {
		case b.PayoutID == "":
		case !ok:
			t.Errorf("balance transaction %+v names an unknown payout", b)
		case b.Currency != p.Currency || b.AvailableOn.After(p.CreatedAt):
			t.Errorf("balance transaction %+v is in payout %+v: other currency, or not yet available", b, p)
		}
	}
}

func TestPayoutsAtTPlusNAddUpToTheirItems(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const delay = 3
	clk := testkit.NewClock(moneyDay.Add(8 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now, PayoutDelayDays: delay,
		Fees: map[string]fake.FeeRule{"JPY": {PercentBP: 360, DisputeMinor: 1000}}})
	const days = 6
	for d := range days {
		clk.Set(moneyDay.AddDate(0, 0, d).Add(8 * time.Hour))
		for range 6 + rng.IntN(6) {
			cur := []string{"EUR", "USD", "JPY"}[rng.IntN(3)]
			amount := 100 + rng.Int64N(50000)
			h, _ := authorizeIn(t, c, amount, cur)
			clk.Add(time.Minute)
			switch rng.IntN(5) {
			case 0: // authorized only
			case 1:
				captureOf(t, c, h.Ref, 0, false)
				refund(t, c, h.Ref, 1+rng.Int64N(amount))
			case 2:
				captureOf(t, c, h.Ref, 0, false)
				if _, err := c.OpenDispute(t.Context(), fake.Dispute{HoldRef: h.Ref}); err != nil {
					t.Fatalf("OpenDispute: %v", err)
				}
			default:
				captureOf(t, c, h.Ref, 0, false)
			}
		}
		// Asking on some days, not others, changes nothing.
		if rng.IntN(2) == 0 {
			payouts(t, c, allTime)
		}
	}
	clk.Set(moneyDay.AddDate(0, 0, days+delay+2))
	bts, pos := balance(t, c, allTime), payouts(t, c, allTime)
	if len(pos) == 0 {
		t.Fatal("no payouts")
	}
	checkPayoutsAddUp(t, bts, pos)
	// Daily at T+N: a day's movements are paid out N days later, or with
	// a later day's when their net was not positive.
	for _, b := range movements(bts) {
		if !b.AvailableOn.Equal(moneyDay.AddDate(0, 0, int(b.CreatedAt.Sub(moneyDay)/(24*time.Hour))+delay)) {
			t.Errorf("balance transaction %+v is available on %s, want T+%d", b, b.AvailableOn, delay)
		}
	}
	perDay := map[string]bool{}
	for _, p := range pos {
		key := p.CreatedAt.Format(time.DateOnly) + p.Currency
		if perDay[key] || !p.CreatedAt.Equal(p.CreatedAt.Truncate(24*time.Hour)) || !p.ArrivalDate.Equal(p.CreatedAt.AddDate(0, 0, 1)) ||
			p.Status != providers.PayoutPaid || p.Reference != "FAKEPAYOUT-"+strings.ToUpper(strings.TrimPrefix(p.ID, "fpo_")) {
			t.Errorf("payout %+v: want one per day and currency, made at midnight, arriving the next day, paid by now, referenced", p)
		}
		perDay[key] = true
	}
	// Everything available whose currency had a positive balance is paid.
	unpaid := map[string]int64{}
	for _, b := range movements(bts) {
		if b.PayoutID == "" {
			unpaid[b.Currency] += b.NetMinor
		}
	}
	for cur, net := range unpaid {
		if net > 0 {
			t.Errorf("%d %s available for days is not paid out", net, cur)
		}
	}
}

func TestANegativeDayIsCarriedToTheNextPayout(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(moneyDay.Add(10 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now, PayoutDelayDays: 1, Fees: map[string]fake.FeeRule{"EUR": {PercentBP: 100}}})
	x, _ := authorizeIn(t, c, 1000, "EUR")
	captureOf(t, c, x.Ref, 0, false) // day 0: +990, paid day 1
	clk.Add(24 * time.Hour)
	refund(t, c, x.Ref, 0) // day 1: −1000, due day 2: no payout
	clk.Add(24 * time.Hour)
	y, _ := authorizeIn(t, c, 5000, "EUR")
	captureOf(t, c, y.Ref, 0, false) // day 2: +4950, due day 3 with the refund
	clk.Set(moneyDay.AddDate(0, 0, 3).Add(time.Hour))

	pos := payouts(t, c, allTime)
	if len(pos) != 2 || pos[0].AmountMinor != 990 || !pos[0].CreatedAt.Equal(moneyDay.AddDate(0, 0, 1)) ||
		pos[1].AmountMinor != 3950 || !pos[1].CreatedAt.Equal(moneyDay.AddDate(0, 0, 3)) {
		t.Fatalf("payouts %+v, want 990 on day 1, nothing on day 2, 4950 − 1000 on day 3", pos)
	}
	if pos[0].Status != providers.PayoutPaid || pos[1].Status != providers.PayoutInTransit {
		t.Errorf("statuses %s and %s, want paid (arrived) and in_transit (arrives tomorrow)", pos[0].Status, pos[1].Status)
	}
	checkPayoutsAddUp(t, balance(t, c, allTime), pos)
	clk.Set(moneyDay.AddDate(0, 0, 4))
	if again := payouts(t, c, allTime); again[1].Status != providers.PayoutPaid {
		t.Errorf("on its arrival date the payout is %s, want paid", again[1].Status)
	}
}

// driftEnv is a fake with two days of movements in EUR paid out: payout
// p1 of day 0's, p2 of day 1's.
type driftEnv struct {
	clk    *testkit.Clock
	r      *fake.Running
	c      *fake.Client
	p1, p2 providers.Payout
	items1 []providers.BalanceTransaction
}

func newDriftEnv(t *testing.T, cfg fake.Config) *driftEnv {
	t.Helper()
	e := &driftEnv{clk: testkit.NewClock(moneyDay.Add(10 * time.Hour))}
	cfg.Clock, cfg.PayoutDelayDays = e.clk.Now, 1
	e.r, e.c = start(t, cfg)
	for range 2 {
		for _, amount := range []int64{1000, 2500} {
			h, _ := authorizeIn(t, e.c, amount, "EUR")
			captureOf(t, e.c, h.Ref, 0, false)
		}
		e.clk.Add(24 * time.Hour)
	}
	e.clk.Add(24 * time.Hour)
	pos := payouts(t, e.c, allTime)
	if len(pos) != 2 {
		t.Fatalf("payouts %+v, want 2", pos)
	}
	e.p1, e.p2 = pos[0], pos[1]
	for _, b := range balance(t, e.c, allTime) {
		if b.PayoutID == e.p1.ID && b.Type != providers.BalancePayout {
			e.items1 = append(e.items1, b)
		}
	}
	return e
}

func (e *driftEnv) drift(t *testing.T, d fake.MoneyDrift) fake.MoneyDrift {
	t.Helper()
	out, err := e.c.MoneyDrift(t.Context(), d)
	if err != nil {
		t.Fatalf("MoneyDrift(%+v): %v", d, err)
	}
	return out
}

// find returns the balance transaction id of bts, and whether it is there.
func find(bts []providers.BalanceTransaction, id string) (providers.BalanceTransaction, bool) {
	for _, b := range bts {
		if b.ID == id {
			return b, true
		}
	}
	return providers.BalanceTransaction{}, false
}

// itemsSum is the sum of the nets of payout id's items.
func itemsSum(bts []providers.BalanceTransaction, id string) int64 {
	var n int64
	for _, b := range movements(bts) {
		if b.PayoutID == id {
			n += b.NetMinor
		}
	}
	return n
}

func TestMoneyDriftsShowInTheListings(t *testing.T) {
	t.Parallel()
	t.Run("FeeChangesTheNetAndThePayoutThatPaidIt", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		it := e.items1[0]
		e.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: it.ID, FeeMinor: it.FeeMinor + 7})
		bts, pos := balance(t, e.c, allTime), payouts(t, e.c, allTime)
		b, _ := find(bts, it.ID)
		if b.FeeMinor != it.FeeMinor+7 || b.NetMinor != it.NetMinor-7 || pos[0].AmountMinor != e.p1.AmountMinor-7 || pos[1] != e.p2 {
			t.Fatalf("after a fee drift: %+v and payouts %+v; want the fee and net 7 off, payout 1 7 lower, payout 2 as it was", b, pos)
		}
		checkPayoutsAddUp(t, bts, pos)
	})
	t.Run("DroppedItemLeavesThePayoutUnexplained", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		it := e.items1[1]
		e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemDrop, BalanceTransaction: it.ID})
		bts, pos := balance(t, e.c, allTime), payouts(t, e.c, allTime)
		b, ok := find(bts, it.ID)
		if !ok || b.PayoutID != "" || pos[0].AmountMinor != e.p1.AmountMinor || itemsSum(bts, e.p1.ID) != e.p1.AmountMinor-it.NetMinor {
			t.Fatalf("after dropping an item: %+v, payout %+v, items add up to %d", b, pos[0], itemsSum(bts, e.p1.ID))
		}
	})
	t.Run("DroppedBalanceTransactionIsNotListed", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		e.drift(t, fake.MoneyDrift{Kind: fake.DriftBalanceDrop, BalanceTransaction: e.items1[0].ID})
		if _, ok := find(balance(t, e.c, allTime), e.items1[0].ID); ok {
			t.Fatal("the dropped balance transaction is listed")
		}
	})
	t.Run("AmountOffByACent", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutAmount, Payout: e.p2.ID, AmountMinor: e.p2.AmountMinor - 1})
		bts, pos := balance(t, e.c, allTime), payouts(t, e.c, allTime)
		if pos[1].AmountMinor != e.p2.AmountMinor-1 || itemsSum(bts, e.p2.ID) != e.p2.AmountMinor || pos[0] != e.p1 {
			t.Fatalf("after a payout_amount drift: %+v, items %d", pos, itemsSum(bts, e.p2.ID))
		}
	})
	t.Run("UnknownItemAdded", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		d := e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: e.p1.ID,
			Item: &fake.BalanceTransaction{GrossMinor: 400, FeeMinor: 30, HoldRef: "fh_nobody"}})
		bts, pos := balance(t, e.c, allTime), payouts(t, e.c, allTime)
		b, ok := find(bts, d.Item.ID)
		if !ok || b.PayoutID != e.p1.ID || b.NetMinor != 370 || b.Type != providers.BalanceCharge || b.Currency != "EUR" ||
			pos[0].AmountMinor != e.p1.AmountMinor+370 {
			t.Fatalf("after adding an item: %+v (listed %v), payout %+v", b, ok, pos[0])
		}
		checkPayoutsAddUp(t, bts, pos)
	})
	t.Run("PayoutThatNeverArrives", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutStatus, Payout: e.p1.ID, Status: providers.PayoutFailed})
		e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutStatus, Payout: e.p2.ID, Status: providers.PayoutInTransit})
		e.clk.Add(30 * 24 * time.Hour)
		pos := payouts(t, e.c, allTime)
		if pos[0].Status != providers.PayoutFailed || pos[1].Status != providers.PayoutInTransit {
			t.Fatalf("payouts %+v, want failed and in_transit long after their arrival dates", pos)
		}
		if err := e.c.ClearMoneyDrift(t.Context()); err != nil {
			t.Fatal(err)
		}
		if pos := payouts(t, e.c, allTime); pos[0].Status != providers.PayoutPaid || pos[1].Status != providers.PayoutPaid {
			t.Fatalf("after clearing the drifts: %+v, want both paid", pos)
		}
	})
	t.Run("InvalidDriftsAreRefused", func(t *testing.T) {
		t.Parallel()
		e := newDriftEnv(t, fake.Config{})
		var own string
		for _, b := range balance(t, e.c, allTime) {
			if b.Type == providers.BalancePayout {
				own = b.ID
			}
		}
		for _, tc := range []struct {
			d    fake.MoneyDrift
			code string
		}{
			{fake.MoneyDrift{Kind: "bogus"}, providers.CodeInvalidRequest},
			{fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: "fbt_nope", FeeMinor: 1}, providers.CodeNotFound},
			{fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: e.items1[0].ID, FeeMinor: -1}, providers.CodeInvalidRequest},
			{fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: own, FeeMinor: 1}, providers.CodeInvalidRequest},
			{fake.MoneyDrift{Kind: fake.DriftPayoutAmount, Payout: "fpo_nope", AmountMinor: 1}, providers.CodeNotFound},
			{fake.MoneyDrift{Kind: fake.DriftPayoutStatus, Payout: e.p1.ID, Status: "lost"}, providers.CodeInvalidRequest},
			{fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: e.p1.ID}, providers.CodeInvalidRequest},
			{fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: e.p1.ID, Item: &fake.BalanceTransaction{GrossMinor: 5, Currency: "USD"}}, providers.CodeInvalidRequest},
		} {
			_, err := e.c.MoneyDrift(t.Context(), tc.d)
			wantKind(t, err, providers.KindRejected, tc.code)
		}
		res := do(t, http.MethodPost, e.r.URL()+"/_admin/money/drift", nil, []byte(`{"kind":"fee","extra":1}`))
		if res.status != http.StatusBadRequest {
			t.Errorf("a drift with an unknown field: %d %s", res.status, res.body)
		}
	})
}

func TestMoneyListingsOverTheWire(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{TimeoutHang: 200 * time.Millisecond})
	for _, path := range []string{"/v1/balance_transactions", "/v1/payouts"} {
		for _, q := range []string{"", "?from=yesterday&to=2026-01-01T00:00:00Z", "?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z"} {
			res := do(t, http.MethodGet, r.URL()+path+q, nil, nil)
			if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), providers.CodeInvalidRequest) ||
				!strings.HasPrefix(res.header.Get("Content-Type"), "application/json") {
				t.Errorf("GET %s%s: %d %s", path, q, res.status, res.body)
			}
		}
		res := do(t, http.MethodGet, r.URL()+path+"?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", map[string]string{"Authorization": "Bearer wrong"}, nil)
		if res.status != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d", path, res.status)
		}
	}
	h := authorize(t, c, 1000)
	captureOf(t, c, h.Ref, 0, false)
	inject(t, c, fake.Fault{Operation: fake.OpBalanceTransactions, Kind: fake.FaultErrorBeforeExecute, Count: 1})
	err := c.BalanceTransactions(t.Context(), allTimeNow(), func(providers.BalanceTransaction) error { return nil })
	wantKind(t, err, providers.KindNotExecuted, "")
	inject(t, c, fake.Fault{Operation: fake.OpPayouts, Kind: fake.FaultErrorBeforeExecute, Count: 1, Status: http.StatusInternalServerError})
	err = c.Payouts(t.Context(), allTimeNow(), func(providers.Payout) error { return nil })
	wantKind(t, err, providers.KindUnknown, "")
	inject(t, c, fake.Fault{Operation: fake.OpBalanceTransactions, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
	n := 0
	err = c.BalanceTransactions(t.Context(), allTimeNow(), func(providers.BalanceTransaction) error { n++; return nil })
	if wantKind(t, err, providers.KindUnknown, ""); n != 1 {
		t.Errorf("a listing cut before its end passed %d lines, want the 1 before the cut", n)
	}
}

// allTimeNow is a window around the real clock.
func allTimeNow() providers.ReportRequest {
	now := time.Now()
	return providers.ReportRequest{From: now.Add(-time.Hour), To: now.Add(time.Hour)}
}

func TestMoneySurvivesARestart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "fake.json")
	clk := testkit.NewClock(moneyDay.Add(10 * time.Hour))
	cfg := fake.Config{Clock: clk.Now, StateFile: file, PayoutDelayDays: 1}
	r1, c1 := start(t, cfg)
	h, _ := authorizeIn(t, c1, 1000, "EUR")
	captureOf(t, c1, h.Ref, 0, false)
	refund(t, c1, h.Ref, 100)
	clk.Add(24 * time.Hour)
	h2, _ := authorizeIn(t, c1, 3000, "EUR")
	captureOf(t, c1, h2.Ref, 0, false)
	pos := payouts(t, c1, allTime) // makes day 1's payout, of day 0's movements
	if len(pos) != 1 {
		t.Fatalf("payouts %+v, want day 1's", pos)
	}
	if _, err := c1.MoneyDrift(t.Context(), fake.MoneyDrift{Kind: fake.DriftPayoutStatus, Payout: pos[0].ID, Status: providers.PayoutFailed}); err != nil {
		t.Fatal(err)
	}
	btsBefore, posBefore := balance(t, c1, allTime), payouts(t, c1, allTime)
	shutdown(t, r1)

	_, c2 := start(t, cfg)
	if got := balance(t, c2, allTime); !reflect.DeepEqual(got, btsBefore) {
		t.Errorf("balance transactions after a restart:\n%+v\nwant\n%+v", got, btsBefore)
	}
	if got := payouts(t, c2, allTime); !reflect.DeepEqual(got, posBefore) {
		t.Errorf("payouts after a restart:\n%+v\nwant\n%+v", got, posBefore)
	}
	// Day 1's movement is paid out on day 2, once: nothing paid before is
	// paid again.
	clk.Add(24 * time.Hour)
	pos = payouts(t, c2, allTime)
	if len(pos) != 2 || pos[1].AmountMinor != 3000-67 {
		t.Fatalf("payouts %+v, want day 2's of 3000 less its fee 67", pos)
	}
	checkPayoutsAddUp(t, balance(t, c2, allTime), pos)
}

func TestAStateFileWithoutMoneyStillLoads(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "fake.json")
	// The state file of a build before balance transactions: a captured
	// hold, no money.
	old := `{"version":1,"holds":[{"ref":"fh_old","payment_method":"pm_card_visa","status":"captured","amount_minor":500,` +
		`"captured_minor":500,"refunded_minor":0,"currency":"EUR","created_at":"2026-04-01T10:00:00Z","updated_at":"2026-04-01T10:00:00Z",` +
		`"touched":["2026-04-01T10:00:00Z"]}],"refunds":[],"idempotency_keys":[],"operations":[],"drifts":[]}` + "\n"
	if err := os.WriteFile(file, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(moneyDay.Add(10 * time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now, StateFile: file})
	if h, err := c.Lookup(t.Context(), "fh_old"); err != nil || h.CapturedMinor != 500 {
		t.Fatalf("Lookup: %+v %v", h, err)
	}
	if bts, pos := balance(t, c, allTime), payouts(t, c, allTime); len(bts) != 0 || len(pos) != 0 {
		t.Fatalf("an old state lists %+v and %+v, want no money (it booked none)", bts, pos)
	}
	// And the fake books from now on.
	h, _ := authorizeIn(t, c, 800, "EUR")
	captureOf(t, c, h.Ref, 0, false)
	if bts := balance(t, c, allTime); len(bts) != 1 {
		t.Fatalf("after a capture: %+v", bts)
	}
}

func TestSeededHoldsBookTheirMoney(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(moneyDay.Add(20 * time.Hour))
	r, c := start(t, fake.Config{Clock: clk.Now, Fees: map[string]fake.FeeRule{"EUR": {PercentBP: 100}}})
	at := moneyDay.Add(3 * time.Hour)
	if _, err := r.Server().Seed(fake.SeedHold{Ref: "fh_s1", PaymentID: "pay_s1", Status: providers.StatusPartiallyRefunded,
		AmountMinor: 2000, CapturedMinor: 2000, RefundedMinor: 300, Currency: "EUR", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Server().Seed(fake.SeedHold{Ref: "fh_s2", Status: providers.StatusAuthorized, AmountMinor: 900, Currency: "EUR", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	bts := balance(t, c, allTime)
	if len(bts) != 2 || bts[0].Type != providers.BalanceCharge || bts[0].GrossMinor != 2000 || bts[0].FeeMinor != 20 ||
		bts[1].Type != providers.BalanceRefund || bts[1].GrossMinor != -300 || bts[0].PaymentID != "pay_s1" || !bts[0].CreatedAt.Equal(at) {
		t.Fatalf("seeded money %+v, want a charge of 2000 (fee 20) and a refund of 300 of pay_s1", bts)
	}
}

func TestMoneyConfigIsValidated(t *testing.T) {
	t.Parallel()
	for _, cfg := range []fake.Config{
		{PayoutDelayDays: -1},
		{PayoutDelayDays: 31},
		{Fees: map[string]fake.FeeRule{"eur": {}}},
		{Fees: map[string]fake.FeeRule{"EUR": {PercentBP: 10001}}},
		{Fees: map[string]fake.FeeRule{"EUR": {FixedMinor: -1}}},
		{DefaultFee: &fake.FeeRule{DisputeMinor: -5}},
	} {
		if r, err := fake.Start("", cfg); err == nil {
			r.Shutdown(t.Context())
			t.Errorf("Start(%+v) accepted an invalid money config", cfg)
		}
	}
}

// payoutItems reads the items of payout id.
func payoutItems(t *testing.T, c *fake.Client, id string) []providers.BalanceTransaction {
	t.Helper()
	var out []providers.BalanceTransaction
	if err := c.PayoutItems(t.Context(), id, func(b providers.BalanceTransaction) error {
		out = append(out, b)
		return nil
	}); err != nil {
		t.Fatalf("PayoutItems(%s): %v", id, err)
	}
	return out
}

// TestPayoutItemsAreWhatThePayoutPaid: a payout's list holds the
// movements it paid and its own, as the day's listing shows them, the
// money drifts included (a fee drift's fee, an unlinked item gone, an
// added item there, a dropped one gone); an unknown payout is
// resource_missing and a window is refused.
func TestPayoutItemsAreWhatThePayoutPaid(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t, fake.Config{})
	items := payoutItems(t, e.c, e.p1.ID)
	if len(items) != len(e.items1)+1 || itemsSum(items, e.p1.ID) != e.p1.AmountMinor {
		t.Fatalf("items of %+v: %+v; want %+v and its own movement", e.p1, items, e.items1)
	}
	for _, it := range e.items1 {
		if b, ok := find(items, it.ID); !ok || b != it {
			t.Errorf("item %+v listed as %+v (%t)", it, b, ok)
		}
	}
	if len(payoutItems(t, e.c, e.p2.ID)) != 3 {
		t.Errorf("payout 2's items: %+v", payoutItems(t, e.c, e.p2.ID))
	}

	e.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: e.items1[0].ID, FeeMinor: 1})
	e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemDrop, BalanceTransaction: e.items1[1].ID})
	added := e.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: e.p1.ID,
		Item: &fake.BalanceTransaction{GrossMinor: 400, FeeMinor: 30}})
	items = payoutItems(t, e.c, e.p1.ID)
	if b, _ := find(items, e.items1[0].ID); b.FeeMinor != 1 || b.NetMinor != b.GrossMinor-1 {
		t.Errorf("the item of a fee drift: %+v", b)
	}
	if _, ok := find(items, e.items1[1].ID); ok {
		t.Error("an item unlinked by payout_item_drop is still listed")
	}
	if b, ok := find(items, added.Item.ID); !ok || b.NetMinor != 370 || b.PayoutID != e.p1.ID {
		t.Errorf("the added item: %+v (%t)", b, ok)
	}
	e.drift(t, fake.MoneyDrift{Kind: fake.DriftBalanceDrop, BalanceTransaction: e.items1[0].ID})
	if _, ok := find(payoutItems(t, e.c, e.p1.ID), e.items1[0].ID); ok {
		t.Error("a dropped balance transaction is still listed")
	}

	err := e.c.PayoutItems(t.Context(), "fpo_nope", func(providers.BalanceTransaction) error { return nil })
	wantKind(t, err, providers.KindRejected, providers.CodeNotFound)
	res := do(t, http.MethodGet, e.r.URL()+"/v1/balance_transactions?payout="+e.p1.ID+"&from=2026-01-01T00:00:00Z", nil, nil)
	if res.status != http.StatusBadRequest {
		t.Errorf("a payout's items with a window: %d %s", res.status, res.body)
	}
}
