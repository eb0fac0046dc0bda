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

// TestAuthorizeUpdatesAreHOT: the UPDATEs new authorizations make of
// idempotency_keys are HOT (heap-only: no index entry written), nearly
// all, thanks to the room migration 00012's fillfactor leaves in their
// pages (without it, about 88% were). The two UPDATEs of payments and the
// one of payment_attempts cannot be (migration 00012 says why): each
// changes an indexed column; the test logs them.
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
	for name, perAuthorize := range map[string]int64{"idempotency_keys": 2, "payment_attempts": 1, "payments": 2} {
		if u := got[name]; u.upd != perAuthorize*n {
			t.Errorf("%s: %d updates for %d authorizations, want %d each", name, u.upd, n, perAuthorize)
		}
	}
	for _, name := range []string{"idempotency_keys"} {
		if u := got[name]; float64(u.hot) < 0.97*float64(u.upd) {
			t.Errorf("%s: %d of %d updates HOT, want at least 97%%", name, u.hot, u.upd)
		}
	}
}
