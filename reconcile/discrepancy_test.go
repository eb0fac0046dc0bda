package reconcile_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"strconv"
	"testing"
	"time"

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
