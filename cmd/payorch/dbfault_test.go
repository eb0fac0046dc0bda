package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
)

// TestDatabaseRestartsAndKilledBackends sends a stream of authorizations
// through `payorch serve` while PostgreSQL is restarted in immediate mode
// (a crash, as clients see it) and every backend is terminated. Each client
// retries its key until it gets an answer. Afterwards: every request got
// its 201 (nothing lost), every key made exactly one provider hold and one
// payment, and every replay is byte-identical to the answer the client
// kept. The server is never restarted. The clients keep sending new keys
// until the disruptions are over, so the last one meets traffic too.
func TestDatabaseRestartsAndKilledBackends(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	w := newWorld(t, cluster.ConnString("postgres"))
	srv := startServe(t, w.env(map[string]string{
		"PAYORCH_PROVIDER_TIMEOUT":  "2s",
		"PAYORCH_IDEMPOTENCY_LEASE": "4s",
		"PAYORCH_DB_MAX_CONNS":      "10",
	}))
	body := `{"amount_minor":2500,"currency":"EUR"}`

	const workers, perWorker = 8, 12
	var (
		mu   sync.Mutex
		got  = map[string][]byte{} // acknowledged answers by key
		lost []string
	)
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var retries, acked atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < perWorker || !stopped(); j++ {
				key := fmt.Sprintf("dbfault-%d-%d", i, j)
				deadline := time.Now().Add(60 * time.Second)
				for {
					a := authorize(srv.base, w.key, key, body)
					if a.err == nil && a.status == 201 {
						mu.Lock()
						got[key] = a.body
						mu.Unlock()
						acked.Add(1)
						break
					}
					retries.Add(1)
					if time.Now().After(deadline) {
						mu.Lock()
						lost = append(lost, fmt.Sprintf("%s: last answer %d %s %v", key, a.status, a.body, a.err))
						mu.Unlock()
						break
					}
					// A client's pause between retries: the pace of
					// its traffic, not a wait for anything.
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}

	// The disruptions, each once the workers have had answers since the
	// last (the server is serving again, and a fault meets requests in
	// flight however fast the machine is).
	progressed := func(since string) {
		t.Helper()
		want := acked.Load() + workers
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%d more acknowledged requests %s", workers, since), func() (bool, error) {
			n := acked.Load()
			return n >= want, fmt.Errorf("%d of %d acknowledged, %d retries", n, want, retries.Load())
		})
	}
	disrupt := func() error {
		ctx := context.Background()
		progressed("before the first restart")
		if err := cluster.Restart(ctx, true); err != nil {
			return err
		}
		progressed("after the first restart")
		conn, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'`)
		conn.Close(ctx)
		if err != nil {
			return err
		}
		progressed("after the backends were terminated")
		return cluster.Restart(ctx, true)
	}
	// The workers end when the test does, even if a wait fails it.
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers()
	err := disrupt()
	stopWorkers()
	if err != nil {
		t.Fatalf("disruption: %v", err)
	}
	for _, l := range lost {
		t.Errorf("lost: %s", l)
	}
	if retries.Load() == 0 {
		t.Fatal("no request ever failed: the disruptions missed the traffic, so this run proves nothing")
	}
	t.Logf("%d failed attempts retried", retries.Load())
	if len(got) < workers*perWorker {
		t.Fatalf("%d requests acknowledged, want every worker's %d at least", len(got), perWorker)
	}
	for key, first := range got {
		if ops := w.providerAuthorizations(t, key); len(ops) != 1 {
			t.Errorf("%s: %d provider authorizations, want 1", key, len(ops))
		}
		a := authorize(srv.base, w.key, key, body)
		if a.status != 201 || !a.replayed || string(a.body) != string(first) {
			t.Errorf("%s: replay %d replayed=%v differs from the acknowledged answer:\n%s\n%s", key, a.status, a.replayed, a.body, first)
		}
	}
	if n := w.count(t, `SELECT count(*) FROM payments`); n != len(got) {
		t.Errorf("%d payments, want one per acknowledged key (%d)", n, len(got))
	}
	if n := w.count(t, `SELECT count(*) FROM payments WHERE status <> 'authorized'`); n != 0 {
		t.Errorf("%d payments not authorized", n)
	}
}
