package httpapi_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// TestWebhookURLsForStaff: an endpoint URL, often a capability, is whole
// for the merchant that owns it and scheme://host/… for staff, in the
// deliveries, the endpoints, a webhook_endpoint.disabled event and the
// console; support reads deliveries but may not redeliver.
func TestWebhookURLsForStaff(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	merchant, support := e.keys[orchestrator.RoleMerchant], e.keys[orchestrator.RoleSupport]
	finance, admin := e.keys[orchestrator.RoleFinance], e.keys[orchestrator.RoleAdmin]
	const full = "https://hooks.example.com:8443/in/tok_PATHSECRET?sig=QUERYSECRET"
	const redacted = "https://hooks.example.com:8443/…"
	secretFree := func(t *testing.T, what string, body []byte) {
		t.Helper()
		if s := string(body); strings.Contains(s, "PATHSECRET") || strings.Contains(s, "QUERYSECRET") {
			t.Fatalf("%s shows the URL's path or query: %s", what, body)
		}
	}

	res, body := e.post(t, "/v1/webhook_endpoints", merchant, "redact-ep", `{"url":"`+full+`","event_types":["*"]}`)
	ep := decode[struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	}](t, body)
	if res.StatusCode != 201 || ep.URL != full {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	p := e.authorizeOK(t, "redact-pay", 1000)
	evs, _, err := e.svc.ListEvents(ctx, orchestrator.Scope{TenantID: e.tenant},
		orchestrator.EventFilter{PaymentID: p.ID, Type: "payment.authorized"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v %v", evs, err)
	}
	deliveries := "/v1/events/" + evs[0].ID + "/deliveries"
	type delivery struct {
		EndpointURL string `json:"endpoint_url"`
		Status      string `json:"status"`
	}

	t.Run("Deliveries", func(t *testing.T) {
		for key, want := range map[string]string{merchant: full, support: redacted} {
			res, body := e.get(t, deliveries, key)
			ds := decode[listOf[delivery]](t, body).Data
			if res.StatusCode != 200 || len(ds) != 1 || ds[0].EndpointURL != want {
				t.Fatalf("deliveries: %d %s, want endpoint_url %q", res.StatusCode, body, want)
			}
			if key == support {
				secretFree(t, "support's deliveries", body)
			}
		}
	})

	t.Run("SupportMayNotRedeliver", func(t *testing.T) {
		if _, err := e.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now()
			WHERE event_id = $1`, evs[0].ID); err != nil {
			t.Fatal(err)
		}
		res, body := e.post(t, "/v1/events/"+evs[0].ID+"/redeliver", support, "redact-redeliver-support", "")
		wantProblem(t, res, body, 403, "forbidden")
		if n := e.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND status = 'delivered'`, evs[0].ID); n != 1 {
			t.Fatalf("support's refused redelivery reset the delivery (%d delivered)", n)
		}
		res, body = e.post(t, "/v1/events/"+evs[0].ID+"/redeliver", merchant, "redact-redeliver-merchant", "")
		ds := decode[listOf[delivery]](t, body).Data
		if res.StatusCode != 200 || len(ds) != 1 || ds[0].Status != "pending" || ds[0].EndpointURL != full {
			t.Fatalf("merchant redelivers: %d %s", res.StatusCode, body)
		}
	})

	t.Run("StaffEndpoints", func(t *testing.T) {
		const staffFull = "https://finance.example.com/recon/tok_PATHSECRET"
		res, body := e.post(t, "/v1/webhook_endpoints", finance, "redact-staff-ep",
			`{"url":"`+staffFull+`","event_types":["reconciliation.run.completed"]}`)
		sep := decode[struct {
			ID  string `json:"id"`
			URL string `json:"url"`
		}](t, body)
		if res.StatusCode != 201 || sep.URL != staffFull {
			t.Fatalf("finance creates (its URL shown whole, once): %d %s", res.StatusCode, body)
		}
		path := "/v1/webhook_endpoints/" + sep.ID
		for what, do := range map[string]func() ([]byte, int){
			"finance lists": func() ([]byte, int) { res, b := e.get(t, "/v1/webhook_endpoints", finance); return b, res.StatusCode },
			"admin lists":   func() ([]byte, int) { res, b := e.get(t, "/v1/webhook_endpoints", admin); return b, res.StatusCode },
			"finance reads": func() ([]byte, int) { res, b := e.get(t, path, finance); return b, res.StatusCode },
			"admin disables": func() ([]byte, int) {
				res, b := e.post(t, path, admin, "redact-staff-off", `{"enabled":false}`)
				return b, res.StatusCode
			},
			"finance rotates": func() ([]byte, int) {
				res, b := e.post(t, path+"/rotate_secret", finance, "redact-staff-rot", "")
				return b, res.StatusCode
			},
		} {
			body, status := do()
			if status != 200 || !strings.Contains(string(body), `"url":"https://finance.example.com/…"`) {
				t.Fatalf("%s: %d %s", what, status, body)
			}
			secretFree(t, what, body)
		}
		res, body = e.get(t, "/v1/webhook_endpoints/"+ep.ID, merchant)
		if got := decode[struct {
			URL string `json:"url"`
		}](t, body); res.StatusCode != 200 || got.URL != full {
			t.Fatalf("the merchant reads its endpoint: %d %s", res.StatusCode, body)
		}
	})

	// The event of an endpoint disabled carries the endpoint, its URL
	// redacted for every reader but the merchant.
	t.Run("DisabledEvent", func(t *testing.T) {
		var evID string
		if err := e.pool.QueryRow(ctx, `
			INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
			VALUES (event_id_at(now()), $1, 'webhook_endpoint.disabled', NULL, NULL,
				jsonb_build_object('id', $2::text, 'object', 'webhook_endpoint', 'url', $3::text, 'enabled', false), now())
			RETURNING id`, e.tenant, ep.ID, full).Scan(&evID); err != nil {
			t.Fatal(err)
		}
		type event struct {
			Data struct {
				ID  string `json:"id"`
				URL string `json:"url"`
			} `json:"data"`
		}
		for _, c := range []struct {
			who, key, want string
		}{{"merchant", merchant, full}, {"support", support, redacted}, {"finance", finance, redacted}} {
			res, body := e.get(t, "/v1/events/"+evID, c.key)
			if ev := decode[event](t, body); res.StatusCode != 200 || ev.Data.URL != c.want || ev.Data.ID != ep.ID {
				t.Fatalf("%s reads the event: %d %s", c.who, res.StatusCode, body)
			}
			res, body = e.get(t, "/v1/events?type=webhook_endpoint.disabled", c.key)
			if l := decode[listOf[event]](t, body).Data; res.StatusCode != 200 || len(l) != 1 || l[0].Data.URL != c.want {
				t.Fatalf("%s lists the event: %d %s", c.who, res.StatusCode, body)
			}
			if c.key != merchant {
				secretFree(t, c.who+"'s events", body)
			}
		}
	})

	// The console's payment page: the same, rendered on the server.
	t.Run("Console", func(t *testing.T) {
		for _, c := range []struct {
			who, key string
			whole    bool
		}{{"merchant", merchant, true}, {"support", support, false}, {"finance", finance, false}} {
			cc := newConsoleClient(t, e.url)
			if res, page := cc.signIn(c.key); res.StatusCode != 200 {
				t.Fatalf("%s signs in: %d %s", c.who, res.StatusCode, page)
			}
			res, page := cc.get("/console/payments/" + url.PathEscape(p.ID))
			if res.StatusCode != 200 || !strings.Contains(page, ep.ID) {
				t.Fatalf("%s's payment page: %d %s", c.who, res.StatusCode, page)
			}
			hasWhole := strings.Contains(page, "https://hooks.example.com:8443/in/tok_PATHSECRET?sig=QUERYSECRET")
			if hasWhole != c.whole {
				t.Fatalf("%s's payment page shows the URL whole: %v, want %v", c.who, hasWhole, c.whole)
			}
			if !c.whole {
				if !strings.Contains(page, redacted) {
					t.Fatalf("%s's payment page lacks %q", c.who, redacted)
				}
				secretFree(t, c.who+"'s payment page", []byte(page))
			}
		}
	})
}
