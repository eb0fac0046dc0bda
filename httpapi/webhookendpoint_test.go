package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// webhookEndpoint is the API's WebhookEndpoint, as far as tests read it.
type webhookEndpoint struct {
	ID             string  `json:"id"`
	TenantID       *int64  `json:"tenant_id"`
	Enabled        bool    `json:"enabled"`
	DisabledReason *string `json:"disabled_reason"`
	Deleted        bool    `json:"deleted"`
	Secret         string  `json:"secret"`
}

// webhookDelivery is the API's WebhookDelivery, as far as tests read it.
type webhookDelivery struct {
	EventID    string `json:"event_id"`
	EndpointID string `json:"endpoint_id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
}

// listOf is the list envelope.
type listOf[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"has_more"`
}

// get sends a GET as key's holder.
func (e *env) get(t *testing.T, path, key string) (*http.Response, []byte) {
	t.Helper()
	return e.do(t, "GET", path, key, nil, nil)
}

func TestWebhookEndpointsAPI(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	merchant := e.keys[orchestrator.RoleMerchant]
	create := `{"url":"https://example.com/hooks","event_types":["payment.captured","payment.refunded"]}`

	res, b := e.post(t, "/v1/webhook_endpoints", merchant, "wh-1", create)
	if res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, b)
	}
	ep := decode[webhookEndpoint](t, b)
	if !strings.HasPrefix(ep.Secret, "whsec_") || ep.TenantID == nil || *ep.TenantID != e.tenant || !ep.Enabled {
		t.Fatalf("created %s", b)
	}
	path := "/v1/webhook_endpoints/" + ep.ID

	t.Run("TheSecretIsInNoReadNorLog", func(t *testing.T) {
		res, list := e.get(t, "/v1/webhook_endpoints", merchant)
		if res.StatusCode != 200 || len(decode[listOf[webhookEndpoint]](t, list).Data) != 1 {
			t.Fatalf("list: %d %s", res.StatusCode, list)
		}
		res, one := e.get(t, path, merchant)
		if res.StatusCode != 200 || decode[webhookEndpoint](t, one).ID != ep.ID {
			t.Fatalf("get: %d %s", res.StatusCode, one)
		}
		for _, body := range [][]byte{list, one} {
			if bytes.Contains(body, []byte("secret")) || bytes.Contains(body, []byte(ep.Secret)) {
				t.Fatalf("a read shows the secret: %s", body)
			}
		}
		if strings.Contains(e.logs.String(), ep.Secret) {
			t.Fatal("the secret is in the logs")
		}
	})

	t.Run("AReplayOfCreateShowsTheSameSecret", func(t *testing.T) {
		res, again := e.post(t, "/v1/webhook_endpoints", merchant, "wh-1", create)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again, b) {
			t.Fatalf("replay: %d %v %s", res.StatusCode, res.Header, again)
		}
		if n := e.count(t, `SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1`, e.tenant); n != 1 {
			t.Fatalf("%d endpoints after a replay", n)
		}
	})

	t.Run("StaffManageOnlyStaffEndpoints", func(t *testing.T) {
		support := e.keys[orchestrator.RoleSupport]
		res, body := e.post(t, "/v1/webhook_endpoints", support, "wh-support", create)
		wantProblem(t, res, body, 403, "forbidden")
		res, body = e.get(t, "/v1/webhook_endpoints", support)
		wantProblem(t, res, body, 403, "forbidden")
		res, body = e.get(t, path, support)
		wantProblem(t, res, body, 403, "forbidden")

		staffCreate := `{"url":"https://example.com/finance","event_types":["reconciliation.run.completed"]}`
		for _, role := range []orchestrator.Role{orchestrator.RoleFinance, orchestrator.RoleAdmin} {
			key := e.keys[role]
			// Payment events are no staff endpoint's.
			res, body := e.post(t, "/v1/webhook_endpoints", key, "wh-staff-"+string(role), create)
			if p := wantProblem(t, res, body, 400, "validation_failed"); p.Param != "event_types[0]" {
				t.Fatalf("%s subscribes to payment events: param %q", role, p.Param)
			}
			// A merchant's endpoint is not staff's.
			res, body = e.get(t, path, key)
			wantProblem(t, res, body, 404, "not_found")
			res, body = e.post(t, path, key, "wh-off-"+string(role), `{"enabled":false}`)
			wantProblem(t, res, body, 404, "not_found")
			res, body = e.post(t, path+"/rotate_secret", key, "wh-rot-"+string(role), "")
			wantProblem(t, res, body, 404, "not_found")
			res, body = e.do(t, "DELETE", path, key, nil, nil)
			wantProblem(t, res, body, 404, "not_found")
			res, body = e.get(t, "/v1/webhook_endpoints", key)
			for _, got := range decode[listOf[webhookEndpoint]](t, body).Data {
				if res.StatusCode != 200 || got.TenantID != nil {
					t.Fatalf("%s lists %d %s", role, res.StatusCode, body)
				}
			}
		}
		finance := e.keys[orchestrator.RoleFinance]
		res, body = e.post(t, "/v1/webhook_endpoints", finance, "wh-finance", staffCreate)
		staffEP := decode[webhookEndpoint](t, body)
		if res.StatusCode != 201 || staffEP.TenantID != nil || !strings.HasPrefix(staffEP.Secret, "whsec_") {
			t.Fatalf("finance creates: %d %s", res.StatusCode, body)
		}
		res, body = e.get(t, "/v1/webhook_endpoints", e.keys[orchestrator.RoleAdmin])
		if l := decode[listOf[webhookEndpoint]](t, body).Data; res.StatusCode != 200 || len(l) != 1 || l[0].ID != staffEP.ID {
			t.Fatalf("admin lists %d %s", res.StatusCode, body)
		}
		// A merchant neither sees it nor subscribes to staff events.
		res, body = e.get(t, "/v1/webhook_endpoints/"+staffEP.ID, merchant)
		wantProblem(t, res, body, 404, "not_found")
		res, body = e.post(t, "/v1/webhook_endpoints", merchant, "wh-m-rec", staffCreate)
		if p := wantProblem(t, res, body, 400, "validation_failed"); p.Param != "event_types[0]" {
			t.Fatalf("a merchant subscribes to reconciliation events: param %q", p.Param)
		}

		// A run that finishes writes a staff event: finance reads it, a
		// merchant and support get a 404, and it is delivered to the
		// staff endpoint.
		var runID int64
		if err := e.pool.QueryRow(ctx, `
			INSERT INTO reconciliation_runs (provider, business_date, version, trigger, time_zone, window_start,
				window_end, grace_seconds, started_at)
			VALUES ('fake', '2026-01-01', 1, 'api', 'UTC', '2026-01-01', '2026-01-02', 0, now()) RETURNING id`).Scan(&runID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE reconciliation_runs SET status = 'succeeded', finished_at = now(),
			local_count = 3 WHERE id = $1`, runID); err != nil {
			t.Fatal(err)
		}
		res, body = e.get(t, "/v1/events?type=reconciliation.run.completed", finance)
		evs := decode[listOf[struct {
			ID       string `json:"id"`
			TenantID *int64 `json:"tenant_id"`
			Data     struct {
				ID         int64 `json:"id"`
				LocalCount int64 `json:"local_count"`
			} `json:"data"`
		}]](t, body).Data
		if res.StatusCode != 200 || len(evs) != 1 || evs[0].TenantID != nil || evs[0].Data.ID != runID || evs[0].Data.LocalCount != 3 {
			t.Fatalf("finance lists %d %s", res.StatusCode, body)
		}
		evPath := "/v1/events/" + evs[0].ID
		if res, body := e.get(t, evPath, finance); res.StatusCode != 200 {
			t.Fatalf("finance reads %d %s", res.StatusCode, body)
		}
		for _, key := range []string{merchant, support} {
			res, body := e.get(t, evPath, key)
			wantProblem(t, res, body, 404, "not_found")
			res, body = e.get(t, "/v1/events?type=reconciliation.run.completed", key)
			if res.StatusCode != 200 || len(decode[listOf[webhookEndpoint]](t, body).Data) != 0 {
				t.Fatalf("lists a staff event: %d %s", res.StatusCode, body)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2`, evs[0].ID, staffEP.ID); n != 1 {
			t.Fatalf("%d deliveries to the staff endpoint", n)
		}
		if n := e.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, evs[0].ID); n != 1 {
			t.Fatalf("%d deliveries of the staff event", n)
		}
	})

	t.Run("AMerchantSeesOnlyItsOwn", func(t *testing.T) {
		_, _, otherKey, err := e.svc.CreateTenant(ctx, "Other")
		if err != nil {
			t.Fatal(err)
		}
		res, body := e.get(t, "/v1/webhook_endpoints", otherKey)
		if res.StatusCode != 200 || len(decode[listOf[webhookEndpoint]](t, body).Data) != 0 {
			t.Fatalf("other tenant's list: %d %s", res.StatusCode, body)
		}
		res, body = e.get(t, path, otherKey)
		wantProblem(t, res, body, 404, "not_found")
		res, body = e.post(t, path, otherKey, "wh-o-1", `{"enabled":false}`)
		wantProblem(t, res, body, 404, "not_found")
		res, body = e.post(t, path+"/rotate_secret", otherKey, "wh-o-2", "")
		wantProblem(t, res, body, 404, "not_found")
		res, body = e.do(t, "DELETE", path, otherKey, nil, nil)
		wantProblem(t, res, body, 404, "not_found")

		// The endpoint's deliveries too.
		p := e.authorizeOK(t, "wh-pay", 1000)
		if res, body := e.post(t, "/v1/payments/"+p.ID+"/capture", merchant, "wh-cap", ""); res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, body)
		}
		evs, _, err := e.svc.ListEvents(ctx, orchestrator.Scope{TenantID: e.tenant},
			orchestrator.EventFilter{PaymentID: p.ID, Type: "payment.captured"})
		if err != nil || len(evs) != 1 {
			t.Fatalf("events %v %v", evs, err)
		}
		deliveries := "/v1/events/" + evs[0].ID + "/deliveries"
		res, body = e.get(t, deliveries, otherKey)
		wantProblem(t, res, body, 404, "not_found")
		res, body = e.post(t, "/v1/events/"+evs[0].ID+"/redeliver", otherKey, "wh-o-3", "")
		wantProblem(t, res, body, 404, "not_found")
		for _, key := range []string{merchant, e.keys[orchestrator.RoleSupport]} {
			res, body = e.get(t, deliveries, key)
			ds := decode[listOf[webhookDelivery]](t, body)
			if res.StatusCode != 200 || len(ds.Data) != 1 || ds.Data[0].EndpointID != ep.ID || ds.Data[0].Status != "pending" {
				t.Fatalf("deliveries: %d %s", res.StatusCode, body)
			}
		}
		// Finance reads the staff events' deliveries, not a merchant's.
		res, body = e.get(t, deliveries, e.keys[orchestrator.RoleFinance])
		wantProblem(t, res, body, 404, "not_found")
	})

	t.Run("Refusals", func(t *testing.T) {
		for name, c := range map[string]struct{ body, param string }{
			"Private":       {`{"url":"https://10.0.0.1/hooks","event_types":["*"]}`, "url"},
			"HTTP":          {`{"url":"http://example.com/hooks","event_types":["*"]}`, "url"},
			"NoTypes":       {`{"url":"https://example.com/hooks","event_types":[]}`, "event_types"},
			"UnknownType":   {`{"url":"https://example.com/hooks","event_types":["*","payment.exploded"]}`, "event_types[1]"},
			"UnknownField":  {`{"url":"https://example.com/hooks","event_types":["*"],"secret":"mine"}`, "secret"},
			"NotAString":    {`{"url":"https://example.com/hooks","event_types":["*"],"description":1}`, "description"},
			"UpdateNothing": {`{}`, "enabled"},
		} {
			target := "/v1/webhook_endpoints"
			if name == "UpdateNothing" {
				target = path
			}
			res, body := e.post(t, target, merchant, "wh-bad-"+name, c.body)
			if p := wantProblem(t, res, body, 400, "validation_failed"); p.Param != c.param {
				t.Fatalf("%s: param %q, want %q", name, p.Param, c.param)
			}
		}
		res, body := e.do(t, "DELETE", path+"?force=1", merchant, nil, nil)
		if p := wantProblem(t, res, body, 400, "validation_failed"); p.Param != "force" {
			t.Fatalf("DELETE with a query: param %q", p.Param)
		}
		if n := e.count(t, `SELECT count(*) FROM idempotency_keys WHERE key LIKE 'wh-bad-%'`); n != 0 {
			t.Fatalf("%d keys claimed by refused requests", n)
		}
		for i := 1; i < webhooks.MaxWebhookEndpoints; i++ {
			if res, body := e.post(t, "/v1/webhook_endpoints", merchant, fmt.Sprintf("wh-many-%d", i), create); res.StatusCode != 201 {
				t.Fatalf("endpoint %d: %d %s", i+1, res.StatusCode, body)
			}
		}
		res, body = e.post(t, "/v1/webhook_endpoints", merchant, "wh-21", create)
		wantProblem(t, res, body, 409, "conflict")
	})

	t.Run("DisableRotateDelete", func(t *testing.T) {
		res, body := e.post(t, path, merchant, "wh-off", `{"enabled":false}`)
		if got := decode[webhookEndpoint](t, body); res.StatusCode != 200 || got.Enabled || got.DisabledReason == nil || got.Secret != "" {
			t.Fatalf("disable: %d %s", res.StatusCode, body)
		}
		res, body = e.post(t, path+"/rotate_secret", merchant, "wh-rot", "")
		if got := decode[webhookEndpoint](t, body); res.StatusCode != 200 || got.Secret == "" || got.Secret == ep.Secret {
			t.Fatalf("rotate: %d %s", res.StatusCode, body)
		}
		res, body = e.do(t, "DELETE", path, merchant, nil, nil)
		if got := decode[webhookEndpoint](t, body); res.StatusCode != 200 || !got.Deleted || got.Secret != "" {
			t.Fatalf("delete: %d %s", res.StatusCode, body)
		}
		res, body = e.get(t, path, merchant)
		wantProblem(t, res, body, 404, "not_found")
	})
}
