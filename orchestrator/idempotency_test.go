package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

func keyedService(t *testing.T) (*orchestrator.Service, *testkit.Clock, int64) {
	t.Helper()
	clk := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := orchestrator.NewService(orchestrator.Config{Pool: pgtest.DB(t), Clock: clk.Now, Lease: 30 * time.Second})
	tenant, _, _, err := s.CreateTenant(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	return s, clk, tenant.ID
}

func idemReq(t *testing.T, tenant int64, key, body string) orchestrator.IdempotencyRequest {
	t.Helper()
	fp, err := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return orchestrator.IdempotencyRequest{TenantID: tenant, Operation: orchestrator.OpAuthorize, Key: key, Fingerprint: fp}
}

func TestIdempotencyLease(t *testing.T) {
	t.Parallel()

	t.Run("LiveLeaseIsInUseWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		s, _, tenant := keyedService(t)
		ctx := context.Background()
		req := idemReq(t, tenant, "k", `{"a":1}`)
		b, err := s.BeginIdempotent(ctx, req)
		if err != nil || b.Claim == nil {
			t.Fatalf("first claim: %+v %v", b, err)
		}
		_, err = s.BeginIdempotent(ctx, req)
		var e *orchestrator.Error
		if !errors.As(err, &e) || e.Code != orchestrator.CodeIdempotencyKeyInUse || e.RetryAfter <= 0 {
			t.Fatalf("second claim: %v", err)
		}
	})

	t.Run("ExpiredLeaseIsTakenOverByExactlyOne", func(t *testing.T) {
		t.Parallel()
		s, clk, tenant := keyedService(t)
		ctx := context.Background()
		req := idemReq(t, tenant, "crash", `{"a":1}`)
		if b, err := s.BeginIdempotent(ctx, req); err != nil || b.Claim == nil {
			t.Fatalf("first claim: %v", err)
		}
		// The owner "crashes": it never completes or releases.
		clk.Add(31 * time.Second)
		const n = 20
		claims := make([]*orchestrator.Claim, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := s.BeginIdempotent(ctx, req)
				claims[i], errs[i] = b.Claim, err
			}()
		}
		wg.Wait()
		takers := 0
		for i := range n {
			switch {
			case claims[i] != nil:
				takers++
				if !claims[i].Takeover {
					t.Fatal("the taker is not marked as a takeover")
				}
			case orchestrator.ErrorCode(errs[i]) != orchestrator.CodeIdempotencyKeyInUse:
				t.Fatalf("loser got %v", errs[i])
			}
		}
		if takers != 1 {
			t.Fatalf("%d requests took the expired lease over, want exactly 1", takers)
		}
		var takeovers int
		if err := s.Pool().QueryRow(ctx, `SELECT takeovers FROM idempotency_keys WHERE key = 'crash'`).Scan(&takeovers); err != nil || takeovers != 1 {
			t.Fatalf("takeovers = %d (%v)", takeovers, err)
		}
	})

	t.Run("ReleasedKeyIsResumedAtOnce", func(t *testing.T) {
		t.Parallel()
		s, _, tenant := keyedService(t)
		ctx := context.Background()
		req := idemReq(t, tenant, "rel", `{}`)
		b, _ := s.BeginIdempotent(ctx, req)
		if err := s.ReleaseIdempotent(ctx, b.Claim); err != nil {
			t.Fatal(err)
		}
		b2, err := s.BeginIdempotent(ctx, req)
		if err != nil || b2.Claim == nil || !b2.Claim.Resumed || b2.Claim.Takeover {
			t.Fatalf("after release: %+v %v", b2.Claim, err)
		}
		// The old owner can no longer complete.
		if err := s.CompleteIdempotent(ctx, b.Claim, "", orchestrator.StoredResponse{Status: 201, Body: []byte("{}")}); !errors.Is(err, orchestrator.ErrLeaseLost) {
			t.Fatalf("stale owner completed: %v", err)
		}
		if err := s.CompleteIdempotent(ctx, b2.Claim, "", orchestrator.StoredResponse{Status: 201, Body: []byte(`{"ok":1}`),
			Header: map[string]string{"Content-Type": "application/json"}}); err != nil {
			t.Fatal(err)
		}
		b3, err := s.BeginIdempotent(ctx, req)
		if err != nil || b3.Replay == nil || string(b3.Replay.Body) != `{"ok":1}` || b3.Replay.Status != 201 {
			t.Fatalf("replay: %+v %v", b3.Replay, err)
		}
	})

	t.Run("ExpiredKeysArePurgedInBatches", func(t *testing.T) {
		t.Parallel()
		s, clk, tenant := keyedService(t)
		ctx := context.Background()
		_, err := s.Pool().Exec(ctx, `
			INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, field_hashes, status,
				response_status, response_body, created_at, updated_at, expires_at)
			SELECT $1, 'POST /v1/payments', 'k' || g, '\x00', '{}', 'completed', 201, '{}', $2, $2,
				$2::timestamptz + CASE WHEN g <= 2500 THEN interval '1 hour' ELSE interval '48 hours' END
			FROM generate_series(1, 2600) g`, tenant, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		// A key whose lease is still held is never purged, expired or not.
		b, err := s.BeginIdempotent(ctx, idemReq(t, tenant, "live", `{}`))
		if err != nil || b.Claim == nil {
			t.Fatal(err)
		}
		_, err = s.Pool().Exec(ctx, `UPDATE idempotency_keys SET expires_at = $1, locked_until = $2 WHERE key = 'live'`,
			clk.Now().Add(time.Minute), clk.Now().Add(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(2 * time.Hour)
		var got []int
		for {
			n, err := s.PurgeExpiredKeys(ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
			if n < 1000 {
				break
			}
		}
		if fmt.Sprint(got) != "[1000 1000 500]" {
			t.Fatalf("purged batches %v, want [1000 1000 500]", got)
		}
		var left int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&left); err != nil || left != 101 {
			t.Fatalf("%d keys left (%v), want the 100 unexpired and the live one", left, err)
		}
	})
}
