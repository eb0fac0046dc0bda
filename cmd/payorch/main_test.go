package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, func() {
		if binPath != "" {
			_ = os.RemoveAll(filepath.Dir(binPath)) // the binary payorchBinary built
		}
	})
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// cli runs one payorch command in-process and returns its stdout.
func cli(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, &out, envOf(env))
	return out.String(), err
}

func TestCLI(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "PAYORCH_LOG_LEVEL": "error"}

	var tenant struct {
		TenantID int64  `json:"tenant_id"`
		Name     string `json:"name"`
		APIKey   string `json:"api_key"`
	}
	out, err := cli(t, env, "tenants", "create", "--name", "Acme", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &tenant); err != nil || tenant.TenantID == 0 || tenant.Name != "Acme" || !strings.HasPrefix(tenant.APIKey, "pok_") {
		t.Fatalf("tenants create --json printed %s (%v)", out, err)
	}

	if _, err := cli(t, env, "tenants", "create", "--name", "Acme", "--json"); err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Fatalf("duplicate tenant: %v", err)
	}

	var key struct {
		APIKeyID string `json:"api_key_id"`
		APIKey   string `json:"api_key"`
		Role     string `json:"role"`
		TenantID *int64 `json:"tenant_id"`
	}
	out, err = cli(t, env, "apikeys", "create", "--role", "merchant", "--tenant", strconv.FormatInt(tenant.TenantID, 10), "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &key); err != nil || key.Role != "merchant" || key.TenantID == nil || *key.TenantID != tenant.TenantID {
		t.Fatalf("apikeys create merchant printed %s (%v)", out, err)
	}
	out, err = cli(t, env, "apikeys", "create", "--role", "support", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"tenant_id": null`) || !strings.Contains(out, `"role": "support"`) {
		t.Fatalf("apikeys create support printed %s", out)
	}
	if _, err := cli(t, env, "apikeys", "create", "--role", "owner"); err == nil {
		t.Fatal("unknown role accepted")
	}

	out, err = cli(t, env, "apikeys", "revoke", key.APIKeyID, "--json")
	if err != nil || !strings.Contains(out, `"revoked_at": "`) {
		t.Fatalf("apikeys revoke: %s %v", out, err)
	}
	out, err = cli(t, env, "apikeys", "list", "--tenant", strconv.FormatInt(tenant.TenantID, 10), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var keys []struct {
		ID        string     `json:"id"`
		RevokedAt *time.Time `json:"revoked_at"`
	}
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 2 {
		t.Fatalf("apikeys list: %s (%v)", out, err)
	}
	for _, k := range keys {
		if (k.ID == key.APIKeyID) != (k.RevokedAt != nil) {
			t.Fatalf("revocation not listed right: %s", out)
		}
	}
	if strings.Contains(out, key.APIKey) || strings.Contains(out, tenant.APIKey) {
		t.Fatal("apikeys list printed a secret")
	}
	out, err = cli(t, env, "tenants", "list")
	if err != nil || !strings.Contains(out, "Acme") {
		t.Fatalf("tenants list: %s %v", out, err)
	}
}

// TestCLIPublishableKeysAndOrigins: a publishable key is created like
// the others and printed ppk_…; a tenant's browser origins are read and
// set, validated (http only for loopback, outside production).
func TestCLIPublishableKeysAndOrigins(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "PAYORCH_LOG_LEVEL": "error"}
	out, err := cli(t, env, "tenants", "create", "--name", "Shop", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var tenant struct {
		TenantID int64 `json:"tenant_id"`
	}
	if err := json.Unmarshal([]byte(out), &tenant); err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(tenant.TenantID, 10)
	out, err = cli(t, env, "apikeys", "create", "--role", "publishable", "--tenant", id, "--json")
	if err != nil || !strings.Contains(out, `"api_key": "ppk_`) || !strings.Contains(out, `"role": "publishable"`) {
		t.Fatalf("apikeys create publishable: %s %v", out, err)
	}
	if _, err := cli(t, env, "apikeys", "create", "--role", "publishable"); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("a publishable key without a tenant: %v", err)
	}

	out, err = cli(t, env, "tenants", "origins", "--tenant", id)
	if err != nil || !strings.Contains(out, "no browser origin") {
		t.Fatalf("origins of a new tenant: %s %v", out, err)
	}
	out, err = cli(t, env, "tenants", "origins", "--tenant", id, "--set", "https://Shop.example, https://pay.shop.example:8443", "--json")
	if err != nil || !strings.Contains(out, `"https://shop.example"`) || !strings.Contains(out, `"https://pay.shop.example:8443"`) {
		t.Fatalf("origins --set: %s %v", out, err)
	}
	// serve's default environment is production: no http, even on loopback.
	if _, err := cli(t, env, "tenants", "origins", "--tenant", id, "--set", "http://localhost:3000"); err == nil ||
		!strings.Contains(err.Error(), "origins[0]") {
		t.Fatalf("http origin in production: %v", err)
	}
	dev := map[string]string{"DATABASE_URL": env["DATABASE_URL"], "PAYORCH_LOG_LEVEL": "error", "PAYORCH_ENVIRONMENT": "development"}
	if out, err = cli(t, dev, "tenants", "origins", "--tenant", id, "--set", "http://localhost:3000"); err != nil || !strings.Contains(out, "http://localhost:3000") {
		t.Fatalf("http loopback origin in development: %s %v", out, err)
	}
	if out, err = cli(t, env, "tenants", "origins", "--tenant", id, "--set", "", "--json"); err != nil || !strings.Contains(out, `"origins": []`) {
		t.Fatalf("origins --set \"\": %s %v", out, err)
	}
	if _, err := cli(t, env, "tenants", "origins"); err == nil || !strings.Contains(err.Error(), "--tenant") {
		t.Fatalf("origins without --tenant: %v", err)
	}
}

func TestCLIErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		want string
	}{
		"NoCommand":      {nil, nil, "no command"},
		"UnknownCommand": {nil, []string{"frobnicate"}, "unknown command"},
		"BadRateLimit":   {map[string]string{"PAYORCH_RATE_LIMIT": "fast"}, []string{"version"}, "PAYORCH_RATE_LIMIT"},
		"NegativeLimit":  {map[string]string{"PAYORCH_RATE_LIMIT": "-1"}, []string{"version"}, "PAYORCH_RATE_LIMIT"},
		"NegativePublishableKeyLimit": {map[string]string{"PAYORCH_PUBLISHABLE_KEY_LIMIT": "-1"}, []string{"version"},
			"PAYORCH_PUBLISHABLE_KEY_LIMIT"},
		"BadPublishableClientLimit": {map[string]string{"PAYORCH_PUBLISHABLE_CLIENT_LIMIT": "many"}, []string{"version"},
			"PAYORCH_PUBLISHABLE_CLIENT_LIMIT"},
		"BadLogLevel":     {map[string]string{"PAYORCH_LOG_LEVEL": "loud"}, []string{"version"}, "PAYORCH_LOG_LEVEL"},
		"BadKeyCache":     {map[string]string{"PAYORCH_API_KEY_CACHE": "maybe"}, []string{"version"}, "PAYORCH_API_KEY_CACHE"},
		"BadReplayCache":  {map[string]string{"PAYORCH_REPLAY_CACHE": "-5"}, []string{"version"}, "PAYORCH_REPLAY_CACHE"},
		"BadDebugListen":  {map[string]string{"PAYORCH_DEBUG_LISTEN": "0.0.0.0:6060"}, []string{"version"}, "PAYORCH_DEBUG_LISTEN"},
		"NoDatabaseURL":   {nil, []string{"tenants", "list"}, "DATABASE_URL"},
		"CreateNeedsName": {map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/x"}, []string{"tenants", "create"}, "--name"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cli(t, tc.env, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if out, err := cli(t, nil, "version"); err != nil || !strings.HasPrefix(out, "payorch ") {
		t.Fatalf("version: %q %v", out, err)
	}
}

func TestAPIKeyCacheIsOnUnlessTurnedOff(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]bool{"": true, "true": true, "1": true, "false": false, "0": false} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_API_KEY_CACHE": env}))
		if err != nil || cfg.APIKeyCache != want {
			t.Errorf("PAYORCH_API_KEY_CACHE=%q: APIKeyCache %v (%v), want %v", env, cfg.APIKeyCache, err, want)
		}
	}
}

func TestMigrateCommandIsRepeatable(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.EmptyURL(t), "PAYORCH_LOG_LEVEL": "error"}
	out, err := cli(t, env, "migrate")
	if err != nil || strings.HasPrefix(out, "applied 0 ") {
		t.Fatalf("first migrate: %q %v", out, err)
	}
	out, err = cli(t, env, "migrate")
	if err != nil || !strings.HasPrefix(out, "applied 0 ") {
		t.Fatalf("second migrate: %q %v", out, err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var bannerURL = regexp.MustCompile(`payorch dev is up: (http://\S+)`)
var bannerMerchant = regexp.MustCompile(`merchant\s+(pok_\S+)`)

// startDev runs `payorch dev` in-process until the returned stop is called,
// and returns its base URL and merchant key once it serves.
func startDev(t *testing.T, env map[string]string) (base, merchant string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testkit.SyncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"dev", "--listen", "127.0.0.1:0"}, out, envOf(env)) }()
	deadline := time.After(2 * time.Minute)
	for {
		if m := bannerURL.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			merchant = bannerMerchant.FindStringSubmatch(out.String())[1]
			break
		}
		select {
		case err := <-errc:
			cancel()
			t.Fatalf("dev exited early: %v\n%s", err, out.String())
		case <-deadline:
			cancel()
			t.Fatalf("dev did not come up:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return base, merchant, func() error { cancel(); return <-errc }
}

func TestDevRunsEverythingAndKeepsItsData(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "payorch-dev-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user must reach it when we are root
		t.Fatal(err)
	}
	env := map[string]string{
		"PAYORCH_DATA_DIR":    dir,
		"PAYORCH_DEV_PG_PORT": strconv.Itoa(freePort(t)),
		"PAYORCH_LOG_LEVEL":   "error",
	}

	base, merchant, stop := startDev(t, env)
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("readyz %d %s", res.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", base+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+merchant)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("the printed merchant key does not work: %d", res.StatusCode)
	}
	// Payments authorized now on each of dev's two embedded fakes, fake_a
	// (the default) and fake_b, are captured in the second run: each fake
	// keeps its holds in the data folder too, in its own file.
	type payment struct {
		ID       string `json:"id"`
		Provider string `json:"provider"`
	}
	var paid []payment
	for i, tc := range []struct{ body, want string }{
		{`{"amount_minor":1050,"currency":"EUR"}`, "fake_a"},
		{`{"amount_minor":1060,"currency":"EUR","provider":"fake_b"}`, "fake_b"},
	} {
		st, b := call(t, "POST", base+"/v1/payments", merchant, "dev-keep-"+strconv.Itoa(i), tc.body)
		var p payment
		if st != 201 || json.Unmarshal(b, &p) != nil || p.ID == "" || p.Provider != tc.want {
			t.Fatalf("authorize %s: %d %s, want 201 on %s", tc.body, st, b, tc.want)
		}
		paid = append(paid, p)
	}
	for _, name := range []string{"fake-provider-fake_a.json", "fake-provider-fake_b.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no state file %s: %v", name, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "vault.keys")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("dev's vault keys: %v (want a file of mode 0600)", err)
	}
	pidFile := dir + "/pgdata/postmaster.pid"
	if _, err := os.Stat(pidFile); err != nil {
		t.Fatalf("no running cluster in the data folder: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("dev stop: %v", err)
	}
	// A clean stop removes postmaster.pid: the server is gone, not orphaned.
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("postgres still running (or not shut down cleanly) after dev stopped: %v", err)
	}

	base2, merchant2, stop2 := startDev(t, env)
	if merchant2 != merchant {
		t.Fatalf("second run printed another merchant key: %s vs %s", merchant2, merchant)
	}
	req, _ = http.NewRequest("GET", base2+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+merchant2)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("the kept key no longer works: %d", res.StatusCode)
	}
	for _, p := range paid {
		st, b := call(t, "POST", base2+"/v1/payments/"+p.ID+"/capture", merchant2, p.ID+"-capture", "")
		var captured struct {
			Status string `json:"status"`
		}
		if st != 200 || json.Unmarshal(b, &captured) != nil || captured.Status != "captured" {
			t.Fatalf("capturing the first run's payment on %s in the second run: %d %s", p.Provider, st, b)
		}
	}
	// Each embedded fake sends its webhooks to the server, signed with the
	// secret this start generated: the capture's shows on the timeline.
	for _, p := range paid {
		testkit.WaitFor(t, 30*time.Second, "the hold.captured webhook from "+p.Provider+" on the timeline", func() (bool, error) {
			st, b := call(t, "GET", base2+"/v1/payments/"+p.ID+"/events", merchant2, "", "")
			return st == 200 && strings.Contains(string(b), `"operation":"capture_succeeded"`), fmt.Errorf("%d %s", st, b)
		})
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
}

func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	srv := startServe(t, w.env(nil))
	if a := authorize(srv.base, w.key, "cli-rec-1", `{"amount_minor":700,"currency":"EUR"}`); a.status != 201 {
		t.Fatalf("authorize: %d %s", a.status, a.body)
	}
	env := w.env(map[string]string{"PAYORCH_LOG_LEVEL": "error"})
	today := time.Now().UTC().Format(time.DateOnly)
	out, err := cli(t, env, "reconcile", "--provider", "fake", "--date", today, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var run struct {
		Status           string `json:"status"`
		Trigger          string `json:"trigger"`
		LocalCount       int64  `json:"local_count"`
		MatchedCount     int64  `json:"matched_count"`
		DiscrepancyCount int64  `json:"discrepancy_count"`
	}
	if err := json.Unmarshal([]byte(out), &run); err != nil || run.Status != "succeeded" || run.Trigger != "cli" ||
		run.LocalCount != 1 || run.MatchedCount != 1 || run.DiscrepancyCount != 0 {
		t.Fatalf("reconcile --json printed %s (%v)", out, err)
	}
	out, err = cli(t, env, "reconcile", "--provider", "fake", "--date", today)
	if err != nil || !strings.Contains(out, "version 2 succeeded") {
		t.Fatalf("second run: %q %v", out, err)
	}
	if _, err := cli(t, env, "reconcile", "--provider", "fake", "--date", "yesterday"); err == nil || !strings.Contains(err.Error(), "YYYY-MM-DD") {
		t.Fatalf("bad date: %v", err)
	}
}

func TestStripeProviderIsWiredFromTheEnvironment(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"DefaultStripeWithoutKey": {map[string]string{"PAYORCH_DEFAULT_PROVIDER": "stripe"}, "STRIPE_SECRET_KEY"},
		"UnknownDefault":          {map[string]string{"PAYORCH_DEFAULT_PROVIDER": "adyen"}, "PAYORCH_DEFAULT_PROVIDER"},
		"BadTimeout":              {map[string]string{"STRIPE_TIMEOUT": "-1s"}, "STRIPE_TIMEOUT"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := loadConfig(envOf(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to name %s", err, tc.want)
			}
		})
	}
	cfg, err := loadConfig(envOf(map[string]string{"STRIPE_SECRET_KEY": "sk_test_123", "STRIPE_API_BASE": "http://127.0.0.1:9",
		"PAYORCH_FAKE_URL": "http://127.0.0.1:9", "PAYORCH_FAKE_TOKEN": "t", "PAYORCH_DEFAULT_PROVIDER": "stripe",
		"PAYORCH_ENVIRONMENT": "test"}))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	tel, err := startTelemetry(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.stop()
	provs, stop, err := startProviders(cfg, logger, tel)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	if provs["stripe"] == nil || provs["stripe"].Name() != "stripe" || provs["fake"] == nil {
		t.Fatalf("providers %v", provs)
	}
}
