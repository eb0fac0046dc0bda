package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
)

func TestReplayCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.DB(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cached := NewService(Config{Pool: pool, Clock: clock, ReplayCache: 100})
	tenant, _, _, err := cached.CreateTenant(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	req := func(key, body string) IdempotencyRequest {
		fp, err := NewFingerprint(OpAuthorize, nil, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return IdempotencyRequest{TenantID: tenant.ID, Operation: OpAuthorize, Key: key, Fingerprint: fp}
	}
	complete := func(s *Service, key, body string) StoredResponse {
		b, err := s.BeginIdempotent(ctx, req(key, body))
		if err != nil || b.Claim == nil {
			t.Fatalf("claim %s: %+v %v", key, b, err)
		}
		res := StoredResponse{Status: 201, Header: map[string]string{"Content-Type": "application/json"},
			Body: []byte(`{"key":"` + key + `"}` + "\n")}
		if err := s.CompleteIdempotent(ctx, b.Claim, "", res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	forget := func(key string) { // the database no longer knows the key
		if _, err := pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, tenant.ID, key); err != nil {
			t.Fatal(err)
		}
	}
	wantReplay := func(s *Service, key, body string, want StoredResponse) {
		t.Helper()
		b, err := s.BeginIdempotent(ctx, req(key, body))
		if err != nil || b.Replay == nil {
			t.Fatalf("%s: want a replay, got %+v %v", key, b, err)
		}
		if b.Replay.Status != want.Status || string(b.Replay.Body) != string(want.Body) || b.ExpiresAt.IsZero() {
			t.Fatalf("%s: replayed %d %q (expires %v), want %d %q", key, b.Replay.Status, b.Replay.Body, b.ExpiresAt, want.Status, want.Body)
		}
	}

	// A key this instance completed is replayed from memory: the database
	// row is gone, and an instance without the cache claims it anew.
	res := complete(cached, "done", `{"amount_minor":100}`)
	forget("done")
	wantReplay(cached, "done", `{"amount_minor":100}`, res)
	uncached := NewService(Config{Pool: pool, Clock: clock})
	if b, err := uncached.BeginIdempotent(ctx, req("done", `{"amount_minor":100}`)); err != nil || b.Claim == nil {
		t.Fatalf("without the cache the forgotten key should be claimed: %+v %v", b, err)
	}
	forget("done")

	// Another body under the cached key is refused, naming the field.
	_, err = cached.BeginIdempotent(ctx, req("done", `{"amount_minor":200}`))
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeIdempotencyKeyReused || fmt.Sprint(e.Fields) != "[amount_minor]" {
		t.Fatalf("other body: %v", err)
	}

	// A completed key read from the database is kept too.
	other := NewService(Config{Pool: pool, Clock: clock})
	res2 := complete(other, "elsewhere", `{"amount_minor":300}`)
	wantReplay(cached, "elsewhere", `{"amount_minor":300}`, res2) // read from the database
	forget("elsewhere")
	wantReplay(cached, "elsewhere", `{"amount_minor":300}`, res2) // from memory

	// Keys in progress are never cached: the lease is still enforced.
	b, err := cached.BeginIdempotent(ctx, req("running", `{}`))
	if err != nil || b.Claim == nil {
		t.Fatal(err)
	}
	if _, err := cached.BeginIdempotent(ctx, req("running", `{}`)); !errors.As(err, &e) || e.Code != CodeIdempotencyKeyInUse {
		t.Fatalf("a running key: %v", err)
	}

	// At its expiry an entry is no longer used: the key starts over.
	now = now.Add(DefaultKeyTTL)
	if b, err := cached.BeginIdempotent(ctx, req("done", `{"amount_minor":100}`)); err != nil || b.Claim == nil {
		t.Fatalf("after expiry the key should be claimed anew: %+v %v", b, err)
	}
}

func TestReplayCacheBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if c := newReplayCache(0); c != nil {
		t.Fatal("a zero-sized cache should be off")
	}
	var off *replayCache
	off.put(replayKey{1, "", "op", "k"}, &replayEntry{response: &StoredResponse{}, expiresAt: now.Add(time.Hour)})
	if _, ok := off.get(replayKey{1, "", "op", "k"}, now); ok || off.len() != 0 {
		t.Fatal("an off cache holds nothing")
	}

	c := newReplayCache(3)
	entry := func(body int, ttl time.Duration) *replayEntry {
		return &replayEntry{response: &StoredResponse{Status: 201, Body: make([]byte, body)}, expiresAt: now.Add(ttl)}
	}
	for i := range 10 {
		c.put(replayKey{1, "", "op", fmt.Sprint(i)}, entry(10, time.Hour))
	}
	if c.len() != 3 {
		t.Fatalf("%d entries held, want the bound 3", c.len())
	}
	c.put(replayKey{2, "", "op", "big"}, entry(maxReplayBody+1, time.Hour))
	if _, ok := c.get(replayKey{2, "", "op", "big"}, now); ok {
		t.Fatal("a body over maxReplayBody was cached")
	}
	c.put(replayKey{2, "", "op", "short"}, entry(10, time.Minute))
	if _, ok := c.get(replayKey{2, "", "op", "short"}, now.Add(time.Minute-time.Microsecond)); !ok {
		t.Fatal("an entry before its expiry was not found")
	}
	if _, ok := c.get(replayKey{2, "", "op", "short"}, now.Add(time.Minute)); ok {
		t.Fatal("an entry at its expiry was used")
	}
	if _, ok := c.get(replayKey{2, "", "op", "short"}, now); ok {
		t.Fatal("an expired entry was kept")
	}
}
