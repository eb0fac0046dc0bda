package httpapi_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

// madeUpKey is a key shaped like an API key whose id names no key, a new
// one each call.
func madeUpKey() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "pok_" + hex.EncodeToString(b) + "_" + strings.Repeat("A", 43)
}

// TestFailedAuthenticationLimit: a client address making up keys gets a
// bounded number of database reads, then 429s that read nothing; other
// addresses and valid keys are not affected.
func TestFailedAuthenticationLimit(t *testing.T) {
	t.Parallel()
	clock, advance := stoppedClock()
	pool, queries := pgtest.CountedPool(t, pgtest.URL(t))
	// The test's requests come from loopback, a trusted proxy: the client
	// is the address X-Forwarded-For names.
	e := newMigratedEnv(t, httpapi.Config{Clock: clock, AuthFailureLimit: 5, AuthFailureWindow: time.Minute,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, orchestrator.Config{Pool: pool})
	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	attacker, other := from("203.0.113.7"), from("198.51.100.9")
	key := e.keys[orchestrator.RoleSupport]

	before := queries.Count()
	for i := range 200 {
		res, body := e.do(t, "GET", "/v1/me", madeUpKey(), nil, attacker)
		if i < 5 {
			wantProblem(t, res, body, 401, "unauthorized")
			continue
		}
		wantProblem(t, res, body, 429, "rate_limited")
		if ra := res.Header.Get("Retry-After"); ra != "12" { // 5 a minute: one every 12s
			t.Fatalf("request %d: Retry-After %q, want 12", i+1, ra)
		}
	}
	// One read per failure counted, and nothing after.
	if n := queries.Count() - before; n > 5 {
		t.Fatalf("200 made-up keys from one address: %d statements, want at most 5", n)
	}

	// Another address is not affected, nor is a valid key.
	if res, body := e.do(t, "GET", "/v1/me", key, nil, other); res.StatusCode != 200 {
		t.Fatalf("valid key from another address: %d %s", res.StatusCode, body)
	}
	res, body := e.do(t, "GET", "/v1/me", madeUpKey(), nil, other)
	wantProblem(t, res, body, 401, "unauthorized")
	// The blocked address is refused whatever the key, as the console's
	// sign-in is.
	res, body = e.do(t, "GET", "/v1/me", key, nil, attacker)
	wantProblem(t, res, body, 429, "rate_limited")

	// A token is back after 12s: one more try, then blocked again.
	advance(12 * time.Second)
	if res, body := e.do(t, "GET", "/v1/me", key, nil, attacker); res.StatusCode != 200 {
		t.Fatalf("valid key after the wait: %d %s", res.StatusCode, body)
	}
	res, body = e.do(t, "GET", "/v1/me", madeUpKey(), nil, attacker)
	wantProblem(t, res, body, 401, "unauthorized")
	res, body = e.do(t, "GET", "/v1/me", key, nil, attacker)
	wantProblem(t, res, body, 429, "rate_limited")

	// Successes do not count, nor do keys not shaped like API keys (they
	// are refused without a read).
	third := from("192.0.2.1")
	for range 20 {
		if res, body := e.do(t, "GET", "/v1/me", key, nil, third); res.StatusCode != 200 {
			t.Fatalf("valid key: %d %s", res.StatusCode, body)
		}
		res, body := e.do(t, "GET", "/v1/me", "not-a-key", nil, third)
		wantProblem(t, res, body, 401, "unauthorized")
	}
	for range 4 {
		res, body := e.do(t, "GET", "/v1/me", madeUpKey(), nil, third)
		wantProblem(t, res, body, 401, "unauthorized")
	}
	if res, body := e.do(t, "GET", "/v1/me", key, nil, third); res.StatusCode != 200 {
		t.Fatalf("valid key after 4 failures: %d %s", res.StatusCode, body)
	}
}

// TestFailedAuthenticationLimitUnderConcurrency: made-up keys sent at
// once from one address cost at most the limit plus the requests in
// flight when it is reached.
func TestFailedAuthenticationLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	clock, _ := stoppedClock()
	pool, queries := pgtest.CountedPool(t, pgtest.URL(t))
	e := newMigratedEnv(t, httpapi.Config{Clock: clock, AuthFailureLimit: 10}, orchestrator.Config{Pool: pool})
	const workers, each = 8, 50
	before := queries.Count()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				req, _ := http.NewRequest("GET", e.url+"/v1/me", nil)
				req.Header.Set("Authorization", "Bearer "+madeUpKey())
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				if res.StatusCode != 401 && res.StatusCode != 429 {
					t.Errorf("status %d", res.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if n := queries.Count() - before; n > 10+workers {
		t.Fatalf("%d made-up keys from one address: %d statements, want at most %d", workers*each, n, 10+workers)
	}
}
