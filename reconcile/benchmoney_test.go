package reconcile_test

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// The money of BenchmarkReconcileDay's day D, at the fake's terms: T+2
// (fake.DefaultPayoutDelayDays) with no grace, so that day X, whose
// charges the run checks were paid out, is D − 2, the day whose charges
// D's payouts pay: one day of n payments at the fake serves as both the
// items of D's payouts and the late stream, as a real connector's T+2
// day would (every day has its million). The bank account matches
// payouts within a day of their arrival, so the run of D judges those
// arriving on A = D − 1, made on D − 2 of the charges of D − 4.
const (
	benchDelayDays = fake.DefaultPayoutDelayDays
	benchGraceDays = 0
	benchBankDays  = 1
	benchIBAN      = "DE89370400440532013000"
)

// benchMoneyTerms is the connector's fee schedule in the benchmark: the
// fake's own fees, paid out at T+benchDelayDays without grace.
func benchMoneyTerms() reconcile.FeeSchedule {
	delay, grace := benchDelayDays, benchGraceDays
	return reconcile.FeeSchedule{Default: &reconcile.FeeRule{PercentBP: fake.DefaultFeePercentBP, FixedMinor: fake.DefaultFeeFixedMinor},
		PayoutDelayDays: &delay, PayoutGraceDays: &grace}
}

// benchMoneyFindings are the findings the money of seedMoney plants, one
// per category of settlement and of the bank step, as categories lists
// them.
var benchMoneyFindings = []string{
	"bank_credit_unmatched/credit", "fee_mismatch/fee", "not_paid_out/balance_transaction",
	"payout_amount_mismatch/amount", "payout_item_unknown/hold_ref", "payout_missing_in_bank/payout",
	"payout_unexplained/amount",
}

// seedMoney gives the day of seedDay (n payments) the money around it,
// with one drift planted per category of settlement and of the bank:
//
//   - day X = D − 2: n captured EUR payments (with their capture
//     operations) and their holds, and one GBP, which D's payouts pay out
//     (EUR: n items, GBP: one); one more capture of ours on X that the
//     provider booked no charge for (not_paid_out);
//   - day D − 4: a hold in EUR, GBP and USD, paid out on D − 2, arriving
//     on A = D − 1: the bank step's payouts;
//   - drifts at the fake: one charge of D with a fee a unit off the
//     schedule (fee_mismatch), D's GBP payout a unit over its items
//     (payout_unexplained), an item of nobody's added to D's EUR payout
//     (payout_item_unknown);
//   - a bank account and a statement holding A's EUR payout, not its GBP
//     one (payout_missing_in_bank), its USD one a unit short
//     (payout_amount_mismatch) and a credit of nobody's
//     (bank_credit_unmatched).
//
// The fake's clock is the machine's (its own process): any time after D +
// 2 has made D's payouts.
func seedMoney(tb testing.TB, e *env, n int) {
	tb.Helper()
	ctx := context.Background()
	x := day.AddDate(0, 0, -benchDelayDays-benchGraceDays)
	seedMoneyDay(tb, e, x, n)
	early := x.AddDate(0, 0, -benchDelayDays).Add(12 * time.Hour)
	var bankHolds []fake.SeedHold
	for i, cur := range []string{"EUR", "GBP", "USD"} {
		amt := int64(50_000 + 1000*i)
		bankHolds = append(bankHolds, fake.SeedHold{Ref: "fh_bank" + cur, Status: providers.StatusCaptured, AmountMinor: amt,
			CapturedMinor: amt, Currency: cur, CreatedAt: early, UpdatedAt: early})
	}
	if got, err := e.fc.Seed(ctx, slices.Values(bankHolds)); err != nil || got != len(bankHolds) {
		tb.Fatalf("seeded %d (%v)", got, err)
	}
	payouts := listPayouts(tb, e.fc)
	onDay := payoutsOf(payouts, func(p providers.Payout) bool { return p.CreatedAt.Equal(day) })
	arrival := day.AddDate(0, 0, -benchBankDays)
	arriving := payoutsOf(payouts, func(p providers.Payout) bool { return p.ArrivalDate.Equal(arrival) })
	if len(onDay) != 2 || len(arriving) != 3 {
		tb.Fatalf("payouts of the day %+v, arriving on %s %+v", onDay, arrival, arriving)
	}
	plantMoneyDrifts(tb, e, n, onDay)
	seedBank(tb, e, arrival, arriving)
}

// seedMoneyDay writes n captured EUR payments of day x, their capture
// operations and their holds at the fake, one GBP one likewise, and one
// more captured payment whose hold the fake never had.
func seedMoneyDay(tb testing.TB, e *env, x time.Time, n int) {
	tb.Helper()
	ctx := context.Background()
	ref := func(i int) string { return fmt.Sprintf("fh_x%08d", i) }
	id := func(i int) string { return orchestrator.PaymentID(e.tenant, fmt.Sprintf("x-%d", i)) }
	step := 24 * time.Hour / time.Duration(n+3)
	at := func(i int) time.Time { return x.Add(step * time.Duration(i+1)) }
	amount := func(i int) int64 { return int64(1000 + i%500) }
	currency := func(i int) string { return map[bool]string{true: "GBP", false: "EUR"}[i == n] }
	all := n + 2 // n EUR, the GBP one, the one the provider never charged
	_, err := e.pool.CopyFrom(ctx, pgx.Identifier{"payments"},
		[]string{"tenant_id", "id", "idempotency_key", "request_hash", "field_hashes", "status", "amount_minor", "currency",
			"captured_minor", "provider", "provider_ref", "payment_method", "created_at", "updated_at"},
		pgx.CopyFromSlice(all, func(i int) ([]any, error) {
			return []any{e.tenant, id(i), fmt.Sprintf("x-%d", i), []byte{0}, map[string]string{}, "captured",
				amount(i), currency(i), amount(i), "fake", ref(i), "pm_card_visa", at(i), at(i)}, nil
		}))
	if err != nil {
		tb.Fatal(err)
	}
	_, err = e.pool.CopyFrom(ctx, pgx.Identifier{"payment_operations"},
		[]string{"tenant_id", "id", "payment_id", "kind", "idempotency_key", "forwarded_key", "status", "amount_minor",
			"provider_ref", "created_at", "updated_at"},
		pgx.CopyFromSlice(all, func(i int) ([]any, error) {
			return []any{e.tenant, fmt.Sprintf("op_x%08d", i), id(i), "capture", fmt.Sprintf("x-%d-capture", i),
				fmt.Sprintf("fwd-x-%d", i), "succeeded", amount(i), ref(i), at(i), at(i)}, nil
		}))
	if err != nil {
		tb.Fatal(err)
	}
	var holds iter.Seq[fake.SeedHold] = func(yield func(fake.SeedHold) bool) {
		for i := range n + 1 {
			if !yield(fake.SeedHold{Ref: ref(i), PaymentID: id(i), TenantID: e.tenant, Status: providers.StatusCaptured,
				AmountMinor: amount(i), CapturedMinor: amount(i), Currency: currency(i), CreatedAt: at(i), UpdatedAt: at(i)}) {
				return
			}
		}
	}
	if got, err := e.fc.Seed(ctx, holds); err != nil || got != n+1 {
		tb.Fatalf("seeded %d (%v)", got, err)
	}
}

// listPayouts lists every payout the fake made around the day (listing
// makes those due).
func listPayouts(tb testing.TB, fc *fake.Client) []providers.Payout {
	tb.Helper()
	var out []providers.Payout
	err := fc.Payouts(context.Background(), providers.ReportRequest{From: day.AddDate(0, 0, -10), To: day.AddDate(0, 0, 10)},
		func(p providers.Payout) error {
			out = append(out, p)
			return nil
		})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// payoutsOf is the payouts keep keeps, by currency.
func payoutsOf(ps []providers.Payout, keep func(providers.Payout) bool) map[string]providers.Payout {
	out := map[string]providers.Payout{}
	for _, p := range ps {
		if keep(p) {
			out[p.Currency] = p
		}
	}
	return out
}

// plantMoneyDrifts plants, at the fake, a fee off the schedule on the
// charge of the day's hold n/3 (seedDay's), a unit too many on the GBP
// payout of the day and an item of nobody's on its EUR payout.
func plantMoneyDrifts(tb testing.TB, e *env, n int, onDay map[string]providers.Payout) {
	tb.Helper()
	ctx := context.Background()
	// seedDay's hold i is captured at at(i) (seedDayOff): its charge is
	// the only movement of that instant.
	step := 24 * time.Hour / time.Duration(n+1)
	at := dayStart.Add(step * time.Duration(n/3+1))
	var charge *providers.BalanceTransaction
	err := e.fc.BalanceTransactions(ctx, providers.ReportRequest{From: at, To: at.Add(time.Nanosecond)},
		func(bt providers.BalanceTransaction) error {
			charge = &bt
			return nil
		})
	if err != nil || charge == nil || charge.Type != providers.BalanceCharge {
		tb.Fatalf("the charge at %s: %+v (%v)", at, charge, err)
	}
	for _, d := range []fake.MoneyDrift{
		{Kind: fake.DriftFee, BalanceTransaction: charge.ID, FeeMinor: charge.FeeMinor + 1},
		{Kind: fake.DriftPayoutAmount, Payout: onDay["GBP"].ID, AmountMinor: onDay["GBP"].AmountMinor + 1},
		{Kind: fake.DriftPayoutItemAdd, Payout: onDay["EUR"].ID, Item: &fake.BalanceTransaction{HoldRef: "fh_nobody",
			GrossMinor: 4200, FeeMinor: 84}},
	} {
		if _, err := e.fc.MoneyDrift(ctx, d); err != nil {
			tb.Fatalf("drift %+v: %v", d, err)
		}
	}
}

// seedBank gives the connector a bank account matching within
// benchBankDays and imports a statement of the payouts arriving on
// arrival: EUR's credit as it should be, GBP's missing, USD's a unit
// short, and a credit of nobody's.
func seedBank(tb testing.TB, e *env, arrival time.Time, arriving map[string]providers.Payout) {
	tb.Helper()
	ctx := context.Background()
	window := benchBankDays
	if _, err := e.rec.SetBankAccount(ctx, "fake", reconcile.BankAccountInput{Account: benchIBAN, MatchWindowDays: &window}, "bench"); err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("booking_date,value_date,amount,currency,credit_debit,reference,counterparty,bank_reference\n")
	line := func(amount int64, cur, ref, bkRef string) {
		date := arrival.Format(time.DateOnly)
		fmt.Fprintf(&b, "%s,%s,%d.%02d,%s,credit,%s,Fake Payments Ltd,%s\n", date, date, amount/100, amount%100, cur, ref, bkRef)
	}
	eur, usd := arriving["EUR"], arriving["USD"]
	line(eur.AmountMinor, "EUR", eur.Reference, "BK-"+eur.ID)
	line(usd.AmountMinor-1, "USD", usd.Reference, "BK-"+usd.ID)
	line(4242, "CHF", "INTEREST 2026", "BK-NOBODY")
	p, err := reconcile.ParseStatement(reconcile.StatementUpload{Format: reconcile.FormatCSV, Raw: []byte(b.String()),
		Account: benchIBAN, StatementID: "BENCH-" + arrival.Format(time.DateOnly)})
	if err != nil {
		tb.Fatal(err)
	}
	if _, created, err := e.rec.ImportStatement(ctx, p, "bench"); err != nil || !created {
		tb.Fatalf("import: %v (created %v)", err, created)
	}
}
