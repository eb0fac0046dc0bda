package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// TestConsolePaymentWebhooksInBrowser: support sees, on a payment's page,
// each of its events with its deliveries: the endpoint (its URL without
// path), the delivery's status, its attempts and the last status code.
func TestConsolePaymentWebhooksInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	ep, err := e.hooks.CreateWebhookEndpoint(ctx, e.tenant, webhooks.WebhookEndpointInput{
		URL: "https://merchant.example/payorch-hooks", EventTypes: []string{"payment.authorized"}}, "key_console")
	if err != nil {
		t.Fatal(err)
	}
	p := e.authorizeOK(t, "console-webhooks-1", 1000)
	evs, _, err := e.svc.ListEvents(ctx, orchestrator.Scope{TenantID: e.tenant},
		orchestrator.EventFilter{PaymentID: p.ID, Type: "payment.authorized"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v %v", evs, err)
	}
	// Two failed attempts, as the delivery worker records them.
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO webhook_delivery_attempts (event_id, endpoint_id, attempt, started_at, latency_ms, status_code, error, response_excerpt)
		VALUES ($1, $2, 1, $3, 40, NULL, 'connection refused', NULL), ($1, $2, 2, $3, 25, 503, NULL, 'busy')`,
		evs[0].ID, ep.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE webhook_deliveries SET attempts = 2 WHERE event_id = $1`, evs[0].ID); err != nil {
		t.Fatal(err)
	}

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.do(t, "sign in",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(css(`#api_key`)),
		chromedp.SendKeys(css(`#api_key`), e.keys[orchestrator.RoleSupport]),
		chromedp.Click(css(`#signin button`)),
		chromedp.WaitVisible(css(`#signout`)),
	)
	b.do(t, "payment",
		chromedp.Navigate(e.url+"/console/payments/"+p.ID),
		chromedp.WaitVisible(css(`#deliveries`)),
	)
	b.screenshot(t, "webhooks-payment")
	table := b.text(t, `#deliveries`)
	// Support sees the endpoint's scheme and host, not its path (often a
	// capability): that is the merchant's.
	mustContain(t, "deliveries", table, evs[0].ID, "payment.authorized", ep.ID, "https://merchant.example/…",
		"pending", "503", "payment.pending", "No endpoint wanted this event.")
	if strings.Contains(table, "payorch-hooks") {
		t.Fatalf("support sees the endpoint's path: %q", table)
	}
	if row := b.text(t, `#deliveries tbody tr:nth-child(2)`); !containsAll(row, "payment.authorized", "pending", "2", "503") {
		t.Fatalf("the authorized event's row: %q", row)
	}
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
