package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// planLog collects the plans auto_explain sends to the client.
type planLog struct {
	mu    sync.Mutex
	plans []explained
}

// explained is one statement's plan as auto_explain writes it in JSON.
type explained struct {
	Query string    `json:"Query Text"`
	Plan  *planNode `json:"Plan"`
}

type planNode struct {
	NodeType  string      `json:"Node Type"`
	Relation  string      `json:"Relation Name"`
	Index     string      `json:"Index Name"`
	IndexCond string      `json:"Index Cond"`
	Plans     []*planNode `json:"Plans"`
}

func (l *planLog) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	_, plan, ok := strings.Cut(n.Message, "plan:\n")
	if !ok {
		return
	}
	var e explained
	if err := json.Unmarshal([]byte(plan), &e); err != nil || e.Plan == nil {
		return
	}
	l.mu.Lock()
	l.plans = append(l.plans, e)
	l.mu.Unlock()
}

// explainingPool opens a pool on e's database whose connections send the
// plan of every statement they execute to the client (auto_explain at
// NOTICE level), where log collects it.
func explainingPool(t *testing.T, e *env) (*pgxpool.Pool, *planLog) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	log := &planLog{}
	cfg.ConnConfig.OnNotice = log.notice
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
			`SET auto_explain.log_format = json`, `SET auto_explain.log_level = notice`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, log
}

// perRowScans lists the scans of reconciliation_discrepancies that a plan
// runs once per row of something else (on the inner side of a nested
// loop) other than a primary-key lookup: such a scan reads a whole run per
// row, which makes comparing two runs quadratic.
func perRowScans(n *planNode, inner bool) []string {
	var out []string
	if inner && strings.HasSuffix(n.NodeType, "Scan") && n.Relation == "reconciliation_discrepancies" &&
		(n.Index != "reconciliation_discrepancies_pkey" || n.IndexCond == "") {
		out = append(out, fmt.Sprintf("%s on %s using %q (%s)", n.NodeType, n.Relation, n.Index, n.IndexCond))
	}
	for i, c := range n.Plans {
		out = append(out, perRowScans(c, inner || n.NodeType == "Nested Loop" && i == 1)...)
	}
	return out
}

// A re-run compares its findings with the previous version's in plans
// whose cost is linear in them even when the planner knows nothing of the
// two runs: the table was analyzed before either existed (as on a big
// history table, which autovacuum analyzes rarely), so it estimates one
// finding per run. Every statement of the re-run and of the listing and
// export of what is gone is checked, as executed, for a per-row scan of a
// run.
func TestRerunComparesRunsWithoutAPerRowScan(t *testing.T) {
	t.Parallel()
	const n, fixed = 3000, 1100 // fixed: more than a page of the CSV export
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	seedStaleStatistics(t, e)
	seedDayOff(t, e, n, func(int) bool { return true }) // every captured amount off: n findings
	v1, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil || v1.DiscrepancyCount != n {
		t.Fatalf("v1 %+v %v", v1, err)
	}
	var resolvedID int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM reconciliation_discrepancies WHERE run_id = $1 AND provider_ref = $2`,
		v1.ID, "fh_seed00000009").Scan(&resolvedID); err != nil {
		t.Fatal(err)
	}
	resolved, err := e.rec.Resolve(ctx, resolvedID, "booked by hand", "key_finance")
	if err != nil {
		t.Fatal(err)
	}
	// Some amounts are right again (gone), another row changes currency
	// too (one new finding beside its still open amount).
	drifts := []fake.Drift{{Kind: fake.DriftCurrency, Ref: "fh_seed00000009", Currency: "USD"}}
	wantGone := map[string]bool{}
	for i := 1000; i < 1000+fixed; i++ {
		ref := fmt.Sprintf("fh_seed%08d", i)
		wantGone[ref] = true
		drifts = append(drifts, fake.Drift{Kind: fake.DriftAmount, Ref: ref, Field: fake.AmountCaptured,
			AmountMinor: int64(1000 + i%500)})
	}
	for _, d := range drifts {
		if err := e.fc.Drift(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	pool, log := explainingPool(t, e)
	rec := reconcile.New(reconcile.Config{Pool: pool, Providers: map[string]providers.Provider{"fake": e.fc}, Clock: e.clk.Now})
	v2, err := rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if v2.Diff.New != 1 || v2.Diff.StillOpen != n-fixed || v2.Diff.Gone != fixed {
		t.Fatalf("diff %+v, want 1 new, %d still open, %d gone", v2.Diff, n-fixed, fixed)
	}
	carried, _, err := rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: v2.ID, State: "resolved"})
	if err != nil || len(carried) != 1 || *carried[0].PaymentID != *resolved.PaymentID || carried[0].Change != "still_open" ||
		deref(carried[0].ResolutionNote) != "booked by hand" {
		t.Fatalf("resolution not carried: %+v %v", carried, err)
	}
	gone, more, err := rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: v2.ID, Change: "gone"})
	if err != nil || len(gone) != 100 || !more {
		t.Fatalf("gone: %d %v %v", len(gone), more, err)
	}
	for _, d := range gone {
		if d.RunID != v1.ID || !wantGone[deref(d.ProviderRef)] {
			t.Fatalf("listed as gone: %+v", d)
		}
	}
	var csv strings.Builder
	if err := rec.WriteCSV(ctx, &csv, reconcile.DiscrepancyFilter{RunID: v2.ID, Change: "gone"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv.String()), "\n")
	refs := map[string]bool{}
	for _, l := range lines[1:] {
		ref := strings.Split(l, ",")[5]
		if !wantGone[ref] {
			t.Fatalf("in the gone CSV: %s", l)
		}
		refs[ref] = true
	}
	if len(lines) != 1+fixed || len(refs) != fixed {
		t.Fatalf("gone CSV: %d lines, %d references, want %d", len(lines), len(refs), fixed)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	var touched int
	for _, p := range log.plans {
		if strings.Contains(p.Query, "reconciliation_discrepancies") {
			touched++
		}
		if bad := perRowScans(p.Plan, false); len(bad) > 0 {
			t.Errorf("a scan of findings runs once per row: %s\nin: %s", strings.Join(bad, "; "), p.Query)
		}
	}
	if touched < 3 {
		t.Fatalf("auto_explain caught %d plans reading discrepancies (of %d), want the re-run's and the listing's",
			touched, len(log.plans))
	}
}

// seedStaleStatistics gives the discrepancies table statistics from
// before the runs under test (three small runs of other days) and stops
// autovacuum from refreshing them, so the planner knows nothing of runs
// made afterwards.
func seedStaleStatistics(t testing.TB, e *env) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`ALTER TABLE reconciliation_discrepancies SET (autovacuum_enabled = false)`,
		`INSERT INTO reconciliation_runs (provider, business_date, version, trigger, status, time_zone, window_start,
			window_end, grace_seconds, started_at)
		SELECT 'other', date '2026-01-01' + i, 1, 'api', 'succeeded', 'UTC', now(), now(), 0, now()
		FROM generate_series(1, 3) i`,
		`INSERT INTO reconciliation_discrepancies (run_id, category, fingerprint, field, created_at)
		SELECT r.id, 'missing_locally', 'missing_locally:ref:old' || r.id || '-' || i || ':', '', now()
		FROM reconciliation_runs r, generate_series(1, 10) i WHERE r.provider = 'other'`,
		`ANALYZE reconciliation_discrepancies`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// onFirstFetch is a query tracer that calls fn, once, as the pairing
// cursor is first read: after the run has read the previous version's
// findings, before it compares with it.
type onFirstFetch struct {
	once sync.Once
	fn   func()
}

func (o *onFirstFetch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "FETCH") {
		o.once.Do(o.fn)
	}
	return ctx
}

func (o *onFirstFetch) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// reconcilerWith is a reconciler of e's day whose connections run fn as
// the pairing cursor is first read.
func reconcilerWith(t *testing.T, e *env, fn func()) *reconcile.Reconciler {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = &onFirstFetch{fn: fn}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return reconcile.New(reconcile.Config{Pool: pool, Providers: map[string]providers.Provider{"fake": e.fc}, Clock: e.clk.Now})
}

// A re-run stores its findings new or still open as the previous version
// was when it began comparing; what changed before it finished still
// counts, as it did when the comparison was made only at the end.
func TestARerunCarriesWhatChangedWhileItWorked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setUp := func(t *testing.T) (*env, orchestrator.Payment) {
		e := newEnv(t, fake.Config{})
		p := e.pay(t, 1000, "EUR", "", "capture:0")
		if err := e.fc.Drift(ctx, fake.Drift{Kind: fake.DriftCurrency, Ref: *p.ProviderRef, Currency: "USD"}); err != nil {
			t.Fatal(err)
		}
		e.clk.Set(runTime)
		return e, p
	}
	t.Run("AResolutionOfThePreviousVersion", func(t *testing.T) {
		t.Parallel()
		e, _ := setUp(t)
		v1, ds1 := e.run(t)
		rec := reconcilerWith(t, e, func() {
			if _, err := e.rec.Resolve(ctx, ds1[0].ID, "refunded by hand", "key_finance"); err != nil {
				t.Error(err)
			}
		})
		v2, err := rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
		if err != nil || *v2.Diff.PreviousRunID != v1.ID || v2.Diff.StillOpen != 1 {
			t.Fatalf("v2 %+v %v", v2, err)
		}
		ds2, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: v2.ID})
		if err != nil || len(ds2) != 1 || deref(ds2[0].ResolutionNote) != "refunded by hand" || ds2[0].ResolvedAt == nil {
			t.Fatalf("the resolution made while v2 worked is not carried: %+v %v", ds2, err)
		}
	})
	t.Run("AnEarlierVersionThatSucceeded", func(t *testing.T) {
		t.Parallel()
		e, _ := setUp(t)
		v1, err := e.rec.Begin(ctx, "fake", day, reconcile.TriggerAPI, "test")
		if err != nil {
			t.Fatal(err)
		}
		rec := reconcilerWith(t, e, func() {
			if done, err := e.rec.Execute(ctx, v1); err != nil || done.Status != "succeeded" {
				t.Errorf("v1 %+v %v", done, err)
			}
		})
		v2, err := rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
		if err != nil || v2.Diff.PreviousRunID == nil || *v2.Diff.PreviousRunID != v1.ID || v2.Diff.StillOpen != 1 || v2.Diff.New != 0 {
			t.Fatalf("v2 %+v %v", v2, err)
		}
		ds2, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: v2.ID})
		if err != nil || len(ds2) != 1 || ds2[0].Change != "still_open" {
			t.Fatalf("v2's finding: %+v %v", ds2, err)
		}
	})
}
