package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
)

// tableUpdates is what pg_stat_user_tables counts of a table's updates.
type tableUpdates struct {
	upd, hot int64
}

// TestAuthorizeUpdatesAreHOT: the UPDATEs a new authorization makes of
// idempotency_keys and payment_attempts are HOT (heap-only: no index
// entry written), thanks to the free space migration 00012's fillfactor
// leaves in their pages. The payments UPDATEs cannot be (BENCHMARKS.md,
// "Durable settings"): each changes an indexed column.
func TestAuthorizeUpdatesAreHOT(t *testing.T) {
	w := newBenchWorld(t, pgtest.URL(t))
	svc, done := w.service(t)
	const n = 2000
	var seq atomic.Int64
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() {
			for i := seq.Add(1); i <= n; i = seq.Add(1) {
				if err := w.authorize(svc, fmt.Sprintf("hot-%d", i), true); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	done() // the backends are gone: their statistics are flushed
	pool := pgtest.Pool(t, w.url)
	rows, err := pool.Query(context.Background(), `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relname IN ('payments', 'payment_attempts', 'idempotency_keys')`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]tableUpdates{}
	for rows.Next() {
		var name string
		var u tableUpdates
		if err := rows.Scan(&name, &u.upd, &u.hot); err != nil {
			t.Fatal(err)
		}
		got[name] = u
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name, u := range got {
		t.Logf("%s: %d updates, %d HOT (%.1f%%)", name, u.upd, u.hot, 100*float64(u.hot)/float64(max(u.upd, 1)))
	}
}
