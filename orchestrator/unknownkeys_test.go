package orchestrator

// White-box tests of the memory of unknown (and revoked) key ids: they
// count the statements Authenticate sends on a real database, and choose
// new keys' ids (Service.keyMaterial) to create a key whose id was refused.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
)

// madeUpKey returns a well-formed key whose id names no key.
func madeUpKey() string {
	b := make([]byte, keyIDHexLen/2)
	_, _ = rand.Read(b)
	return keyPrefix + hex.EncodeToString(b) + "_" + strings.Repeat("A", 43)
}

// withKeyID makes s's next new key have key's id (and another secret).
func withKeyID(s *Service, key string) {
	id, _ := parseKey(key)
	s.keyMaterial = func() (string, string, []byte) {
		_, secret, _ := newKeyMaterial(RoleMerchant)
		secret = keyPrefix + strings.TrimPrefix(id, keyIDPrefix) + secret[len(keyPrefix)+keyIDHexLen:]
		return id, secret, hashOf(secret)
	}
}

// mustCost runs f and fails unless it sent at most max statements.
func mustCost(t *testing.T, q *pgtest.Queries, max int64, what string, f func()) {
	t.Helper()
	before := q.Count()
	f()
	if n := q.Count() - before; n > max {
		t.Fatalf("%s: %d statements, want at most %d", what, n, max)
	}
}

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ARepeatedUnknownOrRevokedKeyIsReadOnce", func(t *testing.T) {
		t.Parallel()
		pool, q := pgtest.CountedPool(t, pgtest.URL(t))
		s := NewService(Config{Pool: pool}) // no listener: the memory works without
		unknown := madeUpKey()
		mustCost(t, q, 1, "1,000 requests with one unknown key", func() {
			for range 1000 {
				mustReject(t, s, unknown, "unknown key")
			}
		})
		k, key, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		mustCost(t, q, 1, "1,000 requests with a revoked key", func() {
			for range 1000 {
				mustReject(t, s, key, "revoked key")
				mustReject(t, s, wrongSecret(key), "revoked key, wrong secret")
			}
		})
		// A valid key is read as before (no listener: every time).
		_, good, err := s.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			mustAuth(t, s, good)
		}
		if n := s.unknownKeys.len(); n != 2 {
			t.Fatalf("%d ids remembered, want the unknown and the revoked one", n)
		}
	})

	t.Run("AKeyCreatedHereIsAcceptedAtOnce", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		for _, listening := range []bool{false, true} {
			s := NewService(Config{Pool: pool})
			if listening {
				s = cachedService(t, pool, nil)
				noNotify(t, pool) // no notification will help: creating must
			}
			probe := madeUpKey()
			mustReject(t, s, probe, "the id before its key exists")
			withKeyID(s, probe)
			k, key, err := s.CreateAPIKey(ctx, RoleFinance, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			if id, _ := parseKey(probe); k.ID != id {
				t.Fatalf("created %s, want %s", k.ID, id)
			}
			if p := mustAuth(t, s, key); p.KeyID != k.ID || p.Role != RoleFinance {
				t.Fatalf("listening %v: principal %+v", listening, p)
			}
			// CreateTenant's first key too.
			probe = madeUpKey()
			mustReject(t, s, probe, "the id before its key exists")
			withKeyID(s, probe)
			tenant, _, key, err := s.CreateTenant(ctx, "Acme "+probe[4:12])
			if err != nil {
				t.Fatal(err)
			}
			if p := mustAuth(t, s, key); p.TenantID != tenant.ID {
				t.Fatalf("listening %v: tenant key principal %+v", listening, p)
			}
		}
	})

	t.Run("AKeyCreatedElsewhereIsAcceptedWhenNotified", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		s1 := cachedService(t, pgtest.Pool(t, url), nil)
		s2 := cachedService(t, pgtest.Pool(t, url), nil)
		probe := madeUpKey()
		mustReject(t, s1, probe, "the id before its key exists")
		if s1.unknownKeys.len() != 1 {
			t.Fatal("the unknown id is not remembered")
		}
		withKeyID(s2, probe)
		_, key, err := s2.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		// Within 5s, far less than the 30s an entry lives: the notification
		// made the first instance forget the id.
		eventually(t, "the other instance accepts the new key", func() bool {
			_, err := s1.Authenticate(ctx, key)
			return err == nil
		})
	})

	t.Run("WithoutNotificationsAnEntryLivesItsMaximumAge", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		s1 := NewService(Config{Pool: pgtest.Pool(t, url)}) // no listener
		s2 := NewService(Config{Pool: pgtest.Pool(t, url)})
		clk := testkit.NewClock(time.Now())
		s1.unknownKeys.now = clk.Now
		probe := madeUpKey()
		mustReject(t, s1, probe, "the id before its key exists")
		withKeyID(s2, probe)
		_, key, err := s2.CreateAPIKey(ctx, RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		mustReject(t, s1, key, "within the maximum age, unheard of")
		clk.Add(unknownKeyMaxAge)
		mustAuth(t, s1, key)
	})

	t.Run("TheListenerComingUpForgetsEverything", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := NewService(Config{Pool: pool})
		mustReject(t, s, madeUpKey(), "unknown key")
		if s.unknownKeys.len() != 1 {
			t.Fatal("the unknown id is not remembered")
		}
		// Keys may have been created while nobody listened.
		stop := s.StartKeyCache(ctx)
		t.Cleanup(stop)
		eventually(t, "the key cache is on", s.keys.isEnabled)
		if n := s.unknownKeys.len(); n != 0 {
			t.Fatalf("%d ids still remembered after the listener came up", n)
		}
	})
}

// TestUnknownKeysGeneration: a read that began before a key was created
// (here, or by a notification) is not remembered after.
func TestUnknownKeysGeneration(t *testing.T) {
	t.Parallel()
	c := newUnknownKeys(3, time.Minute)
	gen := c.generation()
	c.invalidate("key_a")
	if c.put(gen, "key_a", struct{}{}) {
		t.Fatal("an id read before its key was created was remembered after")
	}
	for _, id := range []string{"key_a", "key_b", "key_c", "key_d"} {
		if !c.put(c.generation(), id, struct{}{}) {
			t.Fatalf("%s refused: the memory is on from the start", id)
		}
	}
	if c.len() != 3 {
		t.Fatalf("%d ids remembered, bound 3", c.len())
	}
	c.invalidate("")
	if c.len() != 0 {
		t.Fatal("invalidate(\"\") left ids")
	}
}
