package httpapi_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// metricsNow collects every metric once.
func (e *env) metricsNow(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// matches reports whether set has every label of want.
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// point sums the data points of the metric name whose attributes include
// want: a counter's value, a histogram's count, or a gauge's value. found
// is false when no point matches.
func point(rm metricdata.ResourceMetrics, name string, want map[string]string) (v float64, found bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					if matches(dp.Attributes, want) {
						v, found = v+float64(dp.Value), true
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					if matches(dp.Attributes, want) {
						v, found = v+float64(dp.Count), true
					}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					if matches(dp.Attributes, want) {
						v, found = v+float64(dp.Value), true
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					if matches(dp.Attributes, want) {
						v, found = v+dp.Value, true
					}
				}
			}
		}
	}
	return v, found
}

func wantPoint(t *testing.T, rm metricdata.ResourceMetrics, name string, labels map[string]string, want float64) {
	t.Helper()
	got, found := point(rm, name, labels)
	if !found || got != want {
		t.Errorf("%s%v = %v (found %v), want %v", name, labels, got, found, want)
	}
}

// span returns the one ended span named name, failing otherwise.
func (e *env) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// requestLine returns the request log line of the keyed request whose
// idempotency outcome is outcome.
func (e *env) requestLine(t *testing.T, key, outcome string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if m["msg"] == "http request" && m["idempotency_key"] == key && m["idempotency_outcome"] == outcome {
			return m
		}
	}
	t.Fatalf("no request log line for key %s with outcome %s in\n%s", key, outcome, e.logs.String())
	return nil
}

func TestTelemetry(t *testing.T) {
	t.Parallel()
	const idem = "payorch.idempotency.requests"
	authorizeOp := map[string]string{"operation": orchestrator.OpAuthorize}
	outcome := func(o string) map[string]string {
		return map[string]string{"operation": orchestrator.OpAuthorize, "outcome": o}
	}

	t.Run("ReplayIncrementsTheReplayCounter", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		e.authorizeOK(t, "tel-replay", 1000)
		rm := e.metricsNow(t)
		wantPoint(t, rm, idem, outcome(httpapi.OutcomeNew), 1)
		if _, found := point(rm, idem, outcome(httpapi.OutcomeReplayed)); found {
			t.Fatal("a replay counted before any replay")
		}
		res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "tel-replay", `{"amount_minor":1000,"currency":"EUR"}`)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s", res.StatusCode, body)
		}
		rm = e.metricsNow(t)
		wantPoint(t, rm, idem, outcome(httpapi.OutcomeReplayed), 1)
		wantPoint(t, rm, idem, outcome(httpapi.OutcomeNew), 1)
		// Only the first execution is timed as one.
		wantPoint(t, rm, "payorch.first_execution.duration", map[string]string{"operation": orchestrator.OpAuthorize, "result": "stored"}, 1)
		wantPoint(t, rm, "payorch.http.requests", map[string]string{"method": "POST", "route": "/v1/payments", "status": "201"}, 2)
		wantPoint(t, rm, "payorch.provider_call.duration", map[string]string{"provider": "fake", "operation": "authorize", "outcome": "ok"}, 1)
		e.requestLine(t, "tel-replay", httpapi.OutcomeReplayed)
	})

	t.Run("TimeoutIsAnUnknownOutcomeInASpanOfTheRequest", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{}, orchestrator.Config{ProviderTimeout: 300 * time.Millisecond})
		const key = "tel-timeout"
		fwd := providers.ForwardedKey(e.tenant, orchestrator.OpAuthorize, key)
		if err := e.fake.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute,
			Count: 1, IdempotencyKey: fwd}); err != nil {
			t.Fatal(err)
		}
		if res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, `{"amount_minor":1000,"currency":"EUR"}`); res.StatusCode != 202 {
			t.Fatalf("unknown outcome: %d %s", res.StatusCode, body)
		}
		rm := e.metricsNow(t)
		wantPoint(t, rm, "payorch.provider_call.duration", map[string]string{"provider": "fake", "operation": "authorize", "outcome": "unknown"}, 1)
		wantPoint(t, rm, "payorch.first_execution.duration", map[string]string{"operation": orchestrator.OpAuthorize, "result": "pending"}, 1)
		wantPoint(t, rm, "payorch.pending.payments", nil, 1)
		if age, _ := point(rm, "payorch.pending.oldest_age", nil); age <= 0 {
			t.Errorf("oldest pending age %v, want > 0", age)
		}

		server := e.span(t, "POST /v1/payments")
		call := e.span(t, "provider authorize")
		if call.SpanContext().TraceID() != server.SpanContext().TraceID() || call.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Fatalf("provider span is not a child of the request span")
		}
		if call.SpanKind() != trace.SpanKindClient || attrOf(call, "payorch.forwarded_key") != fwd ||
			attrOf(call, "payorch.provider") != "fake" || attrOf(call, "payorch.operation") != "authorize" ||
			attrOf(call, "payorch.outcome") != "unknown" || call.Status().Code != codes.Error {
			t.Fatalf("provider span %s: attributes %v, status %v", call.Name(), call.Attributes(), call.Status())
		}
		if attrOf(server, "http.route") != "/v1/payments" || attrOf(server, "http.response.status_code") != "202" ||
			attrOf(server, "payorch.idempotency.outcome") != httpapi.OutcomeNew {
			t.Fatalf("server span attributes %v", server.Attributes())
		}

		// Every line of the request carries its trace; the last one says
		// how it ended.
		line := e.requestLine(t, key, httpapi.OutcomeNew)
		if line["trace_id"] != server.SpanContext().TraceID().String() || line["span_id"] != server.SpanContext().SpanID().String() {
			t.Fatalf("request line %v is not in trace %s", line, server.SpanContext().TraceID())
		}
		for _, k := range []string{"request_id", "tenant_id", "payment_id", "duration_ms"} {
			if _, ok := line[k]; !ok {
				t.Fatalf("request line lacks %s: %v", k, line)
			}
		}
		var providerLine bool
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, `"msg":"provider call"`) {
				providerLine = true
				if !strings.Contains(l, `"trace_id":"`+server.SpanContext().TraceID().String()+`"`) ||
					!strings.Contains(l, `"span_id":"`+call.SpanContext().SpanID().String()+`"`) ||
					!strings.Contains(l, `"idempotency_key":"`+key+`"`) {
					t.Fatalf("provider call line not in the provider span: %s", l)
				}
			}
		}
		if !providerLine {
			t.Fatal("no provider call log line")
		}

		// The retry resumes the released key.
		if res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, `{"amount_minor":1000,"currency":"EUR"}`); res.StatusCode != 201 {
			t.Fatalf("retry: %d %s", res.StatusCode, body)
		}
		wantPoint(t, e.metricsNow(t), idem, outcome(httpapi.OutcomeResumed), 1)
	})

	t.Run("ConflictsAndTakeoversAreCountedByOutcome", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		e.authorizeOK(t, "tel-reuse", 1000)
		res, body := e.post(t, "/v1/payments", m, "tel-reuse", `{"amount_minor":2000,"currency":"EUR"}`)
		wantProblem(t, res, body, 409, "idempotency_key_reused")

		// An owner that holds its lease, then one that crashed holding it.
		const key = "tel-owner"
		ctx := context.Background()
		fp, err := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(`{"amount_minor":1000,"currency":"EUR"}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{TenantID: e.tenant, Operation: orchestrator.OpAuthorize,
			Key: key, Fingerprint: fp}); err != nil {
			t.Fatal(err)
		}
		res, body = e.post(t, "/v1/payments", m, key, `{"amount_minor":1000,"currency":"EUR"}`)
		wantProblem(t, res, body, 409, "idempotency_key_in_use")
		if _, err := e.pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE key = $1`, key); err != nil {
			t.Fatal(err)
		}
		if res, body := e.post(t, "/v1/payments", m, key, `{"amount_minor":1000,"currency":"EUR"}`); res.StatusCode != 201 {
			t.Fatalf("takeover: %d %s", res.StatusCode, body)
		}

		rm := e.metricsNow(t)
		wantPoint(t, rm, idem, outcome(httpapi.OutcomeReused), 1)
		wantPoint(t, rm, idem, outcome(httpapi.OutcomeInUse), 1)
		wantPoint(t, rm, idem, outcome(httpapi.OutcomeTakeover), 1)
		wantPoint(t, rm, idem, authorizeOp, 4) // new, reused, in_use, takeover
		wantPoint(t, rm, "payorch.idempotency.takeovers", authorizeOp, 1)
		wantPoint(t, rm, "payorch.http.requests", map[string]string{"route": "/v1/payments", "status": "409"}, 2)
		if line := e.requestLine(t, key, httpapi.OutcomeInUse); line["code"] != "idempotency_key_in_use" || line["status"] != float64(409) {
			t.Fatalf("in_use request line %v", line)
		}
	})

	t.Run("PurgedKeysAreCounted", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		e.authorizeOK(t, "tel-purge-1", 1000)
		e.authorizeOK(t, "tel-purge-2", 1000)
		if _, err := e.pool.Exec(context.Background(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 hour'`); err != nil {
			t.Fatal(err)
		}
		if n, err := e.svc.PurgeExpiredKeys(context.Background(), 1000); err != nil || n != 2 {
			t.Fatalf("purged %d, %v", n, err)
		}
		wantPoint(t, e.metricsNow(t), "payorch.idempotency.keys_purged", nil, 2)
	})

	t.Run("ReconciliationRunIsASpanAndItsDiscrepanciesAGauge", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		p := e.authorizeOK(t, "tel-rec", 1000)
		if err := e.fake.Drift(context.Background(), fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef,
			Field: fake.AmountAuthorized, AmountMinor: 1100}); err != nil {
			t.Fatal(err)
		}
		today := time.Now().UTC().Format(time.DateOnly)
		res, b := e.post(t, "/v1/reconciliation/runs", e.keys[orchestrator.RoleFinance], "tel-run", `{"provider":"fake","date":"`+today+`"}`)
		if res.StatusCode != 202 {
			t.Fatalf("start run: %d %s", res.StatusCode, b)
		}
		run := e.waitRun(t, decode[runJSON](t, b).ID)
		if run.Status != "succeeded" || run.DiscrepancyCount != 1 {
			t.Fatalf("run %+v", run)
		}
		// The run's span and duration are recorded when the background
		// execution returns, a moment after the run is stored as done.
		testkit.WaitFor(t, 10*time.Second, "the reconciliation run's span", testkit.Until(func() bool {
			return slices.ContainsFunc(e.spans.Ended(), func(s sdktrace.ReadOnlySpan) bool {
				return s.Name() == "reconciliation run" && attrOf(s, "payorch.provider") == "fake" && attrOf(s, "payorch.reconciliation.discrepancy_count") == "1"
			})
		}))
		rm := e.metricsNow(t)
		wantPoint(t, rm, "payorch.reconciliation.discrepancies", map[string]string{"provider": "fake", "category": "amount_mismatch"}, 1)
		wantPoint(t, rm, "payorch.reconciliation.discrepancies", map[string]string{"provider": "fake", "category": "missing_locally"}, 0)
		wantPoint(t, rm, "payorch.reconciliation.run.duration", map[string]string{"provider": "fake", "status": "succeeded"}, 1)
		if ts, _ := point(rm, "payorch.reconciliation.last_success_timestamp", map[string]string{"provider": "fake"}); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
			t.Errorf("last success at %v", time.Unix(int64(ts), 0))
		}
	})

	t.Run("UnknownPathsDoNotBecomeLabels", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		for _, path := range []string{"/v2/nothing/1", "/v2/nothing/2", "/favicon.ico"} {
			res, body := e.do(t, "GET", path, "", nil, nil)
			wantProblem(t, res, body, 404, "not_found")
		}
		rm := e.metricsNow(t)
		n, _ := point(rm, "payorch.http.requests", map[string]string{"status": "404"})
		if n != 3 {
			t.Fatalf("%v requests counted as 404, want 3", n)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "payorch.http.requests" {
					for _, dp := range sum.DataPoints {
						if r, _ := dp.Attributes.Value("route"); strings.Contains(r.Emit(), "nothing") || strings.Contains(r.Emit(), "favicon") {
							t.Fatalf("a raw path became a route label: %v", dp.Attributes)
						}
					}
				}
			}
		}
	})

	t.Run("SecretsNeverLogged", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		p := e.authorizeOK(t, "tel-secret", 1000)
		if res, body := e.post(t, "/v1/payments", m, "tel-secret", `{"amount_minor":1000,"currency":"EUR"}`); res.StatusCode != 201 {
			t.Fatalf("replay: %d %s", res.StatusCode, body)
		}
		if res, body := e.post(t, "/v1/payments/"+p.ID+"/capture", m, "tel-secret-cap", ""); res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, body)
		}
		secret := m[len("pok_")+16+1:] // pok_<16 hex id>_<secret>
		if len(secret) != 43 {
			t.Fatalf("cannot tell the secret of %q", m)
		}
		logs := e.logs.String()
		if !strings.Contains(logs, `"idempotency_key":"tel-secret-cap"`) {
			t.Fatal("the capture was not logged")
		}
		if strings.Contains(logs, secret) {
			t.Fatal("an API key's secret is in the logs")
		}
		for _, s := range e.spans.Ended() {
			for _, kv := range s.Attributes() {
				if strings.Contains(kv.Value.Emit(), secret) {
					t.Fatalf("span %s attribute %s carries the secret", s.Name(), kv.Key)
				}
			}
		}
	})
}

func TestConsolePagesAreLabelledWithTheirRoute(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	p := e.authorizeOK(t, "tel-console", 1000)
	cc := newConsoleClient(t, e.url)
	if res, _ := cc.signIn(e.keys[orchestrator.RoleSupport]); res.Request.URL.Path != "/console/search" {
		t.Fatalf("signed in to %s", res.Request.URL)
	}
	if res, body := cc.get("/console/payments/" + p.ID); res.StatusCode != 200 || !strings.Contains(body, p.ID) {
		t.Fatalf("payment page: %d", res.StatusCode)
	}
	if res, _ := cc.get("/console/no/such/" + p.ID); res.StatusCode != 404 {
		t.Fatalf("unknown console page: %d", res.StatusCode)
	}

	rm := e.metricsNow(t)
	get := func(route, status string) map[string]string {
		return map[string]string{"method": "GET", "route": route, "status": status}
	}
	wantPoint(t, rm, "payorch.http.requests", get("/console/payments/:id", "200"), 1)
	wantPoint(t, rm, "payorch.http.requests", get("/console/signin", "200"), 1)
	wantPoint(t, rm, "payorch.http.requests", get("/console/search", "200"), 1)
	wantPoint(t, rm, "payorch.http.requests", map[string]string{"method": "POST", "route": "/console/signin", "status": "303"}, 1)
	wantPoint(t, rm, "payorch.http.request.duration", map[string]string{"method": "GET", "route": "/console/payments/:id"}, 1)
	// Only the unknown page is unmatched, and no raw path is a label.
	wantPoint(t, rm, "payorch.http.requests", map[string]string{"route": "unmatched"}, 1)
	wantPoint(t, rm, "payorch.http.requests", get("unmatched", "404"), 1)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "payorch.http.requests" {
				for _, dp := range sum.DataPoints {
					if r, _ := dp.Attributes.Value("route"); strings.Contains(r.Emit(), p.ID) || strings.Contains(r.Emit(), "no/such") {
						t.Fatalf("a raw path became a route label: %v", dp.Attributes)
					}
				}
			}
		}
	}

	// The span is named after the template too.
	span := e.span(t, "GET /console/payments/:id")
	if attrOf(span, "http.route") != "/console/payments/:id" || attrOf(span, "url.path") != "/console/payments/"+p.ID ||
		attrOf(span, "http.response.status_code") != "200" {
		t.Fatalf("console span attributes %v", span.Attributes())
	}
	if s := e.span(t, "GET"); attrOf(s, "http.route") != "unmatched" {
		t.Fatalf("unknown console page span attributes %v", s.Attributes())
	}
	mustContain(t, "logs", e.logs.String(), `"route":"/console/payments/:id"`)
}
