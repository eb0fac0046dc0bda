package httpapi_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// challenged is a payment answered with a 3-D Secure challenge.
type challenged struct {
	ID          string  `json:"id"`
	Status      string  `json:"status"`
	ProviderRef *string `json:"provider_ref"`
	NextAction  *struct {
		URL string `json:"url"`
	} `json:"next_action"`
}

// challenge authorizes amount EUR under idemKey with the fake's
// always-challenged test method and returns the requires_action payment.
func (e *env) challenge(t *testing.T, idemKey, amount string) challenged {
	t.Helper()
	res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], idemKey,
		`{"amount_minor":`+amount+`,"currency":"EUR","payment_method":"pm_card_threeDSecure2Required",`+
			`"return_url":"https://shop.example/back?order=`+idemKey+`"}`)
	p := decode[challenged](t, body)
	if res.StatusCode != 201 || p.Status != "requires_action" || p.NextAction == nil || p.ProviderRef == nil {
		t.Fatalf("authorize %s: %d %s", idemKey, res.StatusCode, body)
	}
	if u, err := url.Parse(p.NextAction.URL); err != nil || u.Query().Get("token") == "" {
		t.Fatalf("challenge URL %q carries no token", p.NextAction.URL)
	}
	return p
}

// authenticate completes or fails p's challenge at the fake, then has the
// merchant confirm it on the shopper's return.
func (e *env) authenticate(t *testing.T, p challenged, complete bool, wantStatus int) {
	t.Helper()
	if _, err := e.fake.Authenticate(context.Background(), *p.ProviderRef, complete); err != nil {
		t.Fatal(err)
	}
	res, body := e.post(t, "/v1/payments/"+p.ID+"/confirm", e.keys[orchestrator.RoleMerchant], p.ID+"-confirm", `{}`)
	if res.StatusCode != wantStatus {
		t.Fatalf("confirm %s: %d %s, want %d", p.ID, res.StatusCode, body, wantStatus)
	}
}

// Support sees the payments waiting for their shopper, oldest first, with
// how long they have waited and when they are abandoned; a payment's page
// shows its challenge's steps and who found how it ended: the merchant's
// confirm for a completed and a failed challenge, the hold sweeper for an
// abandoned one. The challenge page's URL, which carries a secret token,
// is never printed.
func TestConsoleAuthenticationInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	// One clock for the service and the console: challenges are issued in
	// the past by moving it back, and ages are read at a fixed now.
	clock, advance := stoppedClock()
	e := newMigratedEnv(t, httpapi.Config{Clock: clock}, orchestrator.Config{Clock: clock})
	advance(-40 * time.Minute)
	abandoned := e.challenge(t, "3ds-abandoned", "1100")
	advance(20 * time.Minute)
	completed := e.challenge(t, "3ds-completed", "1200")
	failed := e.challenge(t, "3ds-failed", "1300")
	advance(8 * time.Minute)
	older := e.challenge(t, "3ds-older", "1400")
	advance(8 * time.Minute)
	newer := e.challenge(t, "3ds-newer", "1500")
	advance(4 * time.Minute) // back at the clock's start
	plain := e.authorizeOK(t, "no-challenge", 1600)
	e.authenticate(t, completed, true, 200)
	e.authenticate(t, failed, false, 402)
	st, err := e.svc.SweepHolds(context.Background())
	if err != nil || st.Abandoned != 1 {
		t.Fatalf("sweep: %+v %v, want one challenge abandoned", st, err)
	}
	// The list is the tenant's own to its merchant, and cut at its limit
	// oldest first.
	ctx := context.Background()
	other, _, _, err := e.svc.CreateTenant(ctx, "Other")
	if err != nil {
		t.Fatal(err)
	}
	if ps, more, err := e.svc.WaitingPayments(ctx, orchestrator.Scope{TenantID: other.ID}, 100); err != nil || len(ps) != 0 || more {
		t.Fatalf("another tenant's waiting payments: %d more=%v %v", len(ps), more, err)
	}
	if ps, more, err := e.svc.WaitingPayments(ctx, orchestrator.Scope{TenantID: e.tenant}, 1); err != nil || len(ps) != 1 ||
		ps[0].ID != older.ID || !more {
		t.Fatalf("the first waiting payment: %+v more=%v %v, want %s and more", ps, more, err, older.ID)
	}
	// The rest are listed by the API, as the page says when it cuts the
	// list: GET /v1/payments?status=requires_action, newest first.
	res, body := e.do(t, "GET", "/v1/payments?status=requires_action", e.keys[orchestrator.RoleMerchant], nil, nil)
	if got := decode[listOf[challenged]](t, body); res.StatusCode != 200 || len(got.Data) != 2 || got.Data[0].ID != newer.ID ||
		got.Data[1].ID != older.ID {
		t.Fatalf("GET /v1/payments?status=requires_action: %d %s", res.StatusCode, body)
	}
	all := []challenged{abandoned, completed, failed, older, newer}
	// noSecret checks the page in the tab prints no challenge URL, nor any
	// part of its token.
	noSecret := func(page string) {
		t.Helper()
		html := browserValue(t, b, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		for _, p := range all {
			u, _ := url.Parse(p.NextAction.URL)
			if strings.Contains(html, p.NextAction.URL) || strings.Contains(html, u.Query().Get("token")) ||
				strings.Contains(html, u.RawQuery) {
				t.Fatalf("%s prints the challenge URL of %s or its token:\n%s", page, p.ID, html)
			}
		}
	}

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.do(t, "sign in and open Holds",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(css(`#api_key`)),
		chromedp.SendKeys(css(`#api_key`), e.keys[orchestrator.RoleSupport]),
		chromedp.Click(css(`#signin button`)),
		chromedp.WaitVisible(css(`header nav`)),
		chromedp.Click(css(`header nav a[href="/console/holds"]`)),
		chromedp.WaitVisible(css(`#waiting`)),
	)
	b.screenshot(t, "3ds-01-waiting")
	list := b.text(t, `#waiting`)
	mustContain(t, "waiting list", list, older.ID, newer.ID, "3ds-older", "3ds-newer", "14.00", "15.00", "fake",
		"waiting 12m", "abandoned in 18m", "waiting 4m", "abandoned in 26m")
	if strings.Index(list, older.ID) > strings.Index(list, newer.ID) {
		t.Fatalf("not oldest first:\n%s", list)
	}
	if n := browserValue(t, b, chromedp.Evaluate[int](`document.querySelectorAll("#waiting tbody tr").length`)); n != 2 {
		t.Fatalf("%d payments listed as waiting, want 2:\n%s", n, list)
	}
	for _, p := range []challenged{abandoned, completed, failed} {
		if strings.Contains(list, p.ID) {
			t.Fatalf("%s is listed as waiting:\n%s", p.ID, list)
		}
	}
	noSecret("the Holds page")

	host := func(p challenged) string { u, _ := url.Parse(p.NextAction.URL); return u.Host }
	for _, tc := range []struct {
		name  string
		p     challenged
		steps []string
	}{
		{"waiting", older, []string{"Challenge issued", "by fake (attempt #1)", host(older),
			"https://shop.example/back?order=3ds-older", "Waiting for the shopper since", "(12m)",
			"unless completed (in 18m)"}},
		{"completed", completed, []string{"Challenge issued", host(completed), "Completed: authorized",
			"found by the merchant's confirm"}},
		{"failed", failed, []string{"Challenge issued", "Authentication failed: failed authentication_failed",
			"found by the merchant's confirm"}},
		{"abandoned", abandoned, []string{"Challenge issued", "abandoned", "Intent canceled at the provider", "cancel: ok",
			"failed authentication_abandoned", "found by the hold sweeper", "(the provider's intent canceled)"}},
	} {
		b.do(t, "open the "+tc.name+" payment",
			chromedp.Navigate(e.url+"/console/payments/"+tc.p.ID),
			chromedp.WaitVisible(css(`#authentication`)),
		)
		b.screenshot(t, "3ds-02-"+tc.name)
		steps := b.text(t, `#authentication`)
		mustContain(t, tc.name+" steps", steps, tc.steps...)
		if tc.name != "waiting" && strings.Contains(steps, "Waiting for the shopper") {
			t.Fatalf("%s: still shown waiting:\n%s", tc.name, steps)
		}
		if tc.name != "abandoned" && strings.Contains(steps, "Intent canceled") {
			t.Fatalf("%s: a cancel shown:\n%s", tc.name, steps)
		}
		noSecret("the page of " + tc.p.ID)
	}
	b.do(t, "a payment without a challenge",
		chromedp.Navigate(e.url+"/console/payments/"+plain.ID),
		chromedp.WaitVisible(css(`#attempts`)),
	)
	if n := browserValue(t, b, chromedp.Evaluate[int](`document.querySelectorAll("#authentication").length`)); n != 0 {
		t.Fatal("a payment without a challenge has an authentication section")
	}
}

// A challenge completed at the provider is found by the provider's
// webhook; the payment's page says so and sums up the webhooks about it.
func TestConsoleAuthenticationByWebhookInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newInboundEnv(t)
	_, support, err := e.svc.CreateAPIKey(context.Background(), orchestrator.RoleSupport, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	p := e.challenge(t, "3ds-webhook", "1700")
	if _, err := e.fake.Authenticate(context.Background(), *p.ProviderRef, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the webhook settles the challenge", func() bool { return e.getPayment(t, p.ID).Status == "authorized" })

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.do(t, "sign in and open the payment",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(css(`#api_key`)),
		chromedp.SendKeys(css(`#api_key`), support),
		chromedp.Click(css(`#signin button`)),
		chromedp.WaitVisible(css(`header nav`)),
		chromedp.Navigate(e.url+"/console/payments/"+p.ID),
		chromedp.WaitVisible(css(`#authentication`)),
	)
	b.screenshot(t, "3ds-03-webhook")
	mustContain(t, "steps", b.text(t, `#authentication`), "Completed: authorized", "found by the provider's webhook")
	mustContain(t, "webhooks", b.text(t, `#authentication-webhooks`), "Provider webhooks about it", "authorized")
	b.do(t, "open Holds", chromedp.Navigate(e.url+"/console/holds"), chromedp.WaitVisible(css(`#waiting-heading`)))
	mustContain(t, "holds", b.text(t, `main`), "No payment is waiting for its shopper.")
}
