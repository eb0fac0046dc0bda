package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/orchestrator/webhooksig"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// eventsEnv drives the flows that emit every type of event, through the
// API, and checks each event's data against its object.
type eventsEnv struct {
	*contract
	doc     *openapi3.T
	covered map[string]bool
}

// apiEvent is an event as the API answers it.
type apiEvent struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// latest is the newest event of type typ that key sees (of payment
// paymentID, when given).
func (ev *eventsEnv) latest(t *testing.T, key, typ, paymentID string) apiEvent {
	t.Helper()
	q := url.Values{"type": {typ}, "limit": {"1"}}
	if paymentID != "" {
		q.Set("payment_id", paymentID)
	}
	res, b := ev.do(t, call{method: "GET", path: "/v1/events?" + q.Encode(), apiKey: key})
	wantStatus(t, res, b, 200)
	list := decode[struct{ Data []apiEvent }](t, b)
	if len(list.Data) != 1 {
		t.Fatalf("no %s event (payment %q): %s", typ, paymentID, b)
	}
	return list.Data[0]
}

// get answers GET path for key, which must be 200.
func (ev *eventsEnv) get(t *testing.T, key, path string) []byte {
	t.Helper()
	res, b := ev.do(t, call{method: "GET", path: path, apiKey: key})
	wantStatus(t, res, b, 200)
	return b
}

// schemaOf names the document's schema of the data of an event of type
// typ.
func schemaOf(typ string) string {
	kind, _, _ := strings.Cut(typ, ".")
	switch {
	case typ == "payment.disputed":
		return "Dispute"
	case kind == "payment":
		return "Payment"
	case kind == "capture" || kind == "cancel" || kind == "refund" || kind == "increment":
		return strings.ToUpper(kind[:1]) + kind[1:]
	case typ == "webhook_endpoint.disabled":
		return "WebhookEndpoint"
	case kind == "reconciliation":
		return "ReconciliationRun"
	}
	return ""
}

// check holds the newest event of type typ (seen with key, of payment
// paymentID if given) to its object: its data validates against the
// object's schema, has its times in UTC written as the API writes them,
// every field of it is in the stored object (no field left to a zero
// value), and, when want is given (the object as the API answers it at
// that version), it is that JSON.
func (ev *eventsEnv) check(t *testing.T, key, typ, paymentID string, want []byte) apiEvent {
	t.Helper()
	e := ev.latest(t, key, typ, paymentID)
	ev.covered[typ] = true
	var data any
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatal(err)
	}
	schema := ev.doc.Components.Schemas[schemaOf(typ)]
	if schema == nil {
		t.Fatalf("%s: no schema %s", typ, schemaOf(typ))
	}
	if err := schema.Value.VisitJSON(data); err != nil {
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			err = fmt.Errorf("at /%s: %s", strings.Join(se.JSONPointer(), "/"), se.Reason)
		}
		t.Errorf("%s: data is not a %s: %v\n%s", typ, schemaOf(typ), err, e.Data)
	}
	for k, v := range data.(map[string]any) {
		if s, ok := v.(string); ok {
			if _, err := time.Parse(time.RFC3339Nano, s); err == nil && !strings.HasSuffix(s, "Z") {
				t.Errorf("%s: %s is %q, not UTC as the API writes times", typ, k, s)
			}
		}
	}
	var stored map[string]any
	if err := ev.pool.QueryRow(context.Background(), `SELECT object FROM events WHERE id = $1`, e.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	for k := range data.(map[string]any) {
		if _, ok := stored[k]; !ok {
			t.Errorf("%s: the stored object lacks %q (its writer does not write it)", typ, k)
		}
	}
	if want != nil && canonical(t, e.Data) != canonical(t, want) {
		t.Errorf("%s: data differs from the API's object\n event %s\n API   %s", typ, canonical(t, e.Data), canonical(t, want))
	}
	return e
}

// canonical is b with its keys in order.
func canonical(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// receiver is a merchant's webhook endpoint: the bodies it received, by
// event id.
type receiver struct {
	mu     sync.Mutex
	bodies map[string][]byte
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies[req.Header.Get(webhooksig.EventIDHeader)] = b
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// TestEventsAreTheAPIObjects drives, through the API, the flows that emit
// every type of event, and holds each event's data to the API's object:
// the document's schema of it, and byte for byte (keys in order) the
// object as the API answers it at that version (GET right after the
// change, or the refund's answer). Then every event of the tenant, as its
// webhook endpoint received it, is the event as GET /v1/events/{id}
// answers it.
func TestEventsAreTheAPIObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secondSecret = "whsec_second"
	fr, err := fake.Start("127.0.0.1:0", fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	// second: a connector to fail over to, which takes webhooks; down: a
	// connector whose reconciliation fails (nothing listens there).
	e := newMigratedEnvWith(t, httpapi.Config{MetricsHandler: metricsStub}, orchestrator.Config{
		Providers: map[string]providers.Provider{
			"second": fr.Client(&http.Client{}).WithWebhookSecret(secondSecret),
			"down":   fake.NewClient("http://127.0.0.1:9", nil)},
		HoldExpiringLead: 30 * 24 * time.Hour}, webhooks.Config{AllowPrivate: true})
	ev := &eventsEnv{contract: contractOn(t, e), doc: loadOpenAPI(t), covered: map[string]bool{}}
	merchant, finance := e.keys[orchestrator.RoleMerchant], e.keys[orchestrator.RoleFinance]
	post := func(t *testing.T, path, key, idem, body string, status int) []byte {
		t.Helper()
		res, b := ev.do(t, call{method: "POST", path: path, apiKey: key, idemKey: idem, body: body})
		wantStatus(t, res, b, status)
		return b
	}
	authorize := func(t *testing.T, idem, body string) payment {
		t.Helper()
		return decode[payment](t, post(t, "/v1/payments", merchant, idem, body, 201))
	}
	payPath := func(id string) string { return "/v1/payments/" + id }

	rcv := &receiver{bodies: map[string][]byte{}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	hookEP := decode[webhookEndpoint](t, post(t, "/v1/webhook_endpoints", merchant, "ep-1",
		`{"url":"`+hook.URL+`/hooks","event_types":["*"]}`, 201))

	// An extended hold: authorized, warned, extended, captured, refunded
	// in two.
	p1 := authorize(t, "p1", `{"amount_minor":1000,"currency":"EUR","description":"order 1","metadata":{"order":"1"},`+
		`"request_extended_authorization":true}`)
	ev.check(t, merchant, "payment.pending", p1.ID, nil)
	ev.check(t, merchant, "payment.authorized", p1.ID, ev.get(t, merchant, payPath(p1.ID)))
	if _, err := e.svc.SweepHolds(ctx); err != nil {
		t.Fatal(err)
	}
	ev.check(t, merchant, "payment.hold_expiring", p1.ID, ev.get(t, merchant, payPath(p1.ID)))
	post(t, payPath(p1.ID)+"/extend", merchant, "p1-x", `{}`, 200)
	ev.check(t, merchant, "payment.hold_extended", p1.ID, ev.get(t, merchant, payPath(p1.ID)))
	post(t, payPath(p1.ID)+"/capture", merchant, "p1-c", `{"amount_minor":600}`, 200)
	ev.check(t, merchant, "payment.captured", p1.ID, ev.get(t, merchant, payPath(p1.ID)))
	ev.check(t, merchant, "capture.succeeded", p1.ID, nil)
	refund := post(t, payPath(p1.ID)+"/refunds", merchant, "p1-r1", `{"amount_minor":100}`, 201)
	ev.check(t, merchant, "refund.succeeded", p1.ID, refund)
	ev.check(t, merchant, "payment.partially_refunded", p1.ID, ev.get(t, merchant, payPath(p1.ID)))
	refund = post(t, payPath(p1.ID)+"/refunds", merchant, "p1-r2", `{}`, 201)
	ev.check(t, merchant, "refund.succeeded", p1.ID, refund)
	ev.check(t, merchant, "payment.refunded", p1.ID, ev.get(t, merchant, payPath(p1.ID)))

	// Canceled; declined.
	p2 := authorize(t, "p2", `{"amount_minor":500,"currency":"EUR"}`)
	post(t, payPath(p2.ID)+"/cancel", merchant, "p2-x", `{}`, 200)
	ev.check(t, merchant, "payment.canceled", p2.ID, ev.get(t, merchant, payPath(p2.ID)))
	ev.check(t, merchant, "cancel.succeeded", p2.ID, nil)
	res, b := ev.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "p3",
		body: `{"amount_minor":500,"currency":"EUR","payment_method":"pm_card_chargeDeclined"}`})
	wantProblem(t, res, b, 402, "payment_declined")
	declined := decode[struct{ Data []payment }](t, ev.get(t, merchant, "/v1/payments?idempotency_key=p3"))
	if len(declined.Data) != 1 {
		t.Fatalf("declined payment not found")
	}
	ev.check(t, merchant, "payment.failed", declined.Data[0].ID, ev.get(t, merchant, payPath(declined.Data[0].ID)))

	// The provider refuses a capture (the hold was canceled behind our
	// back), a cancel (captured behind our back) and a refund (refunded
	// behind our back).
	p4 := authorize(t, "p4", `{"amount_minor":500,"currency":"EUR"}`)
	if _, err := e.fake.Cancel(ctx, providers.CancelRequest{Key: "behind-4", Ref: *p4.ProviderRef}); err != nil {
		t.Fatal(err)
	}
	res, b = ev.do(t, call{method: "POST", path: payPath(p4.ID) + "/capture", apiKey: merchant, idemKey: "p4-c", body: `{}`})
	wantProblem(t, res, b, 409, "payment_state_conflict")
	ev.check(t, merchant, "capture.failed", p4.ID, nil)
	p5 := authorize(t, "p5", `{"amount_minor":500,"currency":"EUR"}`)
	if _, err := e.fake.Capture(ctx, providers.CaptureRequest{Key: "behind-5", Ref: *p5.ProviderRef}); err != nil {
		t.Fatal(err)
	}
	res, b = ev.do(t, call{method: "POST", path: payPath(p5.ID) + "/cancel", apiKey: merchant, idemKey: "p5-x", body: `{}`})
	wantProblem(t, res, b, 409, "payment_state_conflict")
	ev.check(t, merchant, "cancel.failed", p5.ID, nil)
	p6 := authorize(t, "p6", `{"amount_minor":1000,"currency":"EUR"}`)
	post(t, payPath(p6.ID)+"/capture", merchant, "p6-c", `{}`, 200)
	if _, err := e.fake.Refund(ctx, providers.RefundRequest{Key: "behind-6", Ref: *p6.ProviderRef, AmountMinor: 900}); err != nil {
		t.Fatal(err)
	}
	res, b = ev.do(t, call{method: "POST", path: payPath(p6.ID) + "/refunds", apiKey: merchant, idemKey: "p6-r",
		body: `{"amount_minor":300}`})
	if res.StatusCode < 400 {
		t.Fatalf("refund beyond what the provider holds: %d %s", res.StatusCode, b)
	}
	ev.check(t, merchant, "refund.failed", p6.ID, nil)

	// A hold past its deadline: capturing it expires it.
	p7 := authorize(t, "p7", `{"amount_minor":500,"currency":"EUR"}`)
	if _, err := e.pool.Exec(ctx, `UPDATE payments SET capture_before = now() - interval '1 minute'
		WHERE tenant_id = $1 AND id = $2`, e.tenant, p7.ID); err != nil {
		t.Fatal(err)
	}
	res, b = ev.do(t, call{method: "POST", path: payPath(p7.ID) + "/capture", apiKey: merchant, idemKey: "p7-c", body: `{}`})
	wantProblem(t, res, b, 409, "payment_state_conflict")
	ev.check(t, merchant, "payment.expired", p7.ID, ev.get(t, merchant, payPath(p7.ID)))

	// A failover to second, then a dispute second reports.
	res, b = ev.do(t, call{method: "PUT", path: fmt.Sprintf("/v1/tenants/%d/routing", e.tenant), apiKey: e.keys[orchestrator.RoleAdmin],
		body: `{"rules":[{"name":"failover","match":{"metadata":{"route":"failover"}},"connectors":{"strategy":"priority",` +
			`"connectors":[{"name":"fake"},{"name":"second"}]}}],"default":{"strategy":"priority","connectors":[{"name":"fake"}]}}`})
	wantStatus(t, res, b, 200)
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute,
		IdempotencyKey: orchestrator.AttemptKey(e.tenant, "p8", 1)}); err != nil {
		t.Fatal(err)
	}
	p8b := post(t, "/v1/payments", merchant, "p8", `{"amount_minor":800,"currency":"EUR","metadata":{"route":"failover"}}`, 201)
	p8 := decode[payment](t, p8b)
	if held := decode[struct{ Provider string }](t, p8b); held.Provider != "second" {
		t.Fatalf("failover: %s", p8b)
	}
	ev.check(t, merchant, "payment.attempt_started", p8.ID, nil)
	ev.check(t, merchant, "payment.authorized", p8.ID, ev.get(t, merchant, payPath(p8.ID)))
	post(t, payPath(p8.ID)+"/capture", merchant, "p8-c", `{}`, 200)
	dispute := fmt.Sprintf(`{"id":"fevt_dispute_p8","object":"event","type":"dispute.created","created_at":%q,`+
		`"data":{"hold_ref":%q,"object_id":"dp_p8","amount_minor":800,"currency":"EUR","reason":"fraudulent"}}`,
		time.Now().UTC().Format(time.RFC3339), *p8.ProviderRef)
	res, b = ev.do(t, call{method: "POST", path: "/webhooks/second", body: dispute,
		hdr: map[string]string{fake.SignatureHeader: providers.SignWebhook(secondSecret, time.Now(), []byte(dispute))}})
	wantStatus(t, res, b, 200)
	ev.check(t, merchant, "payment.disputed", p8.ID, nil)

	// A 3-D Secure challenge, completed by the shopper and confirmed.
	p9 := authorize(t, "p9", `{"amount_minor":900,"currency":"EUR","payment_method":"pm_card_threeDSecure2Required",`+
		`"return_url":"https://shop.example/back"}`)
	ev.check(t, merchant, "payment.requires_action", p9.ID, ev.get(t, merchant, payPath(p9.ID)))
	if _, err := e.fake.Authenticate(ctx, *p9.ProviderRef, true); err != nil {
		t.Fatal(err)
	}
	post(t, payPath(p9.ID)+"/confirm", merchant, "p9-c", `{}`, 200)
	ev.check(t, merchant, "payment.authorized", p9.ID, ev.get(t, merchant, payPath(p9.ID)))

	// A flexible hold: raised, an increment declined, captured in a part
	// and then the rest.
	p10 := authorize(t, "p10", `{"amount_minor":1000,"currency":"EUR","request_incremental_authorization":true,`+
		`"request_multicapture":true}`)
	inc := post(t, payPath(p10.ID)+"/increment", merchant, "p10-i", `{"amount_minor":1400}`, 200)
	ev.check(t, merchant, "payment.amount_increased", p10.ID, inc)
	ev.check(t, merchant, "increment.succeeded", p10.ID, nil)
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultDecline,
		IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpIncrement, "p10-d")}); err != nil {
		t.Fatal(err)
	}
	res, b = ev.do(t, call{method: "POST", path: payPath(p10.ID) + "/increment", apiKey: merchant, idemKey: "p10-d",
		body: `{"increase_minor":100}`})
	wantProblem(t, res, b, 402, "payment_declined")
	ev.check(t, merchant, "increment.failed", p10.ID, nil)
	post(t, payPath(p10.ID)+"/capture", merchant, "p10-c1", `{"amount_minor":400,"final_capture":false}`, 200)
	post(t, payPath(p10.ID)+"/capture", merchant, "p10-c2", `{}`, 200)
	ev.check(t, merchant, "payment.captured", p10.ID, ev.get(t, merchant, payPath(p10.ID)))

	// An endpoint failing for 3 days is disabled.
	failing := decode[webhookEndpoint](t, post(t, "/v1/webhook_endpoints", merchant, "ep-2",
		`{"url":"http://127.0.0.1:9/hooks","event_types":["payment.captured"]}`, 201))
	if _, err := e.pool.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '73 hours' WHERE id = $1`,
		failing.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.hooks.DeliverWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	ev.check(t, merchant, "webhook_endpoint.disabled", "", ev.get(t, merchant, "/v1/webhook_endpoints/"+failing.ID))

	// Reconciliation runs, completed and failed: staff events.
	for _, c := range []struct{ provider, typ string }{
		{"fake", "reconciliation.run.completed"}, {"down", "reconciliation.run.failed"},
	} {
		body := `{"provider":"` + c.provider + `","date":"` + time.Now().UTC().Format(time.DateOnly) + `"}`
		run := decode[runJSON](t, post(t, "/v1/reconciliation/runs", finance, "run-"+c.provider, body, 202))
		runPath := fmt.Sprintf("/v1/reconciliation/runs/%d", run.ID)
		var got []byte
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("run %d to finish", run.ID), testkit.Until(func() bool {
			got = ev.get(t, finance, runPath)
			return decode[runJSON](t, got).Status != "running"
		}))
		ev.check(t, finance, c.typ, "", got)
	}

	for _, typ := range orchestrator.EventTypes {
		if !ev.covered[typ] {
			t.Errorf("no flow emitted a %s event", typ)
		}
	}

	// Every event of the tenant reached the endpoint as GET
	// /v1/events/{id} answers it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := e.hooks.DeliverWebhooks(ctx); err != nil {
			t.Fatal(err)
		}
		var pending int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status <> 'delivered'`,
			hookEP.ID).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries to the endpoint not delivered", pending)
		}
	}
	rows, err := e.pool.Query(ctx, `SELECT event_id FROM webhook_deliveries WHERE endpoint_id = $1`, hookEP.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1`, e.tenant).Scan(&n); err != nil || n != len(ids) {
		t.Fatalf("%d events of the tenant (%v), %d delivered to its endpoint", n, err, len(ids))
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, id := range ids {
		got := bytes.TrimSpace(rcv.bodies[id])
		want := bytes.TrimSpace(ev.get(t, merchant, "/v1/events/"+id))
		if !bytes.Equal(got, want) {
			t.Errorf("event %s:\n webhook %s\n GET     %s", id, got, want)
		}
	}
}
