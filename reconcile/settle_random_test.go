package reconcile_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// The days of the randomized settlement test, around the run's day D
// (day): the fake pays out daily at T+1, arriving the day after; the
// connector's terms pay out at T+1 with two days' grace, so D's run holds
// the charges of X = D − 3 to their payouts; the bank account's match
// window is a day, so it judges the payouts arriving on D − 1: those
// created on D − 2, which paid X's charges. D's payouts pay D − 1's
// movements, and D's own charges are held to the fee schedule.
var (
	randX      = day.AddDate(0, 0, -3)
	randBefore = day.AddDate(0, 0, -1)
	randArrive = day.AddDate(0, 0, -1)
)

// randCurrencies are the currencies of the day; each has a payout a day,
// so payout drifts of different kinds land on different payouts.
var randCurrencies = []string{"EUR", "USD", "GBP", "JPY", "CHF"}

// driftSeed is the test's seed: PAYORCH_DRIFT_SEED when set (to replay a
// failure), else the time.
func driftSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("PAYORCH_DRIFT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PAYORCH_DRIFT_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// randPay makes n payments at the env's clock, four at a time: each in a
// random currency (EUR most), captured whole, in part, then refunded in
// part or whole, or only authorized. Keys are prefix and the index.
func (e *env) randPay(t *testing.T, rng *rand.Rand, prefix string, n int) {
	t.Helper()
	type job struct {
		i        int
		amount   int64
		currency string
		ops      []string
	}
	jobs := make([]job, n)
	for i := range jobs {
		cur := "EUR"
		if rng.IntN(2) == 0 {
			cur = randCurrencies[1+rng.IntN(len(randCurrencies)-1)]
		}
		amount := int64(500 + rng.IntN(20000))
		var ops []string
		switch k := rng.IntN(100); {
		case k < 65:
			ops = []string{"capture:0"}
		case k < 80:
			ops = []string{fmt.Sprintf("capture:%d", amount/2+1)}
		case k < 90:
			ops = []string{"capture:0", fmt.Sprintf("refund:%d", amount/3)}
		case k < 94:
			ops = []string{"capture:0", "refund:0"}
		}
		jobs[i] = job{i: i, amount: amount, currency: cur, ops: ops}
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := e.payKeyed(fmt.Sprintf("%s-%d", prefix, j.i), j.amount, j.currency, j.ops); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d payments failed, the first: %v", len(errs), errs[0])
	}
}

// payKeyed authorizes amount under key and applies ops ("capture:N",
// "refund:N"; 0 the whole); safe from several goroutines.
func (e *env) payKeyed(key string, amount int64, currency string, ops []string) error {
	ctx := context.Background()
	body := fmt.Sprintf(`{"amount_minor":%d,"currency":%q,"key":%q}`, amount, currency, key)
	fp, _ := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(body))
	out, err := e.svc.Authorize(ctx, nil, orchestrator.AuthorizeInput{TenantID: e.tenant, Key: key, Fingerprint: fp,
		AmountMinor: amount, Currency: currency})
	if err != nil {
		return fmt.Errorf("authorize %s: %w", key, err)
	}
	if out.Payment.Status != orchestrator.StatusAuthorized {
		return fmt.Errorf("authorize %s: %s", key, out.Payment.Status)
	}
	for i, op := range ops {
		name, arg, _ := strings.Cut(op, ":")
		amt, _ := strconv.ParseInt(arg, 10, 64)
		in := orchestrator.OperationInput{TenantID: e.tenant, PaymentID: out.Payment.ID, Key: fmt.Sprintf("%s-op%d", key, i),
			AmountMinor: amt}
		if name == "capture" {
			_, err = e.svc.Capture(ctx, nil, in)
		} else {
			_, err = e.svc.Refund(ctx, nil, in)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", key, op, err)
		}
	}
	return nil
}

// randDay makes a day of payments on d: n random ones, a few captured in
// parts and one disputed.
func (e *env) randDay(t *testing.T, rng *rand.Rand, d time.Time, n int) {
	t.Helper()
	e.clk.Set(d.Add(10 * time.Hour))
	e.randPay(t, rng, d.Format("20060102"), n)
	for range 5 {
		e.flexPay(t, int64(2000+rng.IntN(5000)), "part:700", "part:300", "capture:0")
	}
	disputed := e.pay(t, 9000, "EUR", "", "capture:0")
	if _, err := e.fc.OpenDispute(context.Background(), fake.Dispute{HoldRef: *disputed.ProviderRef, AmountMinor: 2500}); err != nil {
		t.Fatal(err)
	}
}

// listMoney lists fc's balance transactions and payouts created in [from, to).
func listMoney(t *testing.T, fc *fake.Client, from, to time.Time) ([]providers.BalanceTransaction, []providers.Payout) {
	t.Helper()
	ctx := context.Background()
	req := providers.ReportRequest{From: from, To: to}
	var bts []providers.BalanceTransaction
	var pos []providers.Payout
	err := fc.BalanceTransactions(ctx, req, func(bt providers.BalanceTransaction) error {
		bts = append(bts, bt)
		return nil
	})
	if err == nil {
		err = fc.Payouts(ctx, req, func(p providers.Payout) error {
			pos = append(pos, p)
			return nil
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return bts, pos
}

// pick returns k distinct elements of xs at random.
func pick[T any](rng *rand.Rand, xs []T, k int) []T {
	if k > len(xs) {
		panic(fmt.Sprintf("pick %d of %d", k, len(xs)))
	}
	idx := rng.Perm(len(xs))[:k]
	out := make([]T, k)
	for i, j := range idx {
		out[i] = xs[j]
	}
	return out
}

func ofType(bts []providers.BalanceTransaction, typ string) []providers.BalanceTransaction {
	var out []providers.BalanceTransaction
	for _, bt := range bts {
		if bt.Type == typ {
			out = append(out, bt)
		}
	}
	return out
}

// subjectOf names what a finding is about, as the planted drifts are
// named: its category and the provider's or the bank's object.
func subjectOf(d reconcile.Discrepancy) string {
	s := func(k string) string { return fmt.Sprint(d.Detail[k]) }
	switch d.Category {
	case reconcile.FeeMismatch, reconcile.PayoutItemUnknown, reconcile.NotPaidOut:
		return d.Category + " " + s("balance_transaction")
	case reconcile.PayoutUnexplained:
		return d.Category + " " + s("payout")
	case reconcile.PayoutMissingInBank, reconcile.PayoutAmountMismatch:
		return d.Category + " " + deref(d.ProviderRef)
	case reconcile.BankCreditUnmatched:
		// Of two credits of one payout, alike but for the bank's
		// reference, either is the second: the finding names the payout.
		if of, ok := d.Detail["duplicate_of"].(map[string]any); ok {
			return d.Category + " " + s("reason") + " " + fmt.Sprint(of["payout_id"])
		}
		return d.Category + " " + s("reason") + " " + s("bank_reference")
	}
	return d.Category + " " + deref(d.PaymentID) + " " + d.Field
}

// plantFees shows 1 to 4 of D's charges with another fee, over or under
// the schedule's: each a fee_mismatch of that charge.
func plantFees(t *testing.T, e *env, rng *rand.Rand) []string {
	t.Helper()
	bts, _ := listMoney(t, e.fc, day, day.AddDate(0, 0, 1))
	var want []string
	for _, bt := range pick(rng, ofType(bts, providers.BalanceCharge), 1+rng.IntN(4)) {
		delta := int64(1 + rng.IntN(50))
		if rng.IntN(2) == 0 && bt.FeeMinor >= delta {
			delta = -delta
		}
		e.moneyDrift(t, fake.MoneyDrift{Kind: fake.DriftFee, BalanceTransaction: bt.ID, FeeMinor: bt.FeeMinor + delta})
		want = append(want, reconcile.FeeMismatch+" "+bt.ID)
	}
	return want
}

// plantPayouts alters three of D's payouts, each of another currency: one
// loses a charge (payout_unexplained), one is a cent short of its items
// (payout_unexplained), one gains an item of nobody's, with or without a
// hold (payout_item_unknown of that item).
func plantPayouts(t *testing.T, e *env, rng *rand.Rand) []string {
	t.Helper()
	_, pos := listMoney(t, e.fc, day, day.AddDate(0, 0, 1))
	if len(pos) < 3 {
		t.Fatalf("D has %d payouts, want one per currency", len(pos))
	}
	p := pick(rng, pos, 3)
	var items []providers.BalanceTransaction
	if err := e.fc.PayoutItems(context.Background(), p[0].ID, func(bt providers.BalanceTransaction) error {
		items = append(items, bt)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dropped := pick(rng, ofType(items, providers.BalanceCharge), 1)[0]
	e.moneyDrift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemDrop, BalanceTransaction: dropped.ID})
	e.moneyDrift(t, fake.MoneyDrift{Kind: fake.DriftPayoutAmount, Payout: p[1].ID, AmountMinor: p[1].AmountMinor - 1})
	item := &fake.BalanceTransaction{GrossMinor: int64(100 + rng.IntN(10000)), FeeMinor: int64(rng.IntN(60))}
	if rng.IntN(2) == 0 {
		item.HoldRef = fmt.Sprintf("fh_nobody%d", rng.IntN(1000))
	}
	added := e.moneyDrift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemAdd, Payout: p[2].ID, Item: item})
	return []string{reconcile.PayoutUnexplained + " " + p[0].ID, reconcile.PayoutUnexplained + " " + p[1].ID,
		reconcile.PayoutItemUnknown + " " + added.Item.ID}
}

// plantUnpaid shows 1 to 3 of X's charges paid by no payout: each a
// not_paid_out of that charge.
func plantUnpaid(t *testing.T, e *env, rng *rand.Rand) []string {
	t.Helper()
	bts, _ := listMoney(t, e.fc, randX, randX.AddDate(0, 0, 1))
	var want []string
	for _, bt := range pick(rng, ofType(bts, providers.BalanceCharge), 1+rng.IntN(3)) {
		e.moneyDrift(t, fake.MoneyDrift{Kind: fake.DriftPayoutItemDrop, BalanceTransaction: bt.ID})
		want = append(want, reconcile.NotPaidOut+" "+bt.ID)
	}
	return want
}

func (e *env) moneyDrift(t *testing.T, d fake.MoneyDrift) fake.MoneyDrift {
	t.Helper()
	out, err := e.fc.MoneyDrift(context.Background(), d)
	if err != nil {
		t.Fatalf("MoneyDrift(%+v): %v", d, err)
	}
	return out
}

// plantBank writes the bank statement of the payouts arriving on D − 1,
// in random order, with three of them, each of another currency, planted
// on: one missing (payout_missing_in_bank), one a cent short
// (payout_amount_mismatch), one credited twice (bank_credit_unmatched,
// duplicate); and 1 or 2 credits of nobody's (bank_credit_unmatched,
// unknown).
func plantBank(t *testing.T, e *env, rng *rand.Rand) []string {
	t.Helper()
	byCur := payoutsArriving(t, e.fc, randArrive)
	var curs []string
	for c := range byCur {
		curs = append(curs, c)
	}
	slices.Sort(curs)
	if len(curs) < 4 {
		t.Fatalf("payouts arriving %s: %v", randArrive.Format(time.DateOnly), curs)
	}
	planted := pick(rng, curs, 3)
	missing, short, dup := byCur[planted[0]], byCur[planted[1]], byCur[planted[2]]
	var lines []stmtLine
	for _, c := range curs {
		if c != missing.Currency {
			lines = append(lines, creditFor(byCur[c]))
		}
	}
	for i := range lines {
		if lines[i].currency == short.Currency {
			lines[i].amount--
		}
	}
	again := creditFor(dup)
	again.bkRef = "BK-DUP-" + dup.ID
	lines = append(lines, again)
	want := []string{reconcile.PayoutMissingInBank + " " + missing.ID, reconcile.PayoutAmountMismatch + " " + short.ID,
		reconcile.BankCreditUnmatched + " duplicate " + dup.ID}
	for i := range 1 + rng.IntN(2) {
		l := stmtLine{booking: randArrive, amount: 1_000_000_000 + rng.Int64N(1_000_000_000),
			currency: randCurrencies[rng.IntN(len(randCurrencies))], dc: "CRDT", reference: fmt.Sprintf("SUPPLIER %d", i),
			bkRef: fmt.Sprintf("BK-UNKNOWN-%d", i)}
		lines = append(lines, l)
		want = append(want, reconcile.BankCreditUnmatched+" unknown "+l.bkRef)
	}
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	e.importStatement(t, reconcile.StatementUpload{Format: reconcile.FormatCSV, Account: ibanClean, Raw: csvStatement(t, lines)})
	return want
}

// TestRandomMoneyDriftsAreEachFoundInTheirCategory: three days of some
// 3,000 payments through the fake over HTTP (captures whole, partial and
// in parts, refunds, disputes) in five currencies, with the connector's
// fee schedule and payout terms and a bank account; drifts of every kind
// of money planted at random (a wrong fee, a payout missing an item, a
// payout short by a cent, an item of nobody's, charges not paid out, a
// payout missing in the bank, a credit a cent short, a credit twice,
// credits of nobody's): the run finds each in exactly its category, about
// exactly its object, and nothing else. The day's summary agrees with the
// run and counts the open findings; one finding of each category
// resolves; the CSV carries them all with their difference and detail.
// PAYORCH_DRIFT_SEED=N replays a seed (logged on failure).
func TestRandomMoneyDriftsAreEachFoundInTheirCategory(t *testing.T) {
	t.Parallel()
	seed := driftSeed(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with PAYORCH_DRIFT_SEED=%d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	ctx := context.Background()
	e := newEnv(t, fake.Config{PayoutDelayDays: 1})
	const n = 3000
	e.randDay(t, rng, randX, n*3/10)
	e.randDay(t, rng, randBefore, n*4/10)
	e.randDay(t, rng, day, n*3/10)
	delay, grace, window := 1, 2, 1
	if _, err := e.rec.SetFeeSchedule(ctx, "fake", reconcile.FeeSchedule{Default: &reconcile.FeeRule{PercentBP: 140, FixedMinor: 25},
		PayoutDelayDays: &delay, PayoutGraceDays: &grace}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rec.SetBankAccount(ctx, "fake", reconcile.BankAccountInput{Account: ibanClean, MatchWindowDays: &window}, "test"); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(runTime) // the payouts due by the run are made when listed
	var want []string
	for _, plant := range []func(*testing.T, *env, *rand.Rand) []string{plantFees, plantPayouts, plantUnpaid, plantBank} {
		want = append(want, plant(t, e, rng)...)
	}
	slices.Sort(want)

	started := time.Now()
	run, ds := e.run(t)
	t.Logf("seed %d: %d payments, %d drifts planted, the run took %v", seed, e.paymentCount(t), len(want), time.Since(started))
	got := make([]string, len(ds))
	for i, d := range ds {
		got[i] = subjectOf(d)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("found\n  %s\nplanted\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	checkSummary(t, e, run, ds)
	checkCSV(t, e, run, ds)
	checkResolvable(t, e, run, ds)
}

func (e *env) paymentCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkSummary: the day's summary is the run's: its money by currency
// (itself the provider's listing of the day, summed here again), its
// bank side, and its findings counted by currency and category.
func checkSummary(t *testing.T, e *env, run reconcile.Run, ds []reconcile.Discrepancy) {
	t.Helper()
	sum, err := e.rec.DaySummary(context.Background(), "fake", day.Format(time.DateOnly))
	if err != nil || sum.RunID != run.ID || sum.Version != run.Version || sum.BankArrivalDate == nil ||
		*sum.BankArrivalDate != randArrive.Format(time.DateOnly) {
		t.Fatalf("summary %+v: %v", sum, err)
	}
	bts, pos := listMoney(t, e.fc, day, day.AddDate(0, 0, 1))
	listed := map[string]*reconcile.Settlement{}
	for _, bt := range bts {
		s := listed[bt.Currency]
		if s == nil {
			s = &reconcile.Settlement{}
			listed[bt.Currency] = s
		}
		switch bt.Type {
		case providers.BalancePayout:
			continue
		case providers.BalanceCharge:
			s.ChargeCount++
			s.Charges += bt.GrossMinor
		case providers.BalanceRefund:
			s.Refunds += bt.GrossMinor
		case providers.BalanceDispute:
			s.Disputes += bt.GrossMinor
		default:
			s.Adjustments += bt.GrossMinor
		}
		s.Fees += bt.FeeMinor
		s.Net += bt.NetMinor
	}
	for _, p := range pos {
		listed[p.Currency].PayoutCount++
		listed[p.Currency].PaidOut += p.AmountMinor
	}
	open := map[string]map[string]int64{}
	for _, d := range ds {
		if open[d.Currency] == nil {
			open[d.Currency] = map[string]int64{}
		}
		open[d.Currency][d.Category]++
	}
	for cur, cs := range sum.Currencies {
		if l := listed[cur]; l != nil && cs.Settlement != *l {
			t.Errorf("%s: summary %+v, the provider's listing sums to %+v", cur, cs.Settlement, *l)
		}
		if b := run.Bank.Currencies[cur]; b != nil && (*cs.InBankMinor != b.InBankMinor || *cs.BankPayoutsMinor != b.PayoutsMinor) {
			t.Errorf("%s: in the bank %d of %d, the run's %+v", cur, *cs.InBankMinor, *cs.BankPayoutsMinor, b)
		}
		for _, c := range reconcile.MoneyCategories {
			if cs.Open[c] != open[cur][c] {
				t.Errorf("%s %s: %d open in the summary, %d found", cur, c, cs.Open[c], open[cur][c])
			}
		}
	}
	for cur := range listed {
		if sum.Currencies[cur] == nil {
			t.Errorf("the summary lacks %s", cur)
		}
	}
}

// checkCSV: the CSV export has a row per finding, each with its
// difference and its detail.
func checkCSV(t *testing.T, e *env, run reconcile.Run, ds []reconcile.Discrepancy) {
	t.Helper()
	var sb strings.Builder
	if err := e.rec.WriteCSV(context.Background(), &sb, reconcile.DiscrepancyFilter{RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(sb.String())).ReadAll()
	if err != nil || len(rows) != len(ds)+1 {
		t.Fatalf("csv: %d rows for %d findings (%v)", len(rows), len(ds), err)
	}
	for i, d := range ds {
		row := rows[i+1]
		diff := ""
		if d.DifferenceMinor != nil {
			diff = strconv.FormatInt(*d.DifferenceMinor, 10)
		}
		if row[0] != strconv.FormatInt(d.ID, 10) || row[2] != d.Category || row[10] != diff || row[9] != d.Currency ||
			!strings.HasPrefix(row[16], "{") || len(d.Detail) == 0 {
			t.Errorf("csv row %q of %+v", row, d)
		}
	}
}

// checkResolvable: one finding of each money category resolves, and the
// day's summary counts it no longer.
func checkResolvable(t *testing.T, e *env, run reconcile.Run, ds []reconcile.Discrepancy) {
	t.Helper()
	ctx := context.Background()
	before, err := e.rec.RunSummary(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	resolved := map[string]string{} // category → currency
	for _, d := range ds {
		if _, done := resolved[d.Category]; done {
			continue
		}
		r, err := e.rec.Resolve(ctx, d.ID, "checked with the provider", "key_finance")
		if err != nil || r.ResolvedAt == nil {
			t.Fatalf("resolve %s #%d: %+v %v", d.Category, d.ID, r, err)
		}
		resolved[d.Category] = d.Currency
	}
	if len(resolved) != len(reconcile.MoneyCategories) {
		t.Fatalf("resolved %v, want one of each of %v", resolved, reconcile.MoneyCategories)
	}
	after, err := e.rec.RunSummary(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	for c, cur := range resolved {
		if after.Currencies[cur].Open[c] != before.Currencies[cur].Open[c]-1 {
			t.Errorf("%s %s: %d open after resolving one of %d", cur, c, after.Currencies[cur].Open[c], before.Currencies[cur].Open[c])
		}
	}
}
