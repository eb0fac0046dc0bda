package orchestrator

// White-box tests of the API key cache: they reach into Service.keys to
// wait for the listener and to see what is cached. The package's TestMain
// (apikey_test.go) provides the database.

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
)

// eventually waits up to 5s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, what, testkit.Until(cond))
}

// cachedService returns a Service on pool whose key cache is on (its
// listener listening); setup, if set, runs before the listener starts.
func cachedService(t *testing.T, pool *pgxpool.Pool, setup func(*Service)) *Service {
	t.Helper()
	s := NewService(Config{Pool: pool})
	if setup != nil {
		setup(s)
	}
	stop := s.StartKeyCache(context.Background())
	t.Cleanup(stop)
	eventually(t, "the key cache is on", s.keys.isEnabled)
	return s
}

// wrongSecret returns a well-formed key with key's id and another secret.
func wrongSecret(key string) string {
	last := key[len(key)-1]
	swap := byte('A')
	if last == 'A' {
		swap = 'B'
	}
	return key[:len(key)-1] + string(swap)
}

func hashOf(key string) []byte { sum := sha256.Sum256([]byte(key)); return sum[:] }

// noNotify turns the notification trigger off, so a change made in SQL can
// reach the cache only by its own means (eviction, clearing, expiry).
func noNotify(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `ALTER TABLE api_keys DISABLE TRIGGER api_keys_notify, DISABLE TRIGGER api_keys_notify_insert`); err != nil {
		t.Fatal(err)
	}
}

func mustAuth(t *testing.T, s *Service, key string) Principal {
	t.Helper()
	p, err := s.Authenticate(context.Background(), key)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	return p
}

func mustReject(t *testing.T, s *Service, key, why string) {
	t.Helper()
	if _, err := s.Authenticate(context.Background(), key); ErrorCode(err) != CodeUnauthorized {
		t.Fatalf("%s: authenticate returned %v, want unauthorized", why, err)
	}
}

func TestKeyCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SecondAuthenticationIsServedFromMemory", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := cachedService(t, pool, nil)
		tenant, k, key, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		first := mustAuth(t, s, key)
		if s.keys.len() != 1 {
			t.Fatalf("%d keys cached after one authentication, want 1", s.keys.len())
		}
		// Behind the cache's back (no notification): the key's row now
		// says revoked, with another secret.
		noNotify(t, pool)
		if _, err := pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now(), secret_hash = $2 WHERE id = $1`,
			k.ID, hashOf(wrongSecret(key))); err != nil {
			t.Fatal(err)
		}
		mustReject(t, NewService(Config{Pool: pool}), key, "uncached service, key revoked in the database")
		// So only the cache can still accept it.
		if p := mustAuth(t, s, key); p != first || p.TenantID != tenant.ID || p.Role != RoleMerchant {
			t.Fatalf("cached principal %+v, first %+v", p, first)
		}
	})

	t.Run("WrongSecretForACachedKeyIsRejected", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := cachedService(t, pool, nil)
		k, key, err := s.CreateAPIKey(ctx, RoleSupport, 0, "desk")
		if err != nil {
			t.Fatal(err)
		}
		mustAuth(t, s, key)
		bad := wrongSecret(key)
		mustReject(t, s, bad, "wrong secret, cached key")
		// Even when the database would take the wrong secret, the cached
		// hash is what the presented key is compared with.
		noNotify(t, pool)
		if _, err := pool.Exec(ctx, `UPDATE api_keys SET secret_hash = $2 WHERE id = $1`, k.ID, hashOf(bad)); err != nil {
			t.Fatal(err)
		}
		mustReject(t, s, bad, "wrong secret, cached key, database changed behind the cache")
		mustAuth(t, s, key)
		// An unknown id is still refused.
		other := "pok_0123456789abcdef_" + strings.Repeat("A", 43)
		mustReject(t, s, other, "unknown id")
	})

	t.Run("RevocationElsewhereReachesTheCache", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		s1 := cachedService(t, pgtest.Pool(t, url), nil)
		s2 := cachedService(t, pgtest.Pool(t, url), nil)
		k, key, err := s1.CreateAPIKey(ctx, RoleFinance, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		mustAuth(t, s1, key)
		mustAuth(t, s2, key)
		if s1.keys.len() != 1 || s2.keys.len() != 1 {
			t.Fatalf("cached: %d and %d, want the key in both", s1.keys.len(), s2.keys.len())
		}
		if _, err := s2.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		mustReject(t, s2, key, "revoked on this instance")
		eventually(t, "the other instance rejects the revoked key", func() bool {
			_, err := s1.Authenticate(ctx, key)
			return ErrorCode(err) == CodeUnauthorized
		})
		if s1.keys.len() != 0 {
			t.Fatalf("%d keys still cached", s1.keys.len())
		}
	})

	t.Run("RevocationOnTheSameInstanceIsImmediate", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := cachedService(t, pool, nil)
		k, key, err := s.CreateAPIKey(ctx, RoleAdmin, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		mustAuth(t, s, key)
		// No notification will come: RevokeAPIKey alone must evict.
		noNotify(t, pool)
		if _, err := s.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		mustReject(t, s, key, "revoked on this instance")
	})

	t.Run("DeleteAndSecretChangeNotify", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := cachedService(t, pool, nil)
		k1, key1, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		k2, key2, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		mustAuth(t, s, key1)
		mustAuth(t, s, key2)
		if _, err := pool.Exec(ctx, `DELETE FROM api_keys WHERE id = $1`, k1.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE api_keys SET secret_hash = $2 WHERE id = $1`, k2.ID, hashOf(wrongSecret(key2))); err != nil {
			t.Fatal(err)
		}
		eventually(t, "deleted and re-keyed keys are rejected", func() bool {
			_, err1 := s.Authenticate(ctx, key1)
			_, err2 := s.Authenticate(ctx, key2)
			return err1 != nil && err2 != nil
		})
		mustAuth(t, s, wrongSecret(key2))
	})

	t.Run("ListenerFailureBypassesTheCacheUntilItListensAgain", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		var blocked atomic.Bool
		var dials atomic.Int32
		s := cachedService(t, pool, func(s *Service) {
			s.keyListenerDial = func(ctx context.Context) (*pgx.Conn, error) {
				dials.Add(1)
				if blocked.Load() {
					return nil, errors.New("test: database unreachable")
				}
				return s.keyListenerConn(ctx)
			}
		})
		k1, key1, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		_, key2, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		mustAuth(t, s, key1)
		noNotify(t, pool) // only the listener's failure may clear the cache

		blocked.Store(true)
		var n int
		if err := pool.QueryRow(ctx, `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN payorch\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("terminated %d listener backends, want 1", n)
		}
		eventually(t, "the cache is off", func() bool { return !s.keys.isEnabled() })
		eventually(t, "the listener retries", func() bool { return dials.Load() >= 3 })

		// Down: a revocation that notifies nobody is honoured anyway, and
		// nothing is cached.
		if _, err := pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, k1.ID); err != nil {
			t.Fatal(err)
		}
		mustReject(t, s, key1, "revoked while the listener is down")
		mustAuth(t, s, key2)
		mustAuth(t, s, key2)
		if s.keys.len() != 0 {
			t.Fatalf("%d keys cached while the listener is down", s.keys.len())
		}

		blocked.Store(false)
		eventually(t, "the cache is on again", s.keys.isEnabled)
		mustReject(t, s, key1, "revoked while the listener was down, after it reconnected")
		mustAuth(t, s, key2)
		if s.keys.len() != 1 {
			t.Fatalf("%d keys cached after reconnecting, want key2", s.keys.len())
		}
	})

	t.Run("StopTurnsTheCacheOff", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := NewService(Config{Pool: pool})
		stop := s.StartKeyCache(ctx)
		eventually(t, "the key cache is on", s.keys.isEnabled)
		s.StartKeyCache(ctx)() // a second start is a no-op, and so is its stop
		if !s.keys.isEnabled() {
			t.Fatal("the no-op stop turned the cache off")
		}
		_, key, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		mustAuth(t, s, key)
		stop()
		stop()
		if s.keys.isEnabled() || s.keys.len() != 0 {
			t.Fatalf("after stop: enabled %v, %d keys", s.keys.isEnabled(), s.keys.len())
		}
		// The server drops a closed connection's row from pg_stat_activity
		// a moment after the close: wait for it rather than read once.
		eventually(t, "no listener connection left after stop", func() bool {
			var listeners int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN payorch\_%'`).Scan(&listeners)
			return err == nil && listeners == 0
		})
		mustAuth(t, s, key)
		if s.keys.len() != 0 {
			t.Fatal("a stopped cache took a key")
		}
	})

	t.Run("LastUsedIsStillWrittenOnceAMinute", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		clk := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
		t0 := clk.Now()
		s := cachedService(t, pool, func(s *Service) { s.now = clk.Now })
		k, key, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		lastUsed := func() time.Time {
			t.Helper()
			var at *time.Time
			if err := pool.QueryRow(ctx, `SELECT last_used_at FROM api_keys WHERE id = $1`, k.ID).Scan(&at); err != nil {
				t.Fatal(err)
			}
			if at == nil {
				return time.Time{}
			}
			return at.UTC()
		}
		mustAuth(t, s, key)
		if got := lastUsed(); !got.Equal(t0) {
			t.Fatalf("last_used_at %v after first use, want %v", got, t0)
		}
		clk.Add(30 * time.Second)
		mustAuth(t, s, key)
		if got := lastUsed(); !got.Equal(t0) {
			t.Fatalf("last_used_at %v after a use 30s later, want %v still", got, t0)
		}
		clk.Add(31 * time.Second)
		mustAuth(t, s, key)
		if got, want := lastUsed(), t0.Add(61*time.Second); !got.Equal(want) {
			t.Fatalf("last_used_at %v after a use 61s later, want %v", got, want)
		}
		if s.keys.len() != 1 {
			t.Fatal("the key left the cache: last_used_at writes must not notify")
		}
	})

	t.Run("TriggerNotifiesOnlyForAuthenticationChanges", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		pool := pgtest.Pool(t, url)
		s := NewService(Config{Pool: pool})
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "LISTEN payorch_api_keys"); err != nil {
			t.Fatal(err)
		}
		next := func() string { // the next payload, or "none"
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			n, err := conn.WaitForNotification(wctx)
			if n != nil {
				return "id:" + n.Payload
			}
			if wctx.Err() == nil {
				t.Fatal(err)
			}
			return "none"
		}
		tenant, k, key, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		other, ok, _, err := s.CreateTenant(ctx, "Beta")
		if err != nil {
			t.Fatal(err)
		}
		// Creating a key notifies its id (migration 00020), so that an
		// instance that remembers the id as unknown forgets it.
		for _, id := range []string{k.ID, ok.ID} {
			if got := next(); got != "id:new:"+id {
				t.Fatalf("insert notified %s, want id:%s", got, id)
			}
		}
		if got := next(); got != "none" {
			t.Fatalf("after the inserts: %s", got)
		}
		mustAuth(t, s, key) // writes last_used_at
		for _, q := range []string{
			`UPDATE api_keys SET last_used_at = now() + interval '1 hour' WHERE id = $1`,
			`UPDATE api_keys SET description = 'renamed' WHERE id = $1`,
			`UPDATE api_keys SET role = role, revoked_at = revoked_at WHERE id = $1`,
		} {
			if _, err := pool.Exec(ctx, q, k.ID); err != nil {
				t.Fatal(err)
			}
			if got := next(); got != "none" {
				t.Fatalf("%s notified %s", q, got)
			}
		}
		for _, q := range []string{
			`UPDATE api_keys SET tenant_id = ` + strconv.FormatInt(other.ID, 10) + ` WHERE id = $1`,
			`UPDATE api_keys SET tenant_id = ` + strconv.FormatInt(tenant.ID, 10) + ` WHERE id = $1`,
			`UPDATE api_keys SET secret_hash = sha256(secret_hash) WHERE id = $1`,
			`UPDATE api_keys SET role = 'support', tenant_id = NULL WHERE id = $1`,
			`UPDATE api_keys SET revoked_at = now() WHERE id = $1`,
			`DELETE FROM api_keys WHERE id = $1`,
		} {
			if _, err := pool.Exec(ctx, q, k.ID); err != nil {
				t.Fatal(err)
			}
			if got := next(); got != "id:"+k.ID {
				t.Fatalf("%s notified %s, want id:%s", q, got, k.ID)
			}
		}
		// A changed id notifies both.
		admin, _, err := s.CreateAPIKey(ctx, RoleAdmin, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := next(); got != "id:new:"+admin.ID {
			t.Fatalf("insert notified %s, want id:new:%s", got, admin.ID)
		}
		if _, err := pool.Exec(ctx, `UPDATE api_keys SET id = 'key_0123456789abcdef' WHERE id = $1`, admin.ID); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{admin.ID, "new:key_0123456789abcdef"} {
			if got := next(); got != "id:"+id {
				t.Fatalf("id change notified %s, want id:%s", got, id)
			}
		}
		// A rolled-back change notifies nobody.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = now()`); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		if got := next(); got != "none" {
			t.Fatalf("a rolled-back revocation notified %s", got)
		}
	})
}

// TestKeyCacheGeneration is the insert guard: what was read before an
// invalidation (a notification, a revocation here, a listener failure or
// reconnection) is never cached after it.
func TestKeyCacheGeneration(t *testing.T) {
	t.Parallel()
	entry := cachedKey{role: RoleSupport, hash: [32]byte{1}}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	on := func() *keyCache {
		c := newKeyCache(10, time.Minute)
		c.setEnabled(true)
		return c
	}

	t.Run("Unchanged", func(t *testing.T) {
		c := on()
		gen := c.generation()
		if !c.put(gen, "key_a", entry) {
			t.Fatal("put refused with the generation unchanged")
		}
		if e, _, ok := c.lookup("key_a", now); !ok || e.hash != entry.hash || e.role != RoleSupport {
			t.Fatalf("lookup %+v %v", e, ok)
		}
	})

	// The race: read, then a revocation commits and its notification is
	// processed, then the reader offers what it read.
	t.Run("NotificationBetweenReadAndPut", func(t *testing.T) {
		c := on()
		gen := c.generation()
		c.invalidate("key_a")
		if c.put(gen, "key_a", entry) {
			t.Fatal("stale entry cached after its invalidation")
		}
		if _, _, ok := c.lookup("key_a", now); ok {
			t.Fatal("stale entry served")
		}
		// A read that starts after the invalidation may be cached.
		if !c.put(c.generation(), "key_a", entry) {
			t.Fatal("fresh read refused")
		}
	})

	t.Run("NotificationForAnotherKeyOrAll", func(t *testing.T) {
		c := on()
		gen := c.generation()
		c.invalidate("key_b")
		if c.put(gen, "key_a", entry) {
			t.Fatal("put accepted across an invalidation")
		}
		c.put(c.generation(), "key_a", entry)
		c.invalidate("")
		if c.len() != 0 {
			t.Fatal("invalidate(\"\") left entries")
		}
	})

	t.Run("ListenerFailureAndReconnect", func(t *testing.T) {
		c := on()
		gen := c.generation()
		c.put(gen, "key_a", entry)
		c.setEnabled(false) // listener failed
		if c.len() != 0 {
			t.Fatal("entries kept with the listener down")
		}
		if _, _, ok := c.lookup("key_a", now); ok {
			t.Fatal("served with the listener down")
		}
		down := c.generation()
		if c.put(down, "key_a", entry) {
			t.Fatal("cached with the listener down")
		}
		c.setEnabled(true) // listening again
		if c.put(down, "key_a", entry) {
			t.Fatal("a read from while the listener was down was cached after it reconnected")
		}
		if !c.put(c.generation(), "key_a", entry) {
			t.Fatal("fresh read refused after reconnecting")
		}
	})

	t.Run("OffUntilEnabled", func(t *testing.T) {
		c := newKeyCache(10, time.Minute)
		if c.put(c.generation(), "key_a", entry) {
			t.Fatal("a cache never enabled took an entry")
		}
	})

	t.Run("MaxAge", func(t *testing.T) {
		c := on()
		clk := testkit.NewClock(now)
		c.now = clk.Now
		c.put(c.generation(), "key_a", entry)
		clk.Add(59 * time.Second)
		if _, _, ok := c.lookup("key_a", now); !ok {
			t.Fatal("entry gone before its maximum age")
		}
		clk.Add(time.Second)
		if _, _, ok := c.lookup("key_a", now); ok {
			t.Fatal("entry served past its maximum age")
		}
	})

	t.Run("Bounded", func(t *testing.T) {
		c := on()
		for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
			c.put(c.generation(), "key_"+id, entry)
			if _, _, ok := c.lookup("key_"+id, now); !ok {
				t.Fatalf("key_%s not cached right after put", id)
			}
		}
		if c.len() != 10 {
			t.Fatalf("%d entries, bound 10", c.len())
		}
	})

	t.Run("LastUsedTouchedOnceAMinute", func(t *testing.T) {
		c := on()
		c.put(c.generation(), "key_a", cachedKey{lastUsed: now})
		if _, touch, _ := c.lookup("key_a", now.Add(59*time.Second)); touch {
			t.Fatal("touched within the minute")
		}
		if _, touch, _ := c.lookup("key_a", now.Add(time.Minute)); !touch {
			t.Fatal("not touched after a minute")
		}
		if _, touch, _ := c.lookup("key_a", now.Add(time.Minute+time.Second)); touch {
			t.Fatal("touched twice in a minute")
		}
	})
}
