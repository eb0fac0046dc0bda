package reconcile_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// poolOf opens a pool of maxConns connections on e's database, closed when
// t ends.
func poolOf(t testing.TB, e *env, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// reportHook is a provider whose report goes through hook (row by row)
// before reaching the reconciler.
type reportHook struct {
	providers.Provider
	hook func(ctx context.Context, row *providers.ReportRow) error
}

func (h reportHook) Report(ctx context.Context, req providers.ReportRequest, fn func(providers.ReportRow) error) error {
	return h.Provider.Report(ctx, req, func(row providers.ReportRow) error {
		if err := h.hook(ctx, &row); err != nil {
			return err
		}
		return fn(row)
	})
}

func TestParseDateAcceptsOnlySaneDays(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"2000-01-01", "2026-11-30", "9999-12-31"} {
		if _, err := reconcile.ParseDate(ok); err != nil {
			t.Errorf("ParseDate(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"0000-01-01", "0001-01-01", "1999-12-31", "2026-13-01", "2026-02-30", "26-11-30", "", "2026-11-30x"} {
		_, err := reconcile.ParseDate(bad)
		var oe *orchestrator.Error
		if !errors.As(err, &oe) || oe.Code != orchestrator.CodeValidationFailed || oe.Param != "date" {
			t.Errorf("ParseDate(%q): %v, want validation_failed on date", bad, err)
		}
	}
}

// A failed run tells finance what kind of failure it was, never the
// database's own words, and logs those with the run id.
func TestFailedRunErrorIsClientSafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		want  string
		fault func(t *testing.T, e *env) providers.Provider
	}{
		{"ASQLErrorIsAnInternalError", "internal error; see the logs for run ", func(t *testing.T, e *env) providers.Provider {
			if _, err := e.pool.Exec(ctx, `ALTER TABLE reconciliation_provider_rows RENAME TO staging_gone`); err != nil {
				t.Fatal(err)
			}
			return e.fc
		}},
		{"ALostConnectionIsTheDatabaseUnavailable", "database unavailable; re-run it", func(t *testing.T, e *env) providers.Provider {
			var once sync.Once
			return reportHook{Provider: e.fc, hook: func(ctx context.Context, _ *providers.ReportRow) error {
				var err error
				once.Do(func() { err = terminateCopy(ctx, e.pool) })
				return err
			}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			e.aDay(t)
			e.clk.Set(runTime)
			prov := tc.fault(t, e)
			logs := &testkit.SyncBuffer{}
			rec := reconcile.New(reconcile.Config{Pool: poolOf(t, e, 4), Providers: map[string]providers.Provider{"fake": prov},
				Clock: e.clk.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			begun, err := rec.Begin(ctx, "fake", day, reconcile.TriggerAPI, "test")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rec.Execute(ctx, begun); err == nil {
				t.Fatal("the run did not fail")
			}
			run, err := rec.GetRun(ctx, begun.ID)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status != "failed" || run.Error == nil || !strings.HasPrefix(*run.Error, tc.want) {
				t.Fatalf("run %s %q, want failed with %q", run.Status, deref(run.Error), tc.want)
			}
			var user string
			if err := e.pool.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil {
				t.Fatal(err)
			}
			host := e.pool.Config().ConnConfig.Host
			for _, leak := range []string{"SQLSTATE", "ERROR", "FATAL", "relation", "terminating", "reconciliation_provider_rows",
				"COPY", user, host} {
				if strings.Contains(*run.Error, leak) {
					t.Errorf("run error %q gives away %q", *run.Error, leak)
				}
			}
			if !strings.Contains(logs.String(), `"run_id":`+strconv.FormatInt(begun.ID, 10)) || !strings.Contains(logs.String(), "SQLSTATE") {
				t.Errorf("the log lacks the run id or the database's detail:\n%s", logs.String())
			}
		})
	}
}

// terminateCopy ends the backend that stages the provider's rows, as a
// database restart would, once it shows in pg_stat_activity.
func terminateCopy(ctx context.Context, pool *pgxpool.Pool) error {
	var qerr error
	err := testkit.Poll(10*time.Second, func() (bool, error) {
		var n int
		qerr = pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'copy%reconciliation_provider_rows%'`).Scan(&n)
		return qerr != nil || n > 0, nil
	})
	if err != nil {
		return errors.New("the COPY never started")
	}
	return qerr
}

// However many runs start at once, at most MaxRuns (half the pool) execute
// at a time, the others wait their turn, finance can read meanwhile, and
// every run finishes.
func TestRunsWaitTheirTurnAndAllFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	e.aDay(t)
	e.clk.Set(runTime)
	var (
		mu                         sync.Mutex
		active, entered, maxActive int
		gate                       = make(chan struct{})
	)
	// Each report waits at its start for the test to let it go.
	gated := gatedProvider{Provider: e.fc, enter: func() {
		mu.Lock()
		active++
		entered++
		maxActive = max(maxActive, active)
		mu.Unlock()
		<-gate
	}, leave: func() {
		mu.Lock()
		active--
		mu.Unlock()
	}}
	// A pool of 2: one run at a time, one connection for the rest.
	rec := reconcile.New(reconcile.Config{Pool: poolOf(t, e, 2), Providers: map[string]providers.Provider{"fake": gated},
		Clock: e.clk.Now})
	const n = 4
	done := make(chan reconcile.Run, n)
	var executing sync.WaitGroup
	// Should the test fail midway, let the runs go before the pool closes.
	t.Cleanup(func() { close(gate); executing.Wait() })
	var ids []int64
	for range n {
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		run, err := rec.Begin(bctx, "fake", day, reconcile.TriggerAPI, "test")
		cancel()
		if err != nil {
			t.Fatalf("begin run %d: %v", len(ids)+1, err)
		}
		ids = append(ids, run.ID)
		executing.Add(1)
		go func() {
			defer executing.Done()
			r, err := rec.Execute(ctx, run)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.WaitFor(t, 30*time.Second, what, testkit.Until(cond))
	}
	for i := 1; i <= n; i++ {
		waitFor("a run to read its report", func() bool { mu.Lock(); defer mu.Unlock(); return entered >= i })
		mu.Lock()
		now := entered
		mu.Unlock()
		if now != i {
			t.Fatalf("%d runs read their report with %d finished, want %d", now, i-1, i)
		}
		// While one run executes, the others wait as running, and
		// finance's reads get a connection.
		runs, _, err := rec.ListRuns(ctx, reconcile.RunFilter{Provider: "fake"})
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, r := range runs {
			if r.Status == "running" {
				running++
			}
		}
		if running != n-i+1 {
			t.Fatalf("%d runs running with %d finished, want %d", running, i-1, n-i+1)
		}
		gate <- struct{}{}
		<-done
	}
	if maxActive != 1 {
		t.Fatalf("%d runs executed at once, want 1", maxActive)
	}
	for _, id := range ids {
		run, err := rec.GetRun(ctx, id)
		if err != nil || run.Status != "succeeded" {
			t.Fatalf("run %d: %+v %v", id, run, err)
		}
	}
}

// gatedProvider calls enter before a report and leave after it.
type gatedProvider struct {
	providers.Provider
	enter, leave func()
}

func (g gatedProvider) Report(ctx context.Context, req providers.ReportRequest, fn func(providers.ReportRow) error) error {
	g.enter()
	defer g.leave()
	return g.Provider.Report(ctx, req, fn)
}

// A run works on one connection: on a pool of one, a day with more
// findings than one batch (stored between two pages of pairs) finishes.
func TestARunNeedsOneConnection(t *testing.T) {
	t.Parallel()
	const n = 6000
	e := newEnv(t, fake.Config{})
	seedDayOff(t, e, n, func(int) bool { return true })
	rec := reconcile.New(reconcile.Config{Pool: poolOf(t, e, 1), Providers: map[string]providers.Provider{"fake": e.fc},
		Clock: e.clk.Now})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "succeeded" || run.MatchedCount != n || run.DiscrepancyCount != n {
		t.Fatalf("run %+v", run)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
