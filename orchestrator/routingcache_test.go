package orchestrator

// White-box tests of the routing cache: they reach into Service.routes to
// see what is cached. The package's TestMain (apikey_test.go) provides the
// database; eventually and the listener helpers are keycache_test.go's.

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// routingConfig configures connectors fake_a and fake_b (one fake provider
// under two names; routing never calls it) on pool.
func routingConfig(t *testing.T, pool *pgxpool.Pool) Config {
	t.Helper()
	fr, err := fake.Start("127.0.0.1:0", fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	fc := fr.Client(&http.Client{})
	return Config{Pool: pool, DefaultProvider: "fake_a", Providers: map[string]providers.Provider{"fake_a": fc, "fake_b": fc}}
}

// routingCached returns a Service on cfg whose caches are on (listener
// listening); setup, if set, runs before the listener starts.
func routingCached(t *testing.T, cfg Config, setup func(*Service)) *Service {
	t.Helper()
	s := NewService(cfg)
	if setup != nil {
		setup(s)
	}
	stop := s.StartKeyCache(context.Background())
	t.Cleanup(stop)
	eventually(t, "the routing cache is on", s.routes.isEnabled)
	return s
}

// noRoutingNotify turns the routing notification trigger off, so a new
// version can reach a cache only by its own means.
func noRoutingNotify(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `ALTER TABLE routing_versions DISABLE TRIGGER routing_versions_notify`); err != nil {
		t.Fatal(err)
	}
}

// routingRules sends every payment to connector.
func routingRules(connector string) RoutingRules {
	return RoutingRules{Default: ConnectorChoice{Strategy: StrategyPriority, Connectors: []WeightedConnector{{Name: connector}}}}
}

func wantRoutingVersion(t *testing.T, s *Service, tenantID int64, want int) RoutingVersion {
	t.Helper()
	v, err := s.routingFor(context.Background(), tenantID)
	if err != nil || v.Version != want {
		t.Fatalf("routingFor: version %d (%v), want %d", v.Version, err, want)
	}
	return v
}

func TestRoutingCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ANewVersionElsewhereReachesTheCache", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		cfg := routingConfig(t, pgtest.Pool(t, url))
		// Two instances on one database; each has its own pool.
		cfgB := cfg
		cfgB.Pool = pgtest.Pool(t, url)
		a := NewService(cfg)
		b := routingCached(t, cfgB, nil)
		tenant, _, _, err := a.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, b, tenant.ID, 0)
		if b.routes.len() != 1 {
			t.Fatalf("%d tenants cached after one read, want 1", b.routes.len())
		}
		if _, err := a.SetRouting(ctx, tenant.ID, routingRules("fake_b"), "key_a"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "instance b routes by version 1", func() bool {
			v, err := b.routingFor(ctx, tenant.ID)
			return err == nil && v.Version == 1 && v.Rules.Default.Connectors[0].Name == "fake_b"
		})
		if b.routes.len() != 1 {
			t.Fatal("version 1 was not cached after it was read")
		}
	})

	t.Run("ServedFromMemoryUntilNotified", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		cfg := routingConfig(t, pool)
		a := NewService(cfg)
		b := routingCached(t, cfg, nil)
		tenant, _, _, err := a.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, b, tenant.ID, 0)
		noRoutingNotify(t, pool)
		if _, err := a.SetRouting(ctx, tenant.ID, routingRules("fake_b"), "key_a"); err != nil {
			t.Fatal(err)
		}
		// Nobody told b: it still routes by what it read, without the
		// database.
		if v, err := NewService(cfg).routingFor(ctx, tenant.ID); err != nil || v.Version != 1 {
			t.Fatalf("an uncached service reads version %d (%v)", v.Version, err)
		}
		wantRoutingVersion(t, b, tenant.ID, 0)
		// The notification, as the trigger sends it, evicts the tenant.
		if _, err := pool.Exec(ctx, `SELECT pg_notify('payorch_routing', $1::bigint::text)`, tenant.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the notification evicts the tenant", func() bool {
			v, err := b.routingFor(ctx, tenant.ID)
			return err == nil && v.Version == 1
		})
	})

	t.Run("AChangeOnTheSameInstanceIsImmediate", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := routingCached(t, routingConfig(t, pool), nil)
		tenant, _, _, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, s, tenant.ID, 0)
		noRoutingNotify(t, pool)
		if _, err := s.SetRouting(ctx, tenant.ID, routingRules("fake_b"), "key_a"); err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, s, tenant.ID, 1)
	})

	t.Run("ListenerFailureBypassesTheCacheUntilItListensAgain", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		var blocked atomic.Bool
		var dials atomic.Int32
		s := routingCached(t, routingConfig(t, pool), func(s *Service) {
			s.keyListenerDial = func(ctx context.Context) (*pgx.Conn, error) {
				dials.Add(1)
				if blocked.Load() {
					return nil, errors.New("test: database unreachable")
				}
				return s.keyListenerConn(ctx)
			}
		})
		tenant, _, _, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		other, _, _, err := s.CreateTenant(ctx, "Globex")
		if err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, s, tenant.ID, 0)
		wantRoutingVersion(t, s, other.ID, 0)
		noRoutingNotify(t, pool) // only the listener's failure may clear the cache

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
		eventually(t, "the routing cache is off", func() bool { return !s.routes.isEnabled() })
		eventually(t, "the listener retries", func() bool { return dials.Load() >= 3 })

		// Down: a new version nobody is told of is read anyway, and
		// nothing is cached.
		if _, err := s.pool.Exec(ctx, `INSERT INTO routing_versions (tenant_id, version, rules, created_by, created_at)
			VALUES ($1, 1, $2, 'sql', now())`, tenant.ID, routingRules("fake_b")); err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, s, tenant.ID, 1)
		wantRoutingVersion(t, s, other.ID, 0)
		if s.routes.len() != 0 {
			t.Fatalf("%d tenants cached while the listener is down", s.routes.len())
		}

		// Up again: the whole cache starts empty, and fills.
		if _, err := s.pool.Exec(ctx, `INSERT INTO routing_versions (tenant_id, version, rules, created_by, created_at)
			VALUES ($1, 1, $2, 'sql', now())`, other.ID, routingRules("fake_b")); err != nil {
			t.Fatal(err)
		}
		blocked.Store(false)
		eventually(t, "the routing cache is on again", s.routes.isEnabled)
		if s.routes.len() != 0 {
			t.Fatal("the cache kept entries across the reconnection")
		}
		wantRoutingVersion(t, s, other.ID, 1)
		if s.routes.len() != 1 {
			t.Fatalf("%d tenants cached after reconnecting, want 1", s.routes.len())
		}
	})

	t.Run("OffWithoutTheListener", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		s := NewService(routingConfig(t, pool))
		tenant, _, _, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, s, tenant.ID, 0)
		noRoutingNotify(t, pool)
		if _, err := s.pool.Exec(ctx, `INSERT INTO routing_versions (tenant_id, version, rules, created_by, created_at)
			VALUES ($1, 1, $2, 'sql', now())`, tenant.ID, routingRules("fake_b")); err != nil {
			t.Fatal(err)
		}
		wantRoutingVersion(t, s, tenant.ID, 1)
		if s.routes.len() != 0 {
			t.Fatal("the cache took an entry with no listener")
		}
		if _, err := s.routingFor(ctx, tenant.ID+1000); ErrorCode(err) != CodeNotFound {
			t.Fatalf("unknown tenant: %v", err)
		}
	})
}

// A read that began before an invalidation (a notification, a
// reconnection) is never cached after it.
func TestRoutingCacheGeneration(t *testing.T) {
	t.Parallel()
	c := newRoutingCache(2, routingCacheMaxAge)
	v := RoutingVersion{TenantID: 1, Version: 3}
	if c.put(c.generation(), 1, v) {
		t.Fatal("an off cache took an entry")
	}
	c.setEnabled(true)
	gen := c.generation()
	c.invalidatePayload("2") // another tenant's change, heard mid-read
	if c.put(gen, 1, v) {
		t.Fatal("a read from before a notification was cached")
	}
	if !c.put(c.generation(), 1, v) {
		t.Fatal("a fresh read was refused")
	}
	if got, ok := c.lookup(1); !ok || got.Version != 3 {
		t.Fatalf("lookup: %+v %v", got, ok)
	}
	c.invalidatePayload("1")
	if _, ok := c.lookup(1); ok {
		t.Fatal("the tenant's notification left its entry")
	}
	c.put(c.generation(), 1, v)
	c.put(c.generation(), 2, v)
	c.invalidatePayload("not a tenant id")
	if c.len() != 0 {
		t.Fatal("an odd payload did not drop every entry")
	}
	for id := range int64(5) {
		c.put(c.generation(), id, v)
	}
	if c.len() != 2 {
		t.Fatalf("%d entries, bounded to 2", c.len())
	}
}
