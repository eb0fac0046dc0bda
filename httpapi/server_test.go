package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/migrations"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type env struct {
	fake   *fake.Client
	srv    *httpapi.Server
	url    string
	svc    *orchestrator.Service
	hooks  *webhooks.Service
	pool   *pgxpool.Pool // for tests that read or arrange rows directly
	logs   *testkit.SyncBuffer
	keys   map[orchestrator.Role]string
	tenant int64
	// spans records every span ended; metrics reads the metrics of the
	// server, the Service and the Reconciler.
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
}

// newEnv serves the API on a database at dbURL with a fake provider of its
// own on loopback, tracing into an in-memory recorder (every span sampled)
// and metering into a manual reader. svcCfg, when given, tunes the Service
// (clock, lease, provider timeout, a Pool on dbURL of its own, more
// connectors); its Pool (unless given), Logger, the default connector
// "fake" and telemetry providers are filled in.
func newEnv(t testing.TB, cfg httpapi.Config, dbURL string, svcCfg ...orchestrator.Config) *env {
	t.Helper()
	var sc orchestrator.Config
	if len(svcCfg) > 0 {
		sc = svcCfg[0]
	}
	return newEnvWith(t, cfg, dbURL, sc, webhooks.Config{})
}

// newEnvWith is newEnv with the Service's configuration sc and the
// webhooks' hc; their Pool (unless given), Clock (the Service's), Logger
// and telemetry providers are filled in.
func newEnvWith(t testing.TB, cfg httpapi.Config, dbURL string, sc orchestrator.Config, hc webhooks.Config) *env {
	t.Helper()
	pool := sc.Pool
	if pool == nil {
		pool = pgtest.Pool(t, dbURL)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	logs := &testkit.SyncBuffer{}
	logger := slog.New(orchestrator.NewLogHandler(slog.NewJSONHandler(logs, nil)))
	fr, err := fake.Start("127.0.0.1:0", fake.Config{TimeoutHang: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	fc := fr.Client(&http.Client{})
	mig, err := migrations.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mig.Close() })
	sc.Pool, sc.SchemaVersions, sc.Logger = pool, mig.Versions, logger
	sc.TracerProvider, sc.MeterProvider = tp, mp
	// The fake is connector "fake", the default; a test may add others.
	if sc.Providers == nil {
		sc.Providers = map[string]providers.Provider{}
	}
	sc.Providers["fake"], sc.DefaultProvider = fc, "fake"
	svc := orchestrator.NewService(sc)
	hc.Pool, hc.Clock, hc.Logger, hc.MeterProvider = pool, sc.Clock, logger, mp
	hooks := webhooks.New(hc)
	cfg.Service, cfg.Webhooks, cfg.Logger = svc, hooks, logger
	cfg.TracerProvider, cfg.MeterProvider = tp, mp
	cfg.Reconciler = reconcile.New(reconcile.Config{Pool: pool, Providers: sc.Providers, Logger: logger,
		TracerProvider: tp, MeterProvider: mp})
	srv := httpapi.New(cfg)
	t.Cleanup(srv.Close)
	e := &env{fake: fc, srv: srv, svc: svc, hooks: hooks, pool: pool, logs: logs, keys: map[orchestrator.Role]string{}, spans: spans, metrics: reader}
	// Test-only routes behind the same middleware as the real ones.
	srv.Echo().POST("/test/echo", func(c echo.Context) error {
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusOK, "application/json", b)
	})
	srv.Echo().GET("/test/internal", func(c echo.Context) error {
		return errors.New(`pq: relation "secret_table" does not exist at character 42`)
	})
	srv.Echo().GET("/test/panic", func(c echo.Context) error { panic("boom: password=hunter2") })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

func newMigratedEnv(t testing.TB, cfg httpapi.Config, svcCfg ...orchestrator.Config) *env {
	t.Helper()
	var sc orchestrator.Config
	if len(svcCfg) > 0 {
		sc = svcCfg[0]
	}
	return newMigratedEnvWith(t, cfg, sc, webhooks.Config{})
}

// newMigratedEnvWith is newMigratedEnv with the webhooks' configuration
// hc too (newEnvWith).
func newMigratedEnvWith(t testing.TB, cfg httpapi.Config, sc orchestrator.Config, hc webhooks.Config) *env {
	t.Helper()
	e := newEnvWith(t, cfg, testDBURL(t), sc, hc)
	ctx := context.Background()
	tenant, _, key, err := e.svc.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	e.tenant = tenant.ID
	e.keys[orchestrator.RoleMerchant] = key
	for _, r := range []orchestrator.Role{orchestrator.RoleSupport, orchestrator.RoleFinance, orchestrator.RoleAdmin} {
		_, k, err := e.svc.CreateAPIKey(ctx, r, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		e.keys[r] = k
	}
	return e
}

func (e *env) do(t testing.TB, method, path, key string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// wantProblem asserts an RFC 9457 body with status and code.
func wantProblem(t *testing.T, res *http.Response, body []byte, status int, code string) httpapi.Problem {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var p httpapi.Problem
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", body, err)
	}
	if p.Status != status || p.Code != code || p.Type != "urn:payorch:problem:"+code || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d code %s with type, title and detail", p, status, code)
	}
	if p.RequestID == "" || p.RequestID != res.Header.Get("X-Request-Id") {
		t.Fatalf("problem request_id %q, response X-Request-Id %q", p.RequestID, res.Header.Get("X-Request-Id"))
	}
	return p
}

func TestHealth(t *testing.T) {
	t.Parallel()

	t.Run("ReadyWhenDatabaseMigrated", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		res, body := e.do(t, "GET", "/healthz", "", nil, nil)
		if res.StatusCode != 200 {
			t.Fatalf("healthz %d %s", res.StatusCode, body)
		}
		res, body = e.do(t, "GET", "/readyz", "", nil, nil)
		if res.StatusCode != 200 || !strings.Contains(string(body), `"status":"ready"`) {
			t.Fatalf("readyz %d %s", res.StatusCode, body)
		}
	})

	t.Run("NotReadyWhenMigrationsPending", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, httpapi.Config{}, pgtest.EmptyURL(t))
		res, body := e.do(t, "GET", "/readyz", "", nil, nil)
		if res.StatusCode != 503 || !strings.Contains(string(body), `"migrations":"pending"`) {
			t.Fatalf("readyz on an unmigrated database: %d %s", res.StatusCode, body)
		}
	})
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})

	t.Run("MissingKeyIs401WithChallenge", func(t *testing.T) {
		res, body := e.do(t, "GET", "/v1/me", "", nil, nil)
		wantProblem(t, res, body, 401, "unauthorized")
		if !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("WWW-Authenticate %q", res.Header.Get("WWW-Authenticate"))
		}
	})

	t.Run("BadKeyIs401", func(t *testing.T) {
		for _, h := range []string{"Bearer nope", "Basic abc", "Bearer", e.keys[orchestrator.RoleAdmin]} {
			res, body := e.do(t, "GET", "/v1/me", "", nil, map[string]string{"Authorization": h})
			wantProblem(t, res, body, 401, "unauthorized")
		}
	})

	t.Run("RevokedKeyIs401", func(t *testing.T) {
		ctx := context.Background()
		k, secret, err := e.svc.CreateAPIKey(ctx, orchestrator.RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if res, body := e.do(t, "GET", "/v1/me", secret, nil, nil); res.StatusCode != 200 {
			t.Fatalf("before revoke: %d %s", res.StatusCode, body)
		}
		if _, err := e.svc.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		res, body := e.do(t, "GET", "/v1/me", secret, nil, nil)
		wantProblem(t, res, body, 401, "unauthorized")
	})

	t.Run("EachRoleSeesItself", func(t *testing.T) {
		for role, key := range e.keys {
			res, body := e.do(t, "GET", "/v1/me", key, nil, nil)
			if res.StatusCode != 200 {
				t.Fatalf("%s: %d %s", role, res.StatusCode, body)
			}
			var got struct {
				Role     string `json:"role"`
				TenantID *int64 `json:"tenant_id"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Role != string(role) || (role == orchestrator.RoleMerchant) != (got.TenantID != nil) {
				t.Fatalf("%s: /v1/me = %s", role, body)
			}
		}
	})

	t.Run("WrongRoleIs403", func(t *testing.T) {
		for _, role := range []orchestrator.Role{orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance} {
			res, body := e.do(t, "GET", "/v1/tenants", e.keys[role], nil, nil)
			wantProblem(t, res, body, 403, "forbidden")
		}
		res, body := e.do(t, "GET", "/v1/tenants", e.keys[orchestrator.RoleAdmin], nil, nil)
		if res.StatusCode != 200 || !strings.Contains(string(body), `"name":"Acme"`) {
			t.Fatalf("admin /v1/tenants: %d %s", res.StatusCode, body)
		}
	})

	t.Run("AdminListsKeysWithoutSecrets", func(t *testing.T) {
		res, body := e.do(t, "GET", "/v1/api_keys", e.keys[orchestrator.RoleAdmin], nil, nil)
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		for _, k := range e.keys {
			if strings.Contains(string(body), k[len(k)-20:]) {
				t.Fatal("a key's secret appears in the key listing")
			}
		}
		res, body = e.do(t, "GET", "/v1/api_keys?tenant_id=abc", e.keys[orchestrator.RoleAdmin], nil, nil)
		p := wantProblem(t, res, body, 400, "validation_failed")
		if p.Param != "tenant_id" {
			t.Fatalf("param %q", p.Param)
		}
	})
}

func TestRequestLimits(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	jsonHdr := map[string]string{"Content-Type": "application/json"}

	t.Run("SmallJSONBodyPasses", func(t *testing.T) {
		res, body := e.do(t, "POST", "/test/echo", "", strings.NewReader(`{"a":1}`), jsonHdr)
		if res.StatusCode != 200 || string(body) != `{"a":1}` {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	})

	t.Run("BodyOver64KiBIs413", func(t *testing.T) {
		big := `{"a":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`
		res, body := e.do(t, "POST", "/test/echo", "", strings.NewReader(big), jsonHdr)
		wantProblem(t, res, body, 413, "body_too_large")
	})

	t.Run("ChunkedBodyOver64KiBIs413", func(t *testing.T) {
		big := `{"a":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`
		// An io.Reader of unknown length makes the client send chunked.
		res, body := e.do(t, "POST", "/test/echo", "", io.MultiReader(strings.NewReader(big)), jsonHdr)
		wantProblem(t, res, body, 413, "body_too_large")
	})

	t.Run("NonJSONBodyIs415", func(t *testing.T) {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "", "application/jsonx"} {
			res, body := e.do(t, "POST", "/test/echo", "", strings.NewReader(`{"a":1}`), map[string]string{"Content-Type": ct})
			wantProblem(t, res, body, 415, "unsupported_media_type")
		}
		res, _ := e.do(t, "POST", "/test/echo", "", strings.NewReader(`{}`), map[string]string{"Content-Type": "application/json; charset=utf-8"})
		if res.StatusCode != 200 {
			t.Fatalf("application/json with charset: %d", res.StatusCode)
		}
	})

	t.Run("UnknownRouteIs404AndWrongMethod405", func(t *testing.T) {
		res, body := e.do(t, "GET", "/v2/nothing", "", nil, nil)
		wantProblem(t, res, body, 404, "not_found")
		res, body = e.do(t, "DELETE", "/healthz", "", nil, nil)
		wantProblem(t, res, body, 405, "method_not_allowed")
	})

	t.Run("InternalErrorsLeakNothing", func(t *testing.T) {
		for _, path := range []string{"/test/internal", "/test/panic"} {
			res, body := e.do(t, "GET", path, "", nil, nil)
			wantProblem(t, res, body, 500, "internal")
			for _, secret := range []string{"secret_table", "hunter2", "goroutine", ".go:"} {
				if strings.Contains(string(body), secret) {
					t.Fatalf("%s leaked %q: %s", path, secret, body)
				}
			}
		}
		if !strings.Contains(e.logs.String(), "secret_table") || !strings.Contains(e.logs.String(), "hunter2") {
			t.Fatal("internal errors must be logged with their detail")
		}
	})

	t.Run("ClientRequestIDIsKeptAndLogged", func(t *testing.T) {
		res, _ := e.do(t, "GET", "/v1/me", e.keys[orchestrator.RoleMerchant], nil, map[string]string{"X-Request-Id": "abc-123"})
		if res.Header.Get("X-Request-Id") != "abc-123" {
			t.Fatalf("X-Request-Id %q", res.Header.Get("X-Request-Id"))
		}
		var found bool
		for _, line := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(line, `"request_id":"abc-123"`) && strings.Contains(line, `"msg":"http request"`) {
				found = true
				if !strings.Contains(line, `"tenant_id":`) || !strings.Contains(line, `"status":200`) {
					t.Fatalf("request log line lacks tenant or status: %s", line)
				}
			}
		}
		if !found {
			t.Fatal("no request log line with the client's request id")
		}
		res, _ = e.do(t, "GET", "/healthz", "", nil, map[string]string{"X-Request-Id": "bad id with spaces"})
		if got := res.Header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
			t.Fatalf("an unsafe client request id was kept: %q", got)
		}
	})
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	// A stopped clock: no token refills while the test runs, however slow.
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := newMigratedEnv(t, httpapi.Config{RateLimit: 1, Clock: func() time.Time { return now }}) // 1/s, burst 2
	key := e.keys[orchestrator.RoleSupport]
	for i := range 2 {
		if res, body := e.do(t, "GET", "/v1/me", key, nil, nil); res.StatusCode != 200 {
			t.Fatalf("request %d within the burst: %d %s", i, res.StatusCode, body)
		}
	}
	res, body := e.do(t, "GET", "/v1/me", key, nil, nil)
	wantProblem(t, res, body, 429, "rate_limited")
	if ra := res.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1", ra)
	}
	// Another key has its own bucket.
	if res, body := e.do(t, "GET", "/v1/me", e.keys[orchestrator.RoleFinance], nil, nil); res.StatusCode != 200 {
		t.Fatalf("other key: %d %s", res.StatusCode, body)
	}
}
