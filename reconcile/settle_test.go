package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// moneyDays is three days of money at the fake, which pays out daily at
// T+1: day X (the day before yesterday of the run's day D, whose charges
// are due in a payout by D with a day's grace), the day between, whose
// charges D's payouts pay, and D itself. Each has captures (whole,
// partial, in parts), and refunds and a dispute come in between.
type moneyDays struct {
	e                   *env
	onX, between, onDay []orchestrator.Payment
	disputed            orchestrator.Payment
}

// The connector's terms in these tests: the fake's own fees (1.4 % + 25
// a charge, in every currency), paid out at T+1 with a day's grace, so
// the run of day D judges the charges of D − 2.
func feeTerms() reconcile.FeeSchedule {
	delay, grace := 1, 1
	return reconcile.FeeSchedule{
		Currencies: map[string]reconcile.FeeRule{"EUR": {PercentBP: 140, FixedMinor: 25}},
		Default:    &reconcile.FeeRule{PercentBP: 140, FixedMinor: 25}, PayoutDelayDays: &delay, PayoutGraceDays: &grace,
	}
}

func newMoneyDays(t *testing.T, terms *reconcile.FeeSchedule) *moneyDays {
	t.Helper()
	ctx := context.Background()
	e := newEnv(t, fake.Config{PayoutDelayDays: 1})
	m := &moneyDays{e: e}
	e.clk.Set(day.AddDate(0, 0, -2).Add(10 * time.Hour))
	m.onX = []orchestrator.Payment{
		e.pay(t, 1000, "EUR", "", "capture:0"),
		e.pay(t, 3000, "EUR", "", "capture:1200"),
		e.flexPay(t, 2000, "part:500", "capture:0"),
		e.pay(t, 2500, "USD", "", "capture:0"),
		e.pay(t, 900, "EUR", ""), // authorized only: no money
	}
	e.clk.Set(day.AddDate(0, 0, -1).Add(10 * time.Hour))
	m.disputed = e.pay(t, 5000, "EUR", "", "capture:0")
	m.between = []orchestrator.Payment{
		e.pay(t, 4000, "EUR", "", "capture:0", "refund:1000"),
		e.pay(t, 1500, "USD", "", "capture:0"),
		m.disputed,
	}
	if _, err := e.fc.OpenDispute(ctx, fake.Dispute{HoldRef: *m.disputed.ProviderRef, AmountMinor: 500}); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(day.Add(10 * time.Hour))
	m.onDay = append(e.aDay(t), e.flexPay(t, 3000, "part:1000", "part:700"))
	if terms != nil {
		if _, err := e.rec.SetFeeSchedule(ctx, "fake", *terms, "test"); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Set(runTime) // the payouts due by the run are made when listed
	return m
}

// all is every balance transaction of the days.
func (m *moneyDays) all(t *testing.T) []providers.BalanceTransaction {
	t.Helper()
	var out []providers.BalanceTransaction
	err := m.e.fc.BalanceTransactions(context.Background(), providers.ReportRequest{From: day.AddDate(0, 0, -10), To: day.AddDate(0, 0, 10)},
		func(bt providers.BalanceTransaction) error {
			out = append(out, bt)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// charges are p's charges, in the order they were booked.
func (m *moneyDays) charges(t *testing.T, p orchestrator.Payment) []providers.BalanceTransaction {
	t.Helper()
	var out []providers.BalanceTransaction
	for _, bt := range m.all(t) {
		if bt.Type == providers.BalanceCharge && bt.HoldRef == *p.ProviderRef {
			out = append(out, bt)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no charge of %s", p.ID)
	}
	return out
}

// payout is the payout in currency created on d.
func (m *moneyDays) payout(t *testing.T, d time.Time, currency string) providers.Payout {
	t.Helper()
	var found []providers.Payout
	err := m.e.fc.Payouts(context.Background(), providers.ReportRequest{From: d, To: d.AddDate(0, 0, 1)}, func(p providers.Payout) error {
		if p.Currency == currency {
			found = append(found, p)
		}
		return nil
	})
	if err != nil || len(found) != 1 {
		t.Fatalf("payouts in %s on %s: %+v %v", currency, d.Format(time.DateOnly), found, err)
	}
	return found[0]
}

func (m *moneyDays) drift(t *testing.T, d fake.MoneyDrift) fake.MoneyDrift {
	t.Helper()
	out, err := m.e.fc.MoneyDrift(context.Background(), d)
	if err != nil {
		t.Fatalf("MoneyDrift(%+v): %v", d, err)
	}
	return out
}

// settlementCategories are the categories of ds that settlement reports.
func only(ds []reconcile.Discrepancy, category string) []reconcile.Discrepancy {
	var out []reconcile.Discrepancy
	for _, d := range ds {
		if d.Category == category {
			out = append(out, d)
		}
	}
	return out
}

// TestSettlementOfACleanDay: three days of captures whole, partial and in
// parts, refunds, a dispute and the payouts of T+1, held against the
// connector's fees and payout terms, give no finding; the run's
// settlement is the day's money by currency; nothing stays staged.
func TestSettlementOfACleanDay(t *testing.T) {
	t.Parallel()
	terms := feeTerms()
	m := newMoneyDays(t, &terms)
	run, ds := m.e.run(t)
	if len(ds) != 0 {
		t.Fatalf("clean days: %s", categories(ds))
	}
	// D: EUR captures 2000 + 4000 (refund 1000) + parts 1000 and 700; USD
	// 1200; JPY 5000 (refunded whole). D's payouts pay the day between:
	// EUR 5000 − 95 − 500 − 1500 + 4000 − 81 − 1000, USD 1500 − 46.
	eur := run.Settlement["EUR"]
	want := reconcile.Settlement{ChargeCount: 4, Charges: 7700, Fees: 4*25 + 28 + 56 + 14 + 10, Refunds: -1000,
		Net: 7700 - 1000 - (4*25 + 28 + 56 + 14 + 10), PayoutCount: 1, PaidOut: 5000 - 95 - 2000 + 4000 - 81 - 1000}
	if eur == nil || *eur != want {
		t.Fatalf("EUR settlement %+v, want %+v", eur, want)
	}
	if usd := run.Settlement["USD"]; usd == nil || usd.Charges != 1200 || usd.Fees != 42 || usd.PaidOut != 1500-46 || usd.PayoutCount != 1 {
		t.Fatalf("USD settlement %+v", usd)
	}
	if jpy := run.Settlement["JPY"]; jpy == nil || jpy.Charges != 5000 || jpy.Refunds != -5000 || jpy.Net != -95 || jpy.PaidOut != 0 {
		t.Fatalf("JPY settlement %+v", jpy)
	}
	var staged int
	if err := m.e.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_money_rows`).Scan(&staged); err != nil || staged != 0 {
		t.Fatalf("%d money rows left staged (%v)", staged, err)
	}
}

// TestAWrongFeeIsFeeMismatch: a charge of the day whose fee the provider
// shows 7 over the schedule is fee_mismatch about its payment and that
// charge (two captures of one payment are two), with both fees, the
// difference and the schedule's version; a fee within the tolerance, or
// in a currency the schedule has no rule for, is not.
func TestAWrongFeeIsFeeMismatch(t *testing.T) {
	t.Parallel()
	terms := feeTerms()
	m := newMoneyDays(t, &terms)
	parts := m.charges(t, m.onDay[len(m.onDay)-1])
	for _, bt := range parts {
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: bt.ID, FeeMinor: bt.FeeMinor + 7})
	}
	_, ds := m.e.run(t)
	if got := categories(ds); got != "fee_mismatch/fee,fee_mismatch/fee" {
		t.Fatalf("findings %s, want a fee_mismatch of each part", got)
	}
	for i, d := range ds {
		bt := parts[i]
		if d.Detail["balance_transaction"] != bt.ID {
			bt = parts[1-i]
		}
		if deref(d.PaymentID) != m.onDay[len(m.onDay)-1].ID || deref(d.ProviderRef) != bt.HoldRef || d.Currency != "EUR" ||
			d.Expected != fmt.Sprint(bt.FeeMinor) || d.Actual != fmt.Sprint(bt.FeeMinor+7) || *d.DifferenceMinor != 7 ||
			d.Detail["gross_minor"] != float64(bt.GrossMinor) || d.Detail["schedule_version"] != float64(1) {
			t.Errorf("finding %+v, want the fee of %+v 7 over", d, bt)
		}
	}

	t.Run("WithinToleranceOrWithoutRule", func(t *testing.T) {
		t.Parallel()
		terms := feeTerms()
		terms.ToleranceMinor, terms.Default = 2, nil
		m := newMoneyDays(t, &terms)
		eur, usd := m.charges(t, m.onDay[1])[0], m.charges(t, m.onDay[2])[0]
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: eur.ID, FeeMinor: eur.FeeMinor - 2})
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: usd.ID, FeeMinor: usd.FeeMinor + 500})
		if _, ds := m.e.run(t); len(ds) != 0 {
			t.Fatalf("findings %s, want none", categories(ds))
		}
	})
	t.Run("WithoutSchedule", func(t *testing.T) {
		t.Parallel()
		m := newMoneyDays(t, nil)
		eur := m.charges(t, m.onDay[1])[0]
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: eur.ID, FeeMinor: eur.FeeMinor + 100})
		if _, ds := m.e.run(t); len(ds) != 0 {
			t.Fatalf("findings %s, want none", categories(ds))
		}
	})
}

// TestAPayoutThatDoesNotAddUpIsUnexplained: the day's payout shown a cent
// short, and another whose item lost its payout, are each
// payout_unexplained with the difference (amount − items), the items'
// count and sum and the arrival date.
func TestAPayoutThatDoesNotAddUpIsUnexplained(t *testing.T) {
	t.Parallel()
	m := newMoneyDays(t, nil)
	eur, usd := m.payout(t, day, "EUR"), m.payout(t, day, "USD")
	m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutAmount, Payout: eur.ID, AmountMinor: eur.AmountMinor - 1})
	dropped := m.charges(t, m.between[1])[0]
	m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemDrop, BalanceTransaction: dropped.ID})
	_, ds := m.e.run(t)
	if got := categories(ds); got != "payout_unexplained/amount,payout_unexplained/amount" {
		t.Fatalf("findings %s, want two payout_unexplained", got)
	}
	for _, d := range ds {
		switch d.Detail["payout"] {
		case eur.ID:
			if d.Expected != fmt.Sprint(eur.AmountMinor) || d.Actual != fmt.Sprint(eur.AmountMinor-1) || *d.DifferenceMinor != -1 ||
				d.Detail["item_count"] != float64(4) || d.Detail["arrival_date"] != "2026-12-01" || d.PaymentID != nil {
				t.Errorf("EUR payout finding %+v", d)
			}
		case usd.ID:
			if d.Expected != "0" || d.Actual != fmt.Sprint(usd.AmountMinor) || *d.DifferenceMinor != dropped.NetMinor ||
				d.Detail["item_count"] != float64(0) || d.Currency != "USD" {
				t.Errorf("USD payout finding %+v", d)
			}
		default:
			t.Errorf("finding about another payout: %+v", d)
		}
	}
}

// TestAPayoutItemOfNoPaymentIsUnknown: a charge added to the day's payout
// (the payout growing with it, so it adds up) whose hold is no payment of
// ours is payout_item_unknown, with the payout, the item, its type and
// net; so is a refund without a hold; an adjustment without one is not.
func TestAPayoutItemOfNoPaymentIsUnknown(t *testing.T) {
	t.Parallel()
	m := newMoneyDays(t, nil)
	eur := m.payout(t, day, "EUR")
	stranger := m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: eur.ID,
		Item: &fake.BalanceTransaction{GrossMinor: 400, FeeMinor: 30, HoldRef: "fh_nobody"}})
	holdless := m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: eur.ID,
		Item: &fake.BalanceTransaction{Type: providers.BalanceRefund, GrossMinor: -100}})
	m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: eur.ID,
		Item: &fake.BalanceTransaction{Type: providers.BalanceAdjustment, GrossMinor: -300}})
	_, ds := m.e.run(t)
	if got := categories(ds); got != "payout_item_unknown/hold_ref,payout_item_unknown/hold_ref" {
		t.Fatalf("findings %s, want two payout_item_unknown", got)
	}
	for _, d := range ds {
		switch d.Detail["balance_transaction"] {
		case stranger.Item.ID:
			if deref(d.ProviderRef) != "fh_nobody" || d.Actual != "fh_nobody" || d.Detail["payout"] != eur.ID ||
				d.Detail["type"] != "charge" || d.Detail["net_minor"] != float64(370) || d.PaymentID != nil {
				t.Errorf("unknown charge %+v", d)
			}
		case holdless.Item.ID:
			if d.ProviderRef != nil || d.Actual != "no hold" || d.Detail["type"] != "refund" || d.Detail["net_minor"] != float64(-100) {
				t.Errorf("refund without a hold %+v", d)
			}
		default:
			t.Errorf("finding %+v", d)
		}
	}
}

// TestAChargeNotPaidOutInTimeIsNotPaidOut: for day X (D − delay −
// grace), a charge whose payout failed, one no payout paid, and a
// capture of ours the provider booked no charge for (one part of two of a
// hold captured in parts) are each not_paid_out with the reason; without
// payout terms none of them is judged.
func TestAChargeNotPaidOutInTimeIsNotPaidOut(t *testing.T) {
	t.Parallel()
	plant := func(t *testing.T, m *moneyDays) (failed []providers.BalanceTransaction, unpaid, dropped providers.BalanceTransaction) {
		usd := m.payout(t, day.AddDate(0, 0, -1), "USD")
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutStatus, Payout: usd.ID, Status: providers.PayoutFailed})
		unpaid = m.charges(t, m.onX[0])[0]
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemDrop, BalanceTransaction: unpaid.ID})
		dropped = m.charges(t, m.onX[2])[1]
		m.drift(t, fake.MoneyDrift{Kind: fake.DriftBalanceDrop, BalanceTransaction: dropped.ID})
		return m.charges(t, m.onX[3]), unpaid, dropped
	}
	terms := feeTerms()
	m := newMoneyDays(t, &terms)
	failed, unpaid, dropped := plant(t, m)
	_, ds := m.e.run(t)
	if got := categories(ds); got != "not_paid_out/balance_transaction,not_paid_out/payout,not_paid_out/payout" {
		t.Fatalf("findings %s, want three not_paid_out", got)
	}
	for _, d := range ds {
		switch d.Detail["reason"] {
		case "payout_failed":
			if d.Detail["balance_transaction"] != failed[0].ID || deref(d.PaymentID) != m.onX[3].ID || d.Actual != "failed" ||
				d.Expected != "paid out by 2026-11-30" || *d.DifferenceMinor != -failed[0].NetMinor || d.Currency != "USD" {
				t.Errorf("failed payout %+v", d)
			}
		case "no_payout":
			if d.Detail["balance_transaction"] != unpaid.ID || deref(d.PaymentID) != m.onX[0].ID || d.Actual != "none" ||
				d.Detail["charge_date"] != "2026-11-28" {
				t.Errorf("unpaid charge %+v", d)
			}
		case "no_balance_transaction":
			if deref(d.PaymentID) != m.onX[2].ID || d.Actual != "absent" || d.Detail["forwarded_key"] != dropped.OperationKey ||
				*d.DifferenceMinor != -dropped.GrossMinor {
				t.Errorf("capture without a charge %+v (dropped %+v)", d, dropped)
			}
		default:
			t.Errorf("finding %+v", d)
		}
	}

	t.Run("WithoutPayoutTerms", func(t *testing.T) {
		t.Parallel()
		terms := feeTerms()
		terms.PayoutDelayDays = nil
		m := newMoneyDays(t, &terms)
		plant(t, m)
		if _, ds := m.e.run(t); len(ds) != 0 {
			t.Fatalf("findings %s, want none", categories(ds))
		}
	})
}

// TestASettledDriftIsGoneInTheNextVersion: a fee drift found, then
// cleared at the provider, is gone in the day's next version.
func TestASettledDriftIsGoneInTheNextVersion(t *testing.T) {
	t.Parallel()
	terms := feeTerms()
	m := newMoneyDays(t, &terms)
	bt := m.charges(t, m.onDay[1])[0]
	m.drift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: bt.ID, FeeMinor: 0})
	first, ds := m.e.run(t)
	if got := categories(ds); got != "fee_mismatch/fee" || first.Diff.New != 1 {
		t.Fatalf("first version: %s, diff %+v", got, first.Diff)
	}
	if err := m.e.fc.ClearMoneyDrift(context.Background()); err != nil {
		t.Fatal(err)
	}
	second, ds := m.e.run(t)
	if len(ds) != 0 || second.Version != 2 || second.Diff.Gone != 1 || second.Diff.New != 0 {
		t.Fatalf("second version: %s, %+v", categories(ds), second.Diff)
	}
}

// reportOnly is a provider without money reports.
type reportOnly struct{ providers.Provider }

// TestAProviderWithoutMoneyIsNotSettled: a provider that reports no money
// is reconciled as before, its settlement null.
func TestAProviderWithoutMoneyIsNotSettled(t *testing.T) {
	t.Parallel()
	m := newMoneyDays(t, nil)
	rec := reconcile.New(reconcile.Config{Pool: m.e.pool, Providers: map[string]providers.Provider{"fake": reportOnly{m.e.fc}},
		Clock: m.e.clk.Now})
	run, err := rec.Reconcile(context.Background(), "fake", day, reconcile.TriggerAPI, "test")
	if err != nil || run.Status != "succeeded" || run.Settlement != nil || run.DiscrepancyCount != 0 {
		t.Fatalf("run %+v: %v", run, err)
	}
}
