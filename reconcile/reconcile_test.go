package reconcile_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// day is the business day under test; the run happens the next morning.
var (
	day      = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	runTime  = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	dayStart = day
)

type env struct {
	clk    *testkit.Clock
	svc    *orchestrator.Service
	pool   *pgxpool.Pool
	rec    *reconcile.Reconciler
	fc     *fake.Client
	fs     *fake.Server
	tenant int64
	n      int
}

func newEnv(t testing.TB, fcfg fake.Config) *env {
	t.Helper()
	clk := testkit.NewClock(dayStart.Add(10 * time.Hour))
	if fcfg.Clock == nil {
		fcfg.Clock = clk.Now
	}
	fr, err := fake.Start("127.0.0.1:0", fcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	e := newEnvWith(t, clk, fr.Client(&http.Client{}))
	e.fs = fr.Server()
	return e
}

// newEnvWith wires an env around a fake provider client (one running in
// another process, for instance).
func newEnvWith(t testing.TB, clk *testkit.Clock, fc *fake.Client) *env {
	t.Helper()
	return newEnvOn(t, clk, fc, pgtest.DB(t))
}

// newEnvOn wires an env on the database of pool.
func newEnvOn(t testing.TB, clk *testkit.Clock, fc *fake.Client, pool *pgxpool.Pool) *env {
	t.Helper()
	provs := map[string]providers.Provider{"fake": fc}
	// The provider timeout is generous: on a loaded machine a slow answer
	// must not leave a payment pending that the day's shape needs settled
	// (a capture of it then fails). Only TestStuckPendingAndLapsedHolds
	// waits for it, once.
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Clock: clk.Now, Providers: provs, DefaultProvider: "fake",
		ProviderTimeout: 3 * time.Second})
	tenant, _, _, err := svc.CreateTenant(context.Background(), "Acme")
	if err != nil {
		t.Fatal(err)
	}
	rec := reconcile.New(reconcile.Config{Pool: pool, Providers: provs, Clock: clk.Now})
	return &env{clk: clk, svc: svc, pool: pool, rec: rec, fc: fc, tenant: tenant.ID}
}

// pay authorizes amount under a fresh key and applies ops ("capture:N",
// "cancel", "refund:N"); it returns the payment.
func (e *env) pay(t *testing.T, amount int64, currency, method string, ops ...string) orchestrator.Payment {
	t.Helper()
	ctx := context.Background()
	e.n++
	key := fmt.Sprintf("k%d", e.n)
	body := fmt.Sprintf(`{"amount_minor":%d,"currency":%q,"n":%d}`, amount, currency, e.n)
	fp, _ := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(body))
	out, err := e.svc.Authorize(ctx, nil, orchestrator.AuthorizeInput{TenantID: e.tenant, Key: key, Fingerprint: fp,
		AmountMinor: amount, Currency: currency, PaymentMethod: method})
	if err != nil && orchestrator.ErrorCode(err) != orchestrator.CodePaymentDeclined {
		t.Fatal(err)
	}
	p := out.Payment
	for i, op := range ops {
		name, arg, _ := strings.Cut(op, ":")
		var amt int64
		fmt.Sscan(arg, &amt)
		in := orchestrator.OperationInput{TenantID: e.tenant, PaymentID: p.ID, Key: fmt.Sprintf("%s-op%d", key, i), AmountMinor: amt}
		var o orchestrator.Outcome
		switch name {
		case "capture":
			o, err = e.svc.Capture(ctx, nil, in)
		case "cancel":
			o, err = e.svc.Cancel(ctx, nil, in)
		case "refund":
			o, err = e.svc.Refund(ctx, nil, in)
		}
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		p = o.Payment
	}
	return p
}

// run reconciles the day at runTime and returns the run and its
// discrepancies.
func (e *env) run(t *testing.T) (reconcile.Run, []reconcile.Discrepancy) {
	t.Helper()
	e.clk.Set(runTime)
	run, err := e.rec.Reconcile(context.Background(), "fake", day, reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "succeeded" {
		t.Fatalf("run %+v", run)
	}
	ds, _, err := e.rec.ListDiscrepancies(context.Background(), reconcile.DiscrepancyFilter{RunID: run.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return run, ds
}

func categories(ds []reconcile.Discrepancy) string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Category+"/"+d.Field)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// aDay makes one of every kind of payment the day can have.
func (e *env) aDay(t *testing.T) []orchestrator.Payment {
	t.Helper()
	return []orchestrator.Payment{
		e.pay(t, 1000, "EUR", ""),
		e.pay(t, 2000, "EUR", "", "capture:0"),
		e.pay(t, 3000, "USD", "", "capture:1200"),
		e.pay(t, 4000, "EUR", "", "capture:0", "refund:1000"),
		e.pay(t, 5000, "JPY", "", "capture:0", "refund:0"),
		e.pay(t, 6000, "EUR", "", "cancel"),
		e.pay(t, 7000, "EUR", "pm_card_chargeDeclined"),
	}
}

func TestCleanDayHasNoDiscrepancies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	ps := e.aDay(t)
	run, ds := e.run(t)
	if len(ds) != 0 {
		t.Fatalf("clean day: %s", categories(ds))
	}
	if run.LocalCount != int64(len(ps)) || run.ProviderCount != int64(len(ps)) || run.MatchedCount != int64(len(ps)) {
		t.Fatalf("counts local %d provider %d matched %d, want %d", run.LocalCount, run.ProviderCount, run.MatchedCount, len(ps))
	}
	l, p := run.Totals["local"], run.Totals["provider"]
	if l["EUR"] == nil || *l["EUR"] != *p["EUR"] || *l["USD"] != *p["USD"] || *l["JPY"] != *p["JPY"] {
		t.Fatalf("totals differ: %+v vs %+v", l, p)
	}
	if l["EUR"].Captured != 6000 || l["EUR"].Refunded != 1000 || l["USD"].Captured != 1200 {
		t.Fatalf("EUR/USD totals %+v %+v", l["EUR"], l["USD"])
	}
}

func TestEachDriftYieldsItsCategoryAndNothingElse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		drift func(p orchestrator.Payment) fake.Drift
		want  string
	}{
		{"AuthorizedAmount", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef, Field: fake.AmountAuthorized, AmountMinor: 2100}
		}, "amount_mismatch/authorized"},
		{"CapturedAmount", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef, Field: fake.AmountCaptured, AmountMinor: 1999}
		}, "amount_mismatch/captured"},
		{"RefundedAmount", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef, Field: fake.AmountRefunded, AmountMinor: 5}
		}, "amount_mismatch/refunded"},
		{"Currency", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftCurrency, Ref: *p.ProviderRef, Currency: "GBP"}
		}, "currency_mismatch/currency"},
		{"Status", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftStatus, Ref: *p.ProviderRef, Status: providers.StatusRefunded}
		}, "status_mismatch/status"},
		{"DroppedRow", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftDrop, Ref: *p.ProviderRef}
		}, "missing_at_provider/"},
		{"DuplicatedRow", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftDuplicate, Ref: *p.ProviderRef}
		}, "duplicate_at_provider/"},
		{"UnknownRow", func(p orchestrator.Payment) fake.Drift {
			return fake.Drift{Kind: fake.DriftAdd, Row: &fake.Row{Ref: "fh_stranger", Status: providers.StatusCaptured,
				AmountMinor: 999, CapturedMinor: 999, Currency: "EUR", CreatedAt: dayStart.Add(12 * time.Hour), UpdatedAt: dayStart.Add(12 * time.Hour)}}
		}, "missing_locally/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			e.aDay(t)
			target := e.pay(t, 2000, "EUR", "", "capture:0")
			if err := e.fc.Drift(context.Background(), tc.drift(target)); err != nil {
				t.Fatal(err)
			}
			_, ds := e.run(t)
			if got := categories(ds); got != tc.want {
				t.Fatalf("discrepancies %q, want exactly %q", got, tc.want)
			}
			d := ds[0]
			if tc.name != "UnknownRow" && (d.PaymentID == nil || *d.PaymentID != target.ID || d.ProviderRef == nil || *d.ProviderRef != *target.ProviderRef) {
				t.Fatalf("discrepancy does not carry both ids: %+v", d)
			}
			if tc.name == "AuthorizedAmount" && (d.Expected != "2000" || d.Actual != "2100" || *d.DifferenceMinor != 100 || d.Detail["direction"] != "over") {
				t.Fatalf("amount discrepancy %+v", d)
			}
		})
	}
}

func TestStuckPendingAndLapsedHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{HoldLifetime: 6 * time.Hour})
	ctx := context.Background()
	// A payment whose answer was lost and that nobody resolved.
	e.n++
	fwd := providers.ForwardedKey(e.tenant, orchestrator.OpAuthorize, fmt.Sprintf("k%d", e.n+0))
	if err := e.fc.InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1, IdempotencyKey: fwd}); err != nil {
		t.Fatal(err)
	}
	e.n--
	stuck := e.pay(t, 1500, "EUR", "")
	if stuck.Status != orchestrator.StatusPending {
		t.Fatalf("status %s, want pending", stuck.Status)
	}
	// An authorization nobody captured: it lapses six hours later.
	lapsed := e.pay(t, 2500, "EUR", "")
	e.pay(t, 3500, "EUR", "", "capture:0")
	_, ds := e.run(t)
	if got := categories(ds); got != "hold_expired_uncaptured/status,stuck_pending/status" {
		t.Fatalf("discrepancies %q", got)
	}
	for _, d := range ds {
		want := map[string]string{"stuck_pending": stuck.ID, "hold_expired_uncaptured": lapsed.ID}[d.Category]
		if *d.PaymentID != want {
			t.Fatalf("%s names %s, want %s", d.Category, *d.PaymentID, want)
		}
	}
}

func TestMidnightBoundaryIsNoFalseAlarm(t *testing.T) {
	t.Parallel()
	// The provider's clock runs 90 seconds ahead of ours: what we did at
	// 23:59 it stamps on the next day.
	provClock := testkit.NewClock(time.Time{})
	e := newEnv(t, fake.Config{Clock: provClock.Now})
	ours := dayStart.Add(24*time.Hour - time.Minute)
	e.clk.Set(ours)
	provClock.Set(ours.Add(90 * time.Second))
	e.pay(t, 1000, "EUR", "", "capture:0")
	// And one from early next day, which belongs to the next day's run.
	e.clk.Set(ours.Add(2 * time.Minute))
	provClock.Set(ours.Add(2*time.Minute + 90*time.Second))
	e.pay(t, 2000, "EUR", "")

	run, ds := e.run(t)
	if len(ds) != 0 {
		t.Fatalf("boundary day: %s", categories(ds))
	}
	if run.LocalCount != 1 {
		t.Fatalf("local count %d, want the one payment of the day", run.LocalCount)
	}
	next, err := e.rec.Reconcile(context.Background(), "fake", day.AddDate(0, 0, 1), reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if next.DiscrepancyCount != 0 {
		nds, _, _ := e.rec.ListDiscrepancies(context.Background(), reconcile.DiscrepancyFilter{RunID: next.ID})
		t.Fatalf("next day: %s", categories(nds))
	}
}

func TestRerunIsANewVersionWithADiff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	ctx := context.Background()
	a := e.pay(t, 1000, "EUR", "", "capture:0")
	b := e.pay(t, 2000, "EUR", "", "capture:0")
	c := e.pay(t, 3000, "EUR", "", "capture:0")
	for _, p := range []orchestrator.Payment{a, b} {
		if err := e.fc.Drift(ctx, fake.Drift{Kind: fake.DriftCurrency, Ref: *p.ProviderRef, Currency: "USD"}); err != nil {
			t.Fatal(err)
		}
	}
	v1, ds1 := e.run(t)
	if v1.Version != 1 || len(ds1) != 2 {
		t.Fatalf("v1 %+v: %s", v1, categories(ds1))
	}
	var onB reconcile.Discrepancy
	for _, d := range ds1 {
		if *d.PaymentID == b.ID {
			onB = d
		}
	}
	if _, err := e.rec.Resolve(ctx, onB.ID, "USD booked by hand", "key_finance"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rec.Resolve(ctx, onB.ID, "again", "key_finance"); orchestrator.ErrorCode(err) != orchestrator.CodeConflict {
		t.Fatalf("resolving twice: %v", err)
	}
	// a is fixed at the provider, b stays, c breaks.
	if err := e.fc.ClearDrift(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range []fake.Drift{{Kind: fake.DriftCurrency, Ref: *b.ProviderRef, Currency: "USD"}, {Kind: fake.DriftDrop, Ref: *c.ProviderRef}} {
		if err := e.fc.Drift(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	v2, ds2 := e.run(t)
	if v2.Version != 2 || v2.Diff.PreviousRunID == nil || *v2.Diff.PreviousRunID != v1.ID {
		t.Fatalf("v2 %+v", v2)
	}
	if v2.Diff.New != 1 || v2.Diff.StillOpen != 1 || v2.Diff.Gone != 1 {
		t.Fatalf("diff %+v, want 1 new, 1 still open, 1 gone", v2.Diff)
	}
	for _, d := range ds2 {
		switch *d.PaymentID {
		case b.ID:
			if d.Change != "still_open" || d.ResolutionNote == nil || *d.ResolutionNote != "USD booked by hand" {
				t.Fatalf("b in v2: %+v", d)
			}
		case c.ID:
			if d.Change != "new" || d.Category != reconcile.MissingAtProvider {
				t.Fatalf("c in v2: %+v", d)
			}
		default:
			t.Fatalf("unexpected %+v", d)
		}
	}
	gone, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: v2.ID, Change: "gone"})
	if err != nil || len(gone) != 1 || *gone[0].PaymentID != a.ID {
		t.Fatalf("gone: %+v %v", gone, err)
	}
	// History is kept: v1 is unchanged.
	again, err := e.rec.GetRun(ctx, v1.ID)
	if err != nil || again.DiscrepancyCount != 2 {
		t.Fatalf("v1 after v2: %+v %v", again, err)
	}
}

func TestTwoInstancesOneScheduledRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	e.aDay(t)
	e.clk.Set(runTime)
	pool := e.pool
	var schedulers []*reconcile.Scheduler
	for range 2 {
		r := reconcile.New(reconcile.Config{Pool: pool, Providers: map[string]providers.Provider{"fake": e.fc}, Clock: e.clk.Now})
		s, err := reconcile.NewScheduler(r, reconcile.DefaultSchedule, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		schedulers = append(schedulers, s)
	}
	results := make([][]reconcile.Run, 2)
	var wg sync.WaitGroup
	for i, s := range schedulers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.RunOnce(context.Background())
		}()
	}
	wg.Wait()
	if len(results[0])+len(results[1]) != 1 {
		t.Fatalf("instances ran %d and %d scheduled runs, want exactly one in all", len(results[0]), len(results[1]))
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_runs WHERE trigger = 'schedule'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d scheduled runs recorded (%v)", n, err)
	}
	// A hand re-run of the same day is still possible and is version 2.
	run, err := e.rec.Reconcile(context.Background(), "fake", day, reconcile.TriggerCLI, "ops")
	if err != nil || run.Version != 2 {
		t.Fatalf("manual re-run: %+v %v", run, err)
	}
}

func TestCSVExport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	p := e.pay(t, 1000, "EUR", "", "capture:0")
	if err := e.fc.Drift(context.Background(), fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef, Field: fake.AmountCaptured, AmountMinor: 900}); err != nil {
		t.Fatal(err)
	}
	run, ds := e.run(t)
	if _, err := e.rec.Resolve(context.Background(), ds[0].ID, "=HYPERLINK(\"x\")", "key_f"); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := e.rec.WriteCSV(context.Background(), &sb, reconcile.DiscrepancyFilter{RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "id,run_id,category") {
		t.Fatalf("csv:\n%s", sb.String())
	}
	if !strings.Contains(lines[1], "amount_mismatch") || !strings.Contains(lines[1], ",-100,") || !strings.Contains(lines[1], p.ID) {
		t.Fatalf("csv row %s", lines[1])
	}
	if strings.Contains(lines[1], ",=HYPERLINK") || !strings.Contains(lines[1], "'=HYPERLINK") {
		t.Fatalf("a formula in a note is not defused: %s", lines[1])
	}
	recs, err := csv.NewReader(strings.NewReader(sb.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if h := recs[0]; h[len(h)-1] != "detail" || len(recs[1]) != len(h) {
		t.Fatalf("csv header %q, row %q", h, recs[1])
	}
	var detail map[string]any
	if err := json.Unmarshal([]byte(recs[1][len(recs[1])-1]), &detail); err != nil || detail["direction"] != "under" {
		t.Fatalf("the row's detail %q: %v", recs[1][len(recs[1])-1], err)
	}
}

func TestADayOfAHundredThousandPayments(t *testing.T) {
	t.Parallel()
	const n = 100_000
	e := newEnv(t, fake.Config{})
	seedDay(t, e, n)
	run, err := e.rec.Reconcile(context.Background(), "fake", day, reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "succeeded" || run.LocalCount != n || run.ProviderCount != n || run.MatchedCount != n || run.DiscrepancyCount != 1 {
		t.Fatalf("run %+v", run)
	}
	ds, _, _ := e.rec.ListDiscrepancies(context.Background(), reconcile.DiscrepancyFilter{RunID: run.ID})
	if categories(ds) != "amount_mismatch/captured" {
		t.Fatalf("discrepancies %s", categories(ds))
	}
}

// seedDay writes n captured payments of the day straight into the payments
// table and the same holds into the fake, with one captured amount off.
func seedDay(t testing.TB, e *env, n int) {
	t.Helper()
	seedDayOff(t, e, n, func(i int) bool { return i == n/2 })
}

// seedDayOff is seedDay with the captured amount of the i-th hold one unit
// short at the provider when off(i).
func seedDayOff(t testing.TB, e *env, n int, off func(i int) bool) {
	t.Helper()
	ctx := context.Background()
	ref := func(i int) string { return fmt.Sprintf("fh_seed%08d", i) }
	id := func(i int) string { return orchestrator.PaymentID(e.tenant, fmt.Sprintf("seed-%d", i)) }
	step := 24 * time.Hour / time.Duration(n+1)
	at := func(i int) time.Time { return dayStart.Add(step * time.Duration(i+1)) }
	_, err := e.pool.CopyFrom(ctx, pgx.Identifier{"payments"},
		[]string{"tenant_id", "id", "idempotency_key", "request_hash", "field_hashes", "status", "amount_minor", "currency",
			"captured_minor", "provider", "provider_ref", "payment_method", "created_at", "updated_at"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			return []any{e.tenant, id(i), fmt.Sprintf("seed-%d", i), []byte{0}, map[string]string{}, "captured",
				int64(1000 + i%500), "EUR", int64(1000 + i%500), "fake", ref(i), "pm_card_visa", at(i), at(i)}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var seq iter.Seq[fake.SeedHold] = func(yield func(fake.SeedHold) bool) {
		for i := range n {
			captured := int64(1000 + i%500)
			if off(i) {
				captured--
			}
			if !yield(fake.SeedHold{Ref: ref(i), PaymentID: id(i), TenantID: e.tenant, Status: providers.StatusCaptured,
				AmountMinor: int64(1000 + i%500), CapturedMinor: captured, Currency: "EUR", CreatedAt: at(i), UpdatedAt: at(i)}) {
				return
			}
		}
	}
	if got, err := e.fc.Seed(ctx, seq); err != nil || got != n {
		t.Fatalf("seeded %d (%v)", got, err)
	}
	e.clk.Set(runTime)
}
