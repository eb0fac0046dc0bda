package orchestrator_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

// Tests of what a lost database connection leaves behind: nothing that only
// a lease's expiry clears.
func TestIdempotencyKeyAfterLostConnection(t *testing.T) {
	t.Parallel()

	// PostgreSQL terminates every backend of the pool (57P01) after the
	// request claimed its key. The pool hands its idle connections out
	// without pinging them (as it does with those used less than a second
	// ago, under load), so the next one is dead too: the key is completed
	// on a live one, not left locked for the lease.
	t.Run("CompleteAfterKilledBackendsIsStored", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		dbURL := pgtest.URL(t)
		pc, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s := orchestrator.NewService(orchestrator.Config{Pool: pool, Lease: time.Minute})
		tenant, _, _, err := s.CreateTenant(ctx, "T")
		if err != nil {
			t.Fatal(err)
		}
		req := idemReq(t, tenant.ID, "complete-after-kill", `{"a":1}`)
		b, err := s.BeginIdempotent(ctx, req)
		if err != nil || b.Claim == nil {
			t.Fatalf("claim: %+v %v", b, err)
		}
		// Four idle connections in the pool, then every backend killed.
		conns := make([]*pgxpool.Conn, 4)
		for i := range conns {
			if conns[i], err = pool.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range conns {
			c.Release()
		}
		killer, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer killer.Close(ctx)
		var killed int
		if err := killer.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&killed); err != nil || killed < 4 {
			t.Fatalf("terminated %d backends (%v), want the pool's 4", killed, err)
		}

		res := orchestrator.StoredResponse{Status: 201, Header: map[string]string{"Content-Type": "application/json"},
			Body: []byte(`{"ok":true}` + "\n")}
		if err := s.CompleteIdempotent(ctx, b.Claim, "", res); err != nil {
			t.Fatalf("complete after the backends died: %v", err)
		}
		again, err := s.BeginIdempotent(ctx, req)
		if err != nil || again.Replay == nil || !bytes.Equal(again.Replay.Body, res.Body) {
			t.Fatalf("retry: %+v %v, want the stored answer", again, err)
		}
	})

	// The claim commits but its answer never arrives: the server is made
	// to hold every commit's answer (it waits for a synchronous standby
	// that does not exist) and the claiming backend is terminated while it
	// waits. The key is leased to a token nobody holds; BeginIdempotent
	// gives that lease up again on a live connection before it returns its
	// error, so the retry resumes at once.
	t.Run("ClaimWhoseAnswerWasLostIsGivenUp", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		cluster := pgtest.NewCluster(t)
		dbURL := cluster.ConnString("postgres")
		setup := orchestrator.NewService(orchestrator.Config{Pool: pgtest.Pool(t, dbURL)})
		tenant, _, _, err := setup.CreateTenant(ctx, "T")
		if err != nil {
			t.Fatal(err)
		}
		admin := func(q string) {
			t.Helper()
			conn, err := pgx.Connect(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		admin(`ALTER SYSTEM SET synchronous_standby_names = 'nobody'`)
		if err := cluster.Restart(ctx, false); err != nil {
			t.Fatal(err)
		}

		s := orchestrator.NewService(orchestrator.Config{Pool: pgtest.Pool(t, dbURL), Lease: time.Minute})
		// A webhook endpoint's claim: a money request's commits without
		// waiting (for the standby too: asyncClaim), so it could not be
		// caught waiting.
		req := idemReq(t, tenant.ID, "lost-claim", `{"a":1}`)
		req.Operation = "POST /v1/webhook_endpoints"
		done := make(chan error, 1)
		go func() {
			_, err := s.BeginIdempotent(ctx, req)
			done <- err
		}()
		watcher, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer watcher.Close(ctx)
		var pid int
		testkit.WaitFor(t, 10*time.Second, "the claim's commit waiting for the standby", func() (bool, error) {
			err := watcher.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&pid)
			return err == nil, err
		})
		if _, err := watcher.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		admin(`ALTER SYSTEM RESET synchronous_standby_names`)
		admin(`SELECT pg_reload_conf()`)
		if err := <-done; err == nil {
			t.Fatal("the claim whose answer was lost succeeded")
		}

		b, err := s.BeginIdempotent(ctx, req)
		if err != nil || b.Claim == nil || !b.Claim.Resumed {
			t.Fatalf("retry: %+v %v, want the lost claim resumed at once", b, err)
		}
	})
}
