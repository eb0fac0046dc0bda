package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// refused runs one payorch command in-process that must fail at once and
// returns its error; one still running after a while is stopped and fails
// the test.
func refused(t *testing.T, env map[string]string, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, args, &testkit.SyncBuffer{}, envOf(env)) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatalf("%v succeeded", args)
		}
		return err
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("%v started and ran (stopped: %v)", args, <-errc)
		return nil
	}
}

// TestServeRefusesTheFakeInProduction: serve, like every command but dev,
// runs as production unless PAYORCH_ENVIRONMENT says otherwise, and the
// fake provider moves no money: as the default provider (the default) or
// at PAYORCH_FAKE_URL it stops serve at start-up, before anything else,
// with a message naming the variables to set.
func TestServeRefusesTheFakeInProduction(t *testing.T) {
	t.Parallel()
	stripe := map[string]string{"PAYORCH_DEFAULT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_123"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		want []string
	}{
		"FakeByDefault":        {nil, []string{"serve"}, []string{"PAYORCH_DEFAULT_PROVIDER", "PAYORCH_ENVIRONMENT"}},
		"FakeInSaidProduction": {with(nil, "PAYORCH_ENVIRONMENT", "production"), []string{"serve"}, []string{"PAYORCH_ENVIRONMENT"}},
		"StandaloneFake":       {with(stripe, "PAYORCH_FAKE_URL", "http://127.0.0.1:9", "PAYORCH_FAKE_TOKEN", "t"), []string{"serve"}, []string{"PAYORCH_FAKE_URL", "PAYORCH_ENVIRONMENT"}},
		"OneShotReconcile":     {with(nil, "PAYORCH_FAKE_URL", "http://127.0.0.1:9", "PAYORCH_FAKE_TOKEN", "t"), []string{"reconcile"}, []string{"PAYORCH_ENVIRONMENT"}},
		"DevSaidProduction": {with(nil, "PAYORCH_ENVIRONMENT", "production", "PAYORCH_DATA_DIR", t.TempDir(),
			"PAYORCH_DEV_PG_PORT", "1"), []string{"dev"}, []string{"PAYORCH_ENVIRONMENT"}},
		"UnknownEnvironment":     {with(nil, "PAYORCH_ENVIRONMENT", "staging"), []string{"version"}, []string{"PAYORCH_ENVIRONMENT"}},
		"StandaloneWithoutToken": {with(nil, "PAYORCH_ENVIRONMENT", "test", "PAYORCH_FAKE_URL", "http://127.0.0.1:9"), []string{"version"}, []string{"PAYORCH_FAKE_TOKEN"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := refused(t, tc.env, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}

	// The real binary, with a database it could serve: it exits at once
	// with the message, and never touches the database.
	t.Run("BinaryExitsWithTheMessage", func(t *testing.T) {
		t.Parallel()
		dbURL := pgtest.EmptyURL(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, payorchBinary(t), "serve", "--listen", "127.0.0.1:0")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + dbURL}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "PAYORCH_ENVIRONMENT is production") {
			t.Fatalf("serve with the fake in production: %v\n%s", err, out)
		}
		pool := pgtest.Pool(t, dbURL)
		var tables int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil || tables != 0 {
			t.Fatalf("the refused serve migrated the database: %d tables (%v)", tables, err)
		}
	})

	// In production the fake is not offered at all: not started, not a
	// provider a request may name.
	t.Run("ProductionOffersNoFake", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, pgtest.URL(t))
		srv := startServe(t, map[string]string{"DATABASE_URL": w.dbURL, "PAYORCH_ENVIRONMENT": "production",
			"PAYORCH_DEFAULT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_123", "STRIPE_API_BASE": "http://127.0.0.1:9",
			"PAYORCH_RESOLVER_INTERVAL": "0", "PAYORCH_RECONCILE_SCHEDULE": "off"})
		a := authorize(srv.base, w.key, "prod-fake", `{"amount_minor":100,"currency":"EUR","provider":"fake"}`)
		if a.status != 400 || !strings.Contains(string(a.body), `"param":"provider"`) {
			t.Fatalf("a payment naming the fake in production: %d %s", a.status, a.body)
		}
		if strings.Contains(srv.logs.String(), "embedded fake provider") {
			t.Fatalf("production started the embedded fake:\n%s", srv.logs.String())
		}
	})
}

// TestEmbeddedFakeAnswersOnlyItsClient: serve's embedded fake listens on
// loopback, where any local process (or a page in a browser) can reach
// it. Its token is generated at start and known only to serve's own
// client: payments work, and the admin API refuses everyone else.
func TestEmbeddedFakeAnswersOnlyItsClient(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	env := w.env(nil)
	delete(env, "PAYORCH_FAKE_URL")
	delete(env, "PAYORCH_FAKE_TOKEN")
	srv := startServe(t, env)
	if a := authorize(srv.base, w.key, "embedded-1", `{"amount_minor":900,"currency":"EUR"}`); a.status != 201 {
		t.Fatalf("authorize through the embedded fake: %d %s", a.status, a.body)
	}
	var fakeURL string
	for _, line := range strings.Split(srv.logs.String(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "embedded fake provider" {
			fakeURL = rec.URL
		}
	}
	if fakeURL == "" {
		t.Fatalf("no embedded fake in the logs:\n%s", srv.logs.String())
	}
	for _, path := range []string{"/_admin/operations", "/_admin/faults", "/healthz"} {
		res, err := http.Get(fakeURL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, res.StatusCode)
		}
	}
	res, err := http.Post(fakeURL+"/_admin/faults", "application/json",
		strings.NewReader(`{"operation":"authorize","fault":"error_before_execute"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("arming a fault without the token: %d, want 401", res.StatusCode)
	}
	// Had the fault been armed, this would be a 503 from the provider.
	if a := authorize(srv.base, w.key, "embedded-2", `{"amount_minor":900,"currency":"EUR"}`); a.status != 201 {
		t.Fatalf("authorize after the refused fault: %d %s", a.status, a.body)
	}
}

// TestFakeProviderCommandNeedsAToken: the standalone fake requires its
// token (PAYORCH_FAKE_TOKEN or --admin-token) to start, and then on every
// request.
func TestFakeProviderCommandNeedsAToken(t *testing.T) {
	t.Parallel()
	if err := refused(t, nil, "fakeprovider", "--listen", "127.0.0.1:0"); !strings.Contains(err.Error(), "PAYORCH_FAKE_TOKEN") {
		t.Fatalf("fakeprovider without a token: %v, want an error naming PAYORCH_FAKE_TOKEN", err)
	}
	// The compaction flags reach the fake's Config.
	if err := refused(t, nil, "fakeprovider", "--listen", "127.0.0.1:0", "--admin-token", "x", "--max-live-holds", "-1"); !strings.Contains(err.Error(), "MaxLiveHolds") {
		t.Fatalf("fakeprovider --max-live-holds -1: %v, want an error naming MaxLiveHolds", err)
	}
	for name, env := range map[string]map[string]string{
		"Environment": {"PAYORCH_FAKE_TOKEN": "standalone-secret"},
		"Flag":        {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
			args := []string{"fakeprovider", "--listen", addr}
			if name == "Flag" {
				args = append(args, "--admin-token", "standalone-secret")
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- run(ctx, args, &testkit.SyncBuffer{}, envOf(env)) }()
			defer func() {
				cancel()
				if err := <-errc; err != nil {
					t.Errorf("fakeprovider: %v", err)
				}
			}()
			c := fake.NewClient("http://"+addr, nil).WithToken("standalone-secret")
			testkit.WaitFor(t, 10*time.Second, "the standalone fake to answer its client", func() (bool, error) {
				_, err := c.Faults(ctx)
				return err == nil, err
			})
			_, err := fake.NewClient("http://"+addr, nil).Faults(ctx)
			if providers.KindOf(err) != providers.KindNotExecuted || !strings.Contains(err.Error(), "401") {
				t.Fatalf("a client without the token: %v, want a 401", err)
			}
		})
	}
}

// TestServeRunsTheListedConnectors: PAYORCH_CONNECTORS makes serve run each
// listed connector, the standalone fake at its URL and each embedded fake
// its own server; payments name connectors and record the one that holds
// them; a disabled connector takes no new payment; the breaker settings
// reach each connector's breaker (one failed call opens it).
func TestServeRunsTheListedConnectors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	srv := startServe(t, map[string]string{"DATABASE_URL": w.dbURL, "PAYORCH_RESOLVER_INTERVAL": "0", "PAYORCH_RECONCILE_SCHEDULE": "off",
		"PAYORCH_CONNECTORS":           "fake_a=fake,fake_b=fake,fake_c=fake",
		"PAYORCH_CONNECTOR_FAKE_A_URL": w.fake.URL(), "PAYORCH_CONNECTOR_FAKE_A_TOKEN": w.fake.Token(),
		"PAYORCH_CONNECTOR_FAKE_C_DISABLED": "true",
		"PAYORCH_BREAKER_MIN_CALLS":         "1", "PAYORCH_BREAKER_ERROR_PERCENT": "50", "PAYORCH_BREAKER_COOLDOWN": "1h"})
	provider := func(a answer) string {
		var p struct {
			Provider string `json:"provider"`
		}
		_ = json.Unmarshal(a.body, &p)
		return p.Provider
	}
	if a := authorize(srv.base, w.key, "conn-default", `{"amount_minor":500,"currency":"EUR"}`); a.status != 201 || provider(a) != "fake_a" {
		t.Fatalf("authorize on the default connector: %d %s, want 201 on fake_a", a.status, a.body)
	}
	if a := authorize(srv.base, w.key, "conn-b", `{"amount_minor":600,"currency":"EUR","provider":"fake_b"}`); a.status != 201 || provider(a) != "fake_b" {
		t.Fatalf("authorize naming fake_b: %d %s, want 201 on fake_b", a.status, a.body)
	}
	ops, err := w.fc.Operations(context.Background(), "")
	if err != nil || len(ops) != 1 || ops[0].AmountMinor != 500 {
		t.Fatalf("the standalone fake (fake_a) executed %+v (%v), want the one authorization of 500", ops, err)
	}
	for _, name := range []string{"fake_c", "fake"} {
		a := authorize(srv.base, w.key, "conn-"+name, `{"amount_minor":700,"currency":"EUR","provider":"`+name+`"}`)
		if a.status != 400 || !strings.Contains(string(a.body), `"param":"provider"`) {
			t.Errorf("authorize naming %s: %d %s, want 400 naming provider", name, a.status, a.body)
		}
	}
	urls := map[string]string{}
	for _, line := range strings.Split(srv.logs.String(), "\n") {
		var rec struct{ Msg, Connector, URL string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "embedded fake provider" {
			urls[rec.Connector] = rec.URL
		}
	}
	if len(urls) != 2 || urls["fake_b"] == "" || urls["fake_c"] == "" || urls["fake_b"] == urls["fake_c"] {
		t.Fatalf("embedded fakes %v, want fake_b and fake_c, each its own", urls)
	}

	// One call fake_a does not execute opens its breaker (MIN_CALLS 1).
	if err := w.fc.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute}); err != nil {
		t.Fatal(err)
	}
	if a := authorize(srv.base, w.key, "conn-fails", `{"amount_minor":800,"currency":"EUR"}`); a.status < 500 {
		t.Fatalf("authorize on the failing fake_a: %d %s, want a 5xx", a.status, a.body)
	}
	st, b := call(t, "GET", srv.base+"/metrics", "", "", "")
	if st != 200 {
		t.Fatalf("metrics %d", st)
	}
	samples := parseExposition(t, string(b))
	for name, want := range map[string]float64{"fake_a": 2, "fake_b": 0, "fake_c": 0} {
		if v, ok := value(samples, "payorch_connector_breaker_state", map[string]string{"connector": name}); !ok || v != want {
			t.Errorf("breaker of %s: %v (exported %v), want %v", name, v, ok, want)
		}
	}
}
