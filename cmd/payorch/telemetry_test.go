package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// alertRules is the rule file shipped for Prometheus.
const alertRules = "../../deploy/prometheus/alerts.yml"

// alertMetrics returns every payorch_* metric name the alert rules use.
func alertMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bpayorch_[a-z0-9_]+`).FindAllString(string(b), -1) {
		seen[m] = true
	}
	if !regexp.MustCompile(`(?m)^\s+expr:`).Match(b) || len(seen) < 5 {
		t.Fatalf("%s: found no rules or too few metrics (%v)", alertRules, seen)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sample is one line of the Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func parseExposition(t *testing.T, text string) []sample {
	t.Helper()
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable exposition line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("exposition line %q: %v", line, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return out
}

// value sums the samples of name whose labels include want.
func value(samples []sample, name string, want map[string]string) (float64, bool) {
	var v float64
	var found bool
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, w := range want {
			if s.labels[k] != w {
				continue next
			}
		}
		v, found = v+s.value, true
	}
	return v, found
}

// providerProxy stands between payorch and the fake provider and records
// the traceparent of every request it passes on.
type providerProxy struct {
	*httptest.Server
	mu   sync.Mutex
	seen []proxied
}

type proxied struct{ method, path, traceparent, key string }

func newProviderProxy(t *testing.T, target string) *providerProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // payorch's timeouts cancel requests on purpose
	p := &providerProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, proxied{r.Method, r.URL.Path, r.Header.Get("traceparent"), r.Header.Get("Idempotency-Key")})
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *providerProxy) requests() []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxied(nil), p.seen...)
}

// call sends one request to a serve process and returns status and body.
func call(t *testing.T, method, u, apiKey, idemKey, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// TestMetricsEndpointCoversTheAlertRules drives a real `payorch serve`
// through every outcome the metrics distinguish, scrapes /metrics, and
// checks that every metric the shipped alert rules use is exported, that
// provider requests carry the request's trace context, that every request
// log line carries its trace, and that no API key secret is logged.
func TestMetricsEndpointCoversTheAlertRules(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	ctx := context.Background()
	proxy := newProviderProxy(t, w.fake.URL())
	// A webhook endpoint on loopback, so deliveries happen (and their
	// metrics exist).
	hooks := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	const hookSecret = "whsec_ObservabilityTestSecret_Qx7vLm2Rk9Tz4Wp1Hs8Nd3Fb6Yc0Ge5"

	t.Cleanup(hooks.Close)
	if _, err := w.pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
		VALUES ('we_obs', $1, $2, '{*}', $3, 'test', now(), now())`, w.tenant, hooks.URL, hookSecret); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, w.env(map[string]string{
		"PAYORCH_FAKE_URL":              proxy.URL,
		"PAYORCH_PROVIDER_TIMEOUT":      "1s",
		"PAYORCH_KEY_SWEEP_INTERVAL":    "100ms",
		"PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true",
		"PAYORCH_WEBHOOK_INTERVAL":      "100ms",
	}))
	_, finance, err := orchestrator.NewService(orchestrator.Config{Pool: w.pool}).CreateAPIKey(ctx, orchestrator.RoleFinance, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"amount_minor":1000,"currency":"EUR"}`
	timeoutOnce := func(key string) {
		t.Helper()
		if err := w.fc.InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1,
			IdempotencyKey: providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, key)}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, status, want int, b []byte) {
		t.Helper()
		if status != want {
			t.Fatalf("%s: %d %s", what, status, b)
		}
	}

	// new, replayed, a capture; reused.
	st, b := call(t, "POST", srv.base+"/v1/payments", w.key, "obs-1", body)
	expect("authorize", st, 201, b)
	var p struct {
		ID          string `json:"id"`
		ProviderRef string `json:"provider_ref"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-1", body)
	expect("replay", st, 201, b)
	st, b = call(t, "POST", srv.base+"/v1/payments/"+p.ID+"/capture", w.key, "obs-1-cap", "")
	expect("capture", st, 200, b)
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-1", `{"amount_minor":2000,"currency":"EUR"}`)
	expect("reused", st, 409, b)

	// A provider timeout (unknown outcome, pending), then its retry resumes.
	timeoutOnce("obs-2")
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-2", body)
	expect("timeout", st, 202, b)
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-2", body)
	expect("resumed", st, 201, b)

	// An owner holding the lease (in_use), then crashed (takeover).
	timeoutOnce("obs-3")
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-3", body)
	expect("timeout", st, 202, b)
	if _, err := w.pool.Exec(ctx, `UPDATE idempotency_keys SET lock_token = gen_random_uuid(), locked_until = now() + interval '1 minute'
		WHERE key = 'obs-3'`); err != nil {
		t.Fatal(err)
	}
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-3", body)
	expect("in use", st, 409, b)
	if _, err := w.pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE key = 'obs-3'`); err != nil {
		t.Fatal(err)
	}
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "obs-3", body)
	expect("takeover", st, 201, b)

	// An expired key for the sweeper.
	if _, err := w.pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 hour' WHERE key = 'obs-1-cap'`); err != nil {
		t.Fatal(err)
	}

	// A reconciliation that finds a discrepancy.
	if err := w.fc.Drift(ctx, fake.Drift{Kind: fake.DriftAmount, Ref: p.ProviderRef, Field: fake.AmountCaptured, AmountMinor: 900}); err != nil {
		t.Fatal(err)
	}
	st, b = call(t, "POST", srv.base+"/v1/reconciliation/runs", finance, "obs-run",
		`{"provider":"fake","date":"`+time.Now().UTC().Format(time.DateOnly)+`"}`)
	expect("start run", st, 202, b)
	var run struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	}
	_ = json.Unmarshal(b, &run)
	testkit.WaitFor(t, 30*time.Second, "the run to finish", testkit.Until(func() bool {
		if run.Status != "running" {
			return true
		}
		st, b = call(t, "GET", fmt.Sprintf("%s/v1/reconciliation/runs/%d", srv.base, run.ID), finance, "", "")
		expect("get run", st, 200, b)
		_ = json.Unmarshal(b, &run)
		return run.Status != "running"
	}))
	if run.Status != "succeeded" {
		t.Fatalf("run %s", b)
	}

	// Scrape until the sweeper's purge, the run's gauges and the webhook
	// deliveries show.
	var samples []sample
	var exposition string
	testkit.WaitFor(t, 20*time.Second, "the purge, reconciliation gauges and webhook deliveries exported", func() (bool, error) {
		st, b = call(t, "GET", srv.base+"/metrics", "", "", "")
		expect("metrics", st, 200, b)
		exposition = string(b)
		samples = parseExposition(t, exposition)
		_, purged := value(samples, "payorch_idempotency_keys_purged_total", nil)
		_, gauged := value(samples, "payorch_reconciliation_discrepancies", map[string]string{"category": "amount_mismatch"})
		_, hooked := value(samples, "payorch_webhook_deliveries_total", map[string]string{"outcome": "delivered"})
		return purged && gauged && hooked, fmt.Errorf("purged %v, gauged %v, hooked %v in:\n%s", purged, gauged, hooked, exposition)
	})

	t.Run("EveryMetricOfTheAlertRulesIsExported", func(t *testing.T) {
		// A sample's name, or a family's (a histogram's name has samples
		// only as _bucket, _sum and _count).
		names := map[string]bool{}
		for _, s := range samples {
			names[s.name] = true
		}
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(exposition, -1) {
			names[m[1]] = true
		}
		for _, m := range alertMetrics(t) {
			if !names[m] {
				t.Errorf("alert rules use %s, which /metrics does not export", m)
			}
		}
	})

	t.Run("ValuesFollowTheTraffic", func(t *testing.T) {
		want := func(name string, labels map[string]string, min float64) {
			t.Helper()
			if v, ok := value(samples, name, labels); !ok || v < min {
				t.Errorf("%s%v = %v (exported %v), want at least %v", name, labels, v, ok, min)
			}
		}
		for _, o := range []string{"new", "replayed", "reused", "in_use", "takeover", "resumed"} {
			want("payorch_idempotency_requests_total", map[string]string{"operation": orchestrator.OpAuthorize, "outcome": o}, 1)
		}
		want("payorch_idempotency_takeovers_total", nil, 1)
		want("payorch_idempotency_keys_purged_total", nil, 1)
		want("payorch_provider_call_duration_seconds_count", map[string]string{"provider": "fake", "operation": "authorize", "outcome": "unknown"}, 2)
		want("payorch_provider_call_duration_seconds_count", map[string]string{"provider": "fake", "operation": "capture", "outcome": "ok"}, 1)
		want("payorch_first_execution_duration_seconds_count", map[string]string{"result": "pending"}, 2)
		want("payorch_http_requests_total", map[string]string{"route": "/v1/payments", "status": "409"}, 2)
		want("payorch_reconciliation_discrepancies", map[string]string{"provider": "fake", "category": "amount_mismatch"}, 1)
		want("payorch_reconciliation_run_duration_seconds_count", map[string]string{"provider": "fake", "status": "succeeded"}, 1)
		want("payorch_reconciliation_last_success_timestamp_seconds", map[string]string{"provider": "fake"}, float64(time.Now().Add(-time.Hour).Unix()))
		if _, ok := value(samples, "payorch_pending_oldest_age_seconds", nil); !ok {
			t.Error("no payorch_pending_oldest_age_seconds")
		}
		want("target_info", map[string]string{"service_name": "payorch"}, 1)
	})

	logs := srv.logs.String()
	t.Run("ProviderRequestsCarryTheRequestsTrace", func(t *testing.T) {
		reqs := proxy.requests()
		if len(reqs) < 5 {
			t.Fatalf("only %d provider requests went through the proxy", len(reqs))
		}
		traceOf := map[string]string{} // forwarded key → trace id
		for _, r := range reqs {
			parts := strings.Split(r.traceparent, "-")
			if len(parts) != 4 || len(parts[1]) != 32 {
				t.Fatalf("%s %s carried traceparent %q", r.method, r.path, r.traceparent)
			}
			if r.key != "" {
				traceOf[r.key] = parts[1]
			}
		}
		line := requestLine(t, logs, "obs-1", "new")
		fwd := providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, "obs-1")
		if traceOf[fwd] == "" || line["trace_id"] != traceOf[fwd] {
			t.Fatalf("the authorization reached the provider in trace %q; its request log line says %v", traceOf[fwd], line["trace_id"])
		}
	})

	t.Run("EveryRequestLineCarriesItsTraceAndOutcome", func(t *testing.T) {
		var n int
		for _, l := range strings.Split(logs, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "http request" {
				continue
			}
			n++
			if id, _ := m["trace_id"].(string); len(id) != 32 {
				t.Fatalf("request line without trace_id: %s", l)
			}
			if id, _ := m["span_id"].(string); len(id) != 16 {
				t.Fatalf("request line without span_id: %s", l)
			}
			if _, ok := m["duration_ms"]; !ok {
				t.Fatalf("request line without duration: %s", l)
			}
			if m["method"] == "POST" && m["route"] == "/v1/payments" {
				for _, k := range []string{"tenant_id", "idempotency_key", "payment_id", "idempotency_outcome", "request_id"} {
					if _, ok := m[k]; !ok {
						t.Fatalf("keyed request line without %s: %s", k, l)
					}
				}
			}
		}
		if n < 10 {
			t.Fatalf("%d request lines", n)
		}
	})

	t.Run("NoSecretInLogsOrMetrics", func(t *testing.T) {
		for _, k := range []string{w.key, finance} {
			secret := k[len("pok_")+16+1:]
			if len(secret) != 43 {
				t.Fatalf("cannot tell the secret of %q", k)
			}
			if strings.Contains(logs, secret) || strings.Contains(exposition, secret) {
				t.Fatal("an API key's secret is in the logs or the metrics")
			}
		}
		if strings.Contains(logs, hookSecret) || strings.Contains(exposition, hookSecret) {
			t.Fatal("a webhook endpoint's secret is in the logs or the metrics")
		}
	})
}

// requestLine finds the request log line of key with the given outcome.
func requestLine(t *testing.T, logs, key, outcome string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "http request" && m["idempotency_key"] == key && m["idempotency_outcome"] == outcome {
			return m
		}
	}
	t.Fatalf("no request line for %s (%s)", key, outcome)
	return nil
}

// otlpCollector receives OTLP/HTTP trace exports.
type otlpCollector struct {
	*httptest.Server
	mu    sync.Mutex
	spans []collectedSpan
	res   map[string]string
}

type collectedSpan struct {
	name, traceID, spanID, parentID string
	attrs                           map[string]string
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	t.Helper()
	c := &otlpCollector{res: map[string]string{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		attrs := func(kvs []*commonpb.KeyValue) map[string]string {
			m := map[string]string{}
			for _, kv := range kvs {
				switch v := kv.GetValue().GetValue().(type) {
				case *commonpb.AnyValue_StringValue:
					m[kv.GetKey()] = v.StringValue
				case *commonpb.AnyValue_IntValue:
					m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
				default:
					m[kv.GetKey()] = fmt.Sprint(kv.GetValue())
				}
			}
			return m
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for k, v := range attrs(rs.GetResource().GetAttributes()) {
				c.res[k] = v
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans = append(c.spans, collectedSpan{name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
						spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId()), attrs: attrs(s.GetAttributes())})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

// TestTracesExportedOverOTLPAndFlushedOnShutdown runs `payorch serve` with
// an OTLP endpoint and a batch delay longer than the test, so spans can only
// arrive through the flush of a clean shutdown; one request's trace holds
// the HTTP span, SQL spans, the provider call and its HTTP client span, and
// the fake received the same trace id. No span carries a secret: the API
// key's, or a webhook endpoint's (created, rotated and delivered to while
// traced).
func TestTracesExportedOverOTLPAndFlushedOnShutdown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	proxy := newProviderProxy(t, w.fake.URL())
	col := newOTLPCollector(t)
	var hooked atomic.Int64
	hooks := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hooked.Add(1) }))
	t.Cleanup(hooks.Close)
	srv := startServe(t, w.env(map[string]string{
		"PAYORCH_FAKE_URL":              proxy.URL,
		"OTEL_EXPORTER_OTLP_ENDPOINT":   col.URL,
		"OTEL_BSP_SCHEDULE_DELAY":       "600000",
		"PAYORCH_KEY_SWEEP_INTERVAL":    "0",
		"PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true",
		"PAYORCH_WEBHOOK_INTERVAL":      "50ms",
	}))
	st, b := call(t, "POST", srv.base+"/v1/webhook_endpoints", w.key, "otlp-ep", `{"url":"`+hooks.URL+`","event_types":["*"]}`)
	if st != 201 {
		t.Fatalf("create endpoint: %d %s", st, b)
	}
	var ep struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &ep); err != nil || ep.Secret == "" {
		t.Fatalf("endpoint %s %v", b, err)
	}
	st, b = call(t, "POST", srv.base+"/v1/webhook_endpoints/"+ep.ID+"/rotate_secret", w.key, "otlp-rot", "")
	var rotated struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &rotated); st != 200 || err != nil || rotated.Secret == "" {
		t.Fatalf("rotate: %d %s", st, b)
	}
	st, b = call(t, "POST", srv.base+"/v1/payments", w.key, "otlp-1", `{"amount_minor":1000,"currency":"EUR"}`)
	if st != 201 {
		t.Fatalf("authorize: %d %s", st, b)
	}
	testkit.WaitFor(t, 10*time.Second, "the payment's 2 webhooks", func() (bool, error) {
		n := hooked.Load()
		return n >= 2, fmt.Errorf("%d delivered", n)
	})
	col.mu.Lock()
	early := len(col.spans)
	col.mu.Unlock()
	if early != 0 {
		t.Logf("%d spans exported before shutdown", early)
	}

	srv.stop(t)

	col.mu.Lock()
	defer col.mu.Unlock()
	if col.res["service.name"] != "payorch" || col.res["service.version"] == "" {
		t.Fatalf("resource %v", col.res)
	}
	var server *collectedSpan
	for i, s := range col.spans {
		if s.name == "POST /v1/payments" {
			server = &col.spans[i]
		}
	}
	if server == nil {
		t.Fatalf("no server span among %d exported", len(col.spans))
	}
	byID := map[string]collectedSpan{}
	var provider, client, sql int
	for _, s := range col.spans {
		if s.traceID != server.traceID {
			continue
		}
		byID[s.spanID] = s
	}
	for _, s := range byID {
		switch {
		case s.name == "provider authorize":
			provider++
			if s.parentID != server.spanID || s.attrs["payorch.forwarded_key"] != providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, "otlp-1") {
				t.Fatalf("provider span %+v", s)
			}
		case s.attrs["db.system.name"] == "postgresql":
			sql++
		case s.attrs["http.request.method"] == "POST" && byID[s.parentID].name == "provider authorize":
			client++
		}
	}
	if provider != 1 || client < 1 || sql < 3 {
		t.Fatalf("trace %s: %d provider, %d provider HTTP client, %d SQL spans; spans %v", server.traceID, provider, client, sql, byID)
	}
	var sent bool
	for _, r := range proxy.requests() {
		if strings.Contains(r.traceparent, server.traceID) {
			sent = true
		}
	}
	if !sent {
		t.Fatalf("the fake never received trace %s", server.traceID)
	}
	apiSecret := w.key[len("pok_")+16+1:]
	for _, s := range col.spans {
		for k, v := range s.attrs {
			for what, secret := range map[string]string{"API key": apiSecret, "endpoint": ep.Secret, "rotated endpoint": rotated.Secret} {
				if strings.Contains(v, secret) {
					t.Fatalf("span %q attribute %s carries the %s secret", s.name, k, what)
				}
			}
		}
	}
}
