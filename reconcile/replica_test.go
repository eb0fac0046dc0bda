package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payorch/payorch/internal/pgcluster"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// replicaEnv is an env on a primary of its own, streamed to a hot
// standby; rec reads from the standby (Config.Replica), e.rec does not.
type replicaEnv struct {
	*env
	standby *pgcluster.Cluster
	// replica is a pool on the standby, for the test's own looks.
	replica *pgxpool.Pool
	// reads is rec's pool on the standby.
	readPool *pgxpool.Pool
	rec      *reconcile.Reconciler
	metrics  *sdkmetric.ManualReader
}

func newReplicaEnv(t *testing.T, maxWait time.Duration) *replicaEnv {
	t.Helper()
	primary := pgtest.NewCluster(t)
	standby := pgtest.NewStandby(t, primary)
	clk := testkit.NewClock(dayStart.Add(10 * time.Hour))
	fr, err := fake.Start("127.0.0.1:0", fake.Config{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	e := newEnvOn(t, clk, fr.Client(&http.Client{}), pgtest.Pool(t, primary.ConnString("postgres")))
	e.fs = fr.Server()
	reader := sdkmetric.NewManualReader()
	replica, readPool := pgtest.Pool(t, standby.ConnString("postgres")), pgtest.Pool(t, standby.ConnString("postgres"))
	rec := reconcile.New(reconcile.Config{Pool: e.pool, Replica: readPool,
		ReplicaMaxWait: maxWait, Providers: map[string]providers.Provider{"fake": e.fc}, Clock: clk.Now,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	return &replicaEnv{env: e, standby: standby, replica: replica, readPool: readPool, rec: rec, metrics: reader}
}

// reads is the replica router's count of reads served by servedBy for
// reason.
func (e *replicaEnv) reads(t *testing.T, servedBy, reason string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "payorch.read_replica.reads" {
				continue
			}
			for _, dp := range sum.DataPoints {
				s, _ := dp.Attributes.Value("served_by")
				r, _ := dp.Attributes.Value("reason")
				if s.AsString() == servedBy && r.AsString() == reason {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// drift makes the day hold one finding of several kinds.
func (e *replicaEnv) drift(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	e.aDay(t)
	short := e.pay(t, 2000, "EUR", "", "capture:0")
	gone := e.pay(t, 2500, "EUR", "", "capture:0")
	for _, d := range []fake.Drift{
		{Kind: fake.DriftAmount, Ref: *short.ProviderRef, Field: fake.AmountCaptured, AmountMinor: 1999},
		{Kind: fake.DriftDrop, Ref: *gone.ProviderRef},
		{Kind: fake.DriftAdd, Row: &fake.Row{Ref: "fh_stranger", Status: providers.StatusCaptured, AmountMinor: 999,
			CapturedMinor: 999, Currency: "EUR", CreatedAt: dayStart.Add(12 * time.Hour), UpdatedAt: dayStart.Add(12 * time.Hour)}},
	} {
		if err := e.fc.Drift(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}

// reconcile runs the day with rec and returns the run and its findings.
func reconcileWith(t *testing.T, e *env, rec *reconcile.Reconciler) (reconcile.Run, []reconcile.Discrepancy) {
	t.Helper()
	e.clk.Set(runTime)
	ctx := context.Background()
	run, err := rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "succeeded" {
		t.Fatalf("run %+v", run)
	}
	ds, _, err := rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: run.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return run, ds
}

// findings lists what ds found, in a form two runs of a day share.
func findings(ds []reconcile.Discrepancy) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s/%s %s %s expected=%s actual=%s", d.Category, d.Field, deref(d.PaymentID),
			deref(d.ProviderRef), d.Expected, d.Actual))
	}
	slices.Sort(out)
	return out
}

// paymentScans is how often the standby has read the payments table,
// which of the reconciler's reads only the pairing does; it waits up to
// 10s for the count to pass after (a session reports its counts when it
// ends, or once idle for a while).
func (e *replicaEnv) paymentScans(t *testing.T, after int64) int64 {
	t.Helper()
	var n int64
	// Not passing it is the caller's finding, not a failure here.
	_ = testkit.Poll(10*time.Second, func() (bool, error) {
		err := e.replica.QueryRow(context.Background(), `SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0)
			FROM pg_stat_user_tables WHERE relname = 'payments'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > after, nil
	})
	return n
}

// A day reconciled with a replica finds what it finds on the primary
// alone, and its pairs were read on the standby: the standby's own
// statistics show the payments read there, and the router counts replica
// reads and no fallback. The day spans several batches of both cursors
// (staged rows, payments of the window) and has every kind of pair:
// unmatched provider rows, payments the provider lacks, duplicates.
func TestReconciliationPairsOnTheReplicaFindTheSame(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t, 10*time.Second)
	e.drift(t)
	dup := e.pay(t, 3100, "EUR", "", "capture:0")
	if err := e.fc.Drift(context.Background(), fake.Drift{Kind: fake.DriftDuplicate, Ref: *dup.ProviderRef}); err != nil {
		t.Fatal(err)
	}
	// Flexible holds, whose parts are compared with our increments and
	// captures read where the payments are: one agrees, one has a capture
	// of another amount at the provider.
	e.flexPay(t, 1000, "increment:1500", "part:500", "capture:1100")
	parted := e.flexPay(t, 1000, "part:400", "part:300")
	if err := e.fc.Drift(context.Background(), fake.Drift{Kind: fake.DriftPartAmount, Ref: *parted.ProviderRef, Part: 1,
		AmountMinor: 450}); err != nil {
		t.Fatal(err)
	}
	seedDayOff(t, e.env, 2*5000+123, func(i int) bool { return i%997 == 0 })
	before := e.paymentScans(t, -1)

	onPrimary, want := reconcileWith(t, e.env, e.env.rec)
	if len(want) != 3+1+1+11 || !slices.Contains(findings(want), fmt.Sprintf("part_mismatch/capture %s %s expected=400 actual=450",
		parted.ID, *parted.ProviderRef)) {
		t.Fatalf("on the primary: %d findings, want 16 with the part: %q", len(want), findings(want))
	}
	onReplica, got := reconcileWith(t, e.env, e.rec)
	if !slices.Equal(findings(got), findings(want)) {
		t.Fatalf("with the replica the day found\n%q\non the primary\n%q", findings(got), findings(want))
	}
	if onReplica.LocalCount != onPrimary.LocalCount || onReplica.ProviderCount != onPrimary.ProviderCount ||
		onReplica.MatchedCount != onPrimary.MatchedCount || onReplica.DiscrepancyCount != onPrimary.DiscrepancyCount ||
		!reflect.DeepEqual(onReplica.Totals, onPrimary.Totals) || onReplica.Diff.StillOpen != int64(len(want)) {
		t.Fatalf("with the replica %+v\non the primary %+v", onReplica, onPrimary)
	}
	e.readPool.Close() // its sessions end, and report their counts
	if after := e.paymentScans(t, before); after == before {
		t.Fatal("the standby never read the payments: the pairing did not run on it")
	}
	if n := e.reads(t, "replica", "caught_up"); n < 2 { // the pairing and the list
		t.Fatalf("%d replica reads counted", n)
	}
	for _, reason := range []string{"lagging", "unavailable", "not_standby", "failed"} {
		if n := e.reads(t, "primary", reason); n != 0 {
			t.Fatalf("%d reads fell back to the primary (%s)", n, reason)
		}
	}
}

// pauseReplay stops the standby replaying the primary's WAL until
// resumed.
func (e *replicaEnv) pauseReplay(t *testing.T) (resume func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.replica.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the standby's replay to pause", func() (bool, error) {
		var state string
		if err := e.replica.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state); err != nil {
			return false, err
		}
		return state == "paused", fmt.Errorf("replay %s", state)
	})
	return func() {
		if _, err := e.replica.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
			t.Fatal(err)
		}
	}
}

// While the standby has stopped replaying, a finance read made right
// after a write (resolving a discrepancy) still shows the write: the
// replica has not got it, so the read waits its bounded time and goes to
// the primary, counted, and nothing fails. Once replay resumes, reads go
// to the replica again.
func TestAFinanceReadRightAfterAWriteSeesItWhileTheReplicaLags(t *testing.T) {
	t.Parallel()
	const maxWait = 200 * time.Millisecond
	e := newReplicaEnv(t, maxWait)
	e.drift(t)
	run, ds := reconcileWith(t, e.env, e.rec)
	ctx := context.Background()

	resume := e.pauseReplay(t)
	target := ds[0]
	if _, err := e.rec.Resolve(ctx, target.ID, "paid out by hand", "finance"); err != nil {
		t.Fatal(err)
	}
	var stale bool
	if err := e.replica.QueryRow(ctx, `SELECT resolved_at IS NULL FROM reconciliation_discrepancies WHERE id = $1`,
		target.ID).Scan(&stale); err != nil || !stale {
		t.Fatalf("the standby already has the resolution (stale=%v, %v): the test would prove nothing", stale, err)
	}

	start := time.Now()
	resolved, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: run.ID, State: "resolved"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resolved) != 1 || resolved[0].ID != target.ID || deref(resolved[0].ResolutionNote) != "paid out by hand" {
		t.Fatalf("resolved discrepancies right after resolving: %+v", resolved)
	}
	if took := time.Since(start); took < maxWait || took > maxWait+5*time.Second {
		t.Errorf("the list took %v; it should wait %v for the replica, then ask the primary", took, maxWait)
	}
	var csv bytes.Buffer
	if err := e.rec.WriteCSV(ctx, &csv, reconcile.DiscrepancyFilter{RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(csv.String(), "paid out by hand") {
		t.Fatalf("CSV right after resolving:\n%s", csv.String())
	}
	days, err := e.rec.DiscrepanciesPerDay(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []reconcile.DayCount{{Date: "2026-11-30", Open: int64(len(ds) - 1)}, {Date: "2026-12-01"}}; !slices.Equal(days, want) {
		t.Fatalf("discrepancies per day %+v, want %+v", days, want)
	}
	// A new run is seen at once in the list and by id.
	again, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil || again.Status != "succeeded" {
		t.Fatalf("run with replay paused: %+v %v", again, err)
	}
	runs, _, err := e.rec.ListRuns(ctx, reconcile.RunFilter{})
	if err != nil || len(runs) != 2 || runs[0].ID != again.ID || runs[0].Status != "succeeded" {
		t.Fatalf("runs right after a run: %+v %v", runs, err)
	}
	if got, err := e.rec.GetRun(ctx, again.ID); err != nil || got.Diff.StillOpen != int64(len(ds)) {
		t.Fatalf("run right after it finished: %+v %v", got, err)
	}
	if n := e.reads(t, "primary", "lagging"); n < 6 {
		t.Fatalf("%d reads fell back to the primary for a lagging replica, want at least 6", n)
	}

	resume()
	before := e.reads(t, "replica", "caught_up")
	if _, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: run.ID, State: "resolved"}); err != nil {
		t.Fatal(err)
	}
	if e.reads(t, "replica", "caught_up") != before+1 {
		t.Fatal("the replica, caught up again, did not serve the next read")
	}
}

// With the standby stopped, reconciliation and finance's lists work on
// the primary, and the fallbacks are counted.
func TestReconciliationAndListsWorkWithTheReplicaDown(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t, time.Second)
	e.drift(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.standby.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	run, ds := reconcileWith(t, e.env, e.rec)
	if len(ds) != 3 || run.DiscrepancyCount != 3 {
		t.Fatalf("with the replica down: %+v %q", run, findings(ds))
	}
	if _, err := e.rec.Resolve(ctx, ds[0].ID, "checked", "finance"); err != nil {
		t.Fatal(err)
	}
	if open, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: run.ID, State: "open"}); err != nil || len(open) != 2 {
		t.Fatalf("open discrepancies %+v %v", open, err)
	}
	if runs, _, err := e.rec.ListRuns(ctx, reconcile.RunFilter{}); err != nil || len(runs) != 1 {
		t.Fatalf("runs %+v %v", runs, err)
	}
	if _, err := e.rec.DiscrepanciesPerDay(ctx, 7); err != nil {
		t.Fatal(err)
	}
	var csv bytes.Buffer
	if err := e.rec.WriteCSV(ctx, &csv, reconcile.DiscrepancyFilter{RunID: run.ID}); err != nil || !strings.Contains(csv.String(), "checked") {
		t.Fatalf("CSV %v:\n%s", err, csv.String())
	}
	if n := e.reads(t, "primary", "unavailable"); n < 6 {
		t.Fatalf("%d reads fell back to the primary for an unavailable replica, want at least 6", n)
	}
	if n := e.reads(t, "replica", "caught_up"); n != 0 {
		t.Fatalf("%d reads served by a stopped replica", n)
	}
}

// A "replica" that is not in recovery (the primary itself, or a promoted
// standby) serves nothing: it may not hold what the primary has.
func TestAReplicaThatIsNoStandbyServesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	e.aDay(t)
	reader := sdkmetric.NewManualReader()
	other := pgtest.DB(t) // another database: were it read, the run would find nothing
	rec := reconcile.New(reconcile.Config{Pool: e.pool, Replica: other, Providers: map[string]providers.Provider{"fake": e.fc},
		Clock: e.clk.Now, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	run, ds := reconcileWith(t, e, rec)
	if len(ds) != 0 || run.LocalCount != 7 || run.MatchedCount != 7 {
		t.Fatalf("run %+v, findings %q", run, findings(ds))
	}
	re := &replicaEnv{env: e, metrics: reader}
	if n := re.reads(t, "primary", "not_standby"); n < 2 {
		t.Fatalf("%d reads refused a replica not in recovery, want at least 2 (the pairing, the list)", n)
	}
	if n := re.reads(t, "replica", "caught_up"); n != 0 {
		t.Fatalf("%d reads served by a server that is not a standby", n)
	}
}

// A read that fails on the replica once it has a connection there (here:
// the replica's sessions cannot see payorch's tables) is done again on
// the primary, counted, instead of failing: the run judges its day again
// on the primary, and the lists read there.
func TestAReadThatFailsOnTheReplicaIsDoneOnThePrimary(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t, 10*time.Second)
	e.drift(t)
	cfg, err := pgxpool.ParseConfig(e.standby.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "nowhere"
	broken, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broken.Close)
	reader := sdkmetric.NewManualReader()
	rec := reconcile.New(reconcile.Config{Pool: e.pool, Replica: broken, Providers: map[string]providers.Provider{"fake": e.fc},
		Clock: e.clk.Now, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	run, ds := reconcileWith(t, e.env, rec)
	if len(ds) != 3 || run.DiscrepancyCount != 3 {
		t.Fatalf("run %+v, findings %q", run, findings(ds))
	}
	re := &replicaEnv{env: e.env, metrics: reader}
	if n := re.reads(t, "primary", "failed"); n != 2 { // the pairing, the list
		t.Fatalf("%d reads redone on the primary, want 2", n)
	}
}
