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
)

// webhookEndpoint is the API's WebhookEndpoint, as far as tests read it.
type webhookEndpoint struct {
	ID             string  `json:"id"`
	TenantID       int64   `json:"tenant_id"`
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
	if !strings.HasPrefix(ep.Secret, "whsec_") || ep.TenantID != e.tenant || !ep.Enabled {
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

	t.Run("OnlyMerchantsManageEndpoints", func(t *testing.T) {
		for _, role := range []orchestrator.Role{orchestrator.RoleSupport, orchestrator.RoleFinance, orchestrator.RoleAdmin} {
			key := e.keys[role]
			res, body := e.post(t, "/v1/webhook_endpoints", key, "wh-staff-"+string(role), create)
			wantProblem(t, res, body, 403, "forbidden")
			res, body = e.get(t, "/v1/webhook_endpoints", key)
			wantProblem(t, res, body, 403, "forbidden")
			res, body = e.get(t, path, key)
			wantProblem(t, res, body, 403, "forbidden")
			res, body = e.post(t, path+"/rotate_secret", key, "wh-rot-"+string(role), "")
			wantProblem(t, res, body, 403, "forbidden")
			res, body = e.do(t, "DELETE", path, key, nil, nil)
			wantProblem(t, res, body, 403, "forbidden")
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
		res, body = e.get(t, deliveries, e.keys[orchestrator.RoleFinance])
		wantProblem(t, res, body, 403, "forbidden")
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
		for i := 1; i < orchestrator.MaxWebhookEndpoints; i++ {
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
