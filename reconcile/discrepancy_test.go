package reconcile_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// stallingWriter blocks its first Write until released, telling stalled
// when it starts to wait: a client that does not read.
type stallingWriter struct {
	buf      bytes.Buffer
	stalled  chan struct{}
	released chan struct{}
	once     bool
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	if !w.once {
		w.once = true
		close(w.stalled)
		<-w.released
	}
	return w.buf.Write(p)
}

// A CSV export to a client that stops reading holds no database
// connection: on a pool of one, finance's reads go on meanwhile. Once the
// client reads, it gets every discrepancy, once each, in id order, across
// pages.
func TestCSVExportHoldsNoConnectionWhileTheClientStalls(t *testing.T) {
	t.Parallel()
	const n = 2500 // three pages
	e := newEnv(t, fake.Config{})
	seedDayOff(t, e, n, func(int) bool { return true })
	ctx := context.Background()
	run, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil || run.DiscrepancyCount != n {
		t.Fatalf("run %+v %v", run, err)
	}
	pool := poolOf(t, e, 1)
	rec := reconcile.New(reconcile.Config{Pool: pool, Providers: map[string]providers.Provider{"fake": e.fc}, Clock: e.clk.Now})

	w := &stallingWriter{stalled: make(chan struct{}), released: make(chan struct{})}
	exported := make(chan error, 1)
	go func() { exported <- rec.WriteCSV(ctx, w, reconcile.DiscrepancyFilter{RunID: run.ID}) }()
	select {
	case <-w.stalled:
	case err := <-exported:
		t.Fatalf("export ended before writing: %v", err)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections held while the client stalls", n)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = rec.GetRun(rctx, run.ID)
	cancel()
	if err != nil {
		t.Errorf("finance read while an export stalls: %v", err)
	}
	close(w.released)
	if err := <-exported; err != nil {
		t.Fatal(err)
	}

	recs, err := csv.NewReader(&w.buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n+1 || recs[0][0] != "id" {
		t.Fatalf("%d CSV records, want a header and %d", len(recs), n)
	}
	var last int64
	for _, r := range recs[1:] {
		id, err := strconv.ParseInt(r[0], 10, 64)
		if err != nil || id <= last {
			t.Fatalf("id %q after %d: not in increasing order", r[0], last)
		}
		last = id
	}
}

func TestDiscrepanciesPerDayCountsTheLatestRunsOpenOnes(t *testing.T) {
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
	perDay := func(days int) string {
		t.Helper()
		got, err := e.rec.DiscrepanciesPerDay(ctx, days)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, d := range got {
			s = append(s, d.Date+":"+strconv.FormatInt(d.Open, 10))
		}
		return strings.Join(s, " ")
	}
	wantDays := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %s, want %s", what, got, want)
		}
	}

	_, ds1 := e.run(t) // the clock is now the morning after day
	if len(ds1) != 2 {
		t.Fatalf("v1: %s", categories(ds1))
	}
	wantDays("before anything is resolved", perDay(3), "2026-11-29:0 2026-11-30:2 2026-12-01:0")
	for _, d := range ds1 {
		if *d.PaymentID == b.ID {
			if _, err := e.rec.Resolve(ctx, d.ID, "booked by hand", "key_finance"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantDays("after one is resolved", perDay(3), "2026-11-29:0 2026-11-30:1 2026-12-01:0")

	// v2 finds a and b again (b's resolution carried over) and c missing:
	// the day counts v2's open ones, not v1's and v2's.
	if err := e.fc.Drift(ctx, fake.Drift{Kind: fake.DriftDrop, Ref: *c.ProviderRef}); err != nil {
		t.Fatal(err)
	}
	v2, ds2 := e.run(t)
	if v2.Version != 2 || len(ds2) != 3 {
		t.Fatalf("v2 %+v: %s", v2, categories(ds2))
	}
	wantDays("after a re-run", perDay(2), "2026-11-30:2 2026-12-01:0")

	// A later version still running, and a run that failed, count for
	// nothing; another provider's run of another day counts on its day.
	_, err := e.pool.Exec(ctx, `
		WITH runs AS (
			INSERT INTO reconciliation_runs (provider, business_date, version, trigger, status, time_zone,
				window_start, window_end, grace_seconds, started_at)
			VALUES ('fake', '2026-11-30', 3, 'api', 'running', 'UTC', $1, $1, 0, $1),
				('other', '2026-11-28', 1, 'api', 'failed', 'UTC', $1, $1, 0, $1),
				('other', '2026-11-29', 1, 'api', 'succeeded', 'UTC', $1, $1, 0, $1)
			RETURNING id, status
		)
		INSERT INTO reconciliation_discrepancies (run_id, category, fingerprint, created_at)
		SELECT id, 'missing_locally', 'fp' || g, $1 FROM runs CROSS JOIN generate_series(1, 4) g`, runTime)
	if err != nil {
		t.Fatal(err)
	}
	wantDays("with other runs", perDay(4), "2026-11-28:0 2026-11-29:4 2026-11-30:2 2026-12-01:0")

	for _, days := range []int{0, reconcile.MaxDiscrepancyDays + 1} {
		if _, err := e.rec.DiscrepanciesPerDay(ctx, days); orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed {
			t.Fatalf("%d days: %v", days, err)
		}
	}
}
