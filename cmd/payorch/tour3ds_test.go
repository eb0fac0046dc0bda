package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/internal/testkit"
)

// TestTourThreeDSecureInBrowser is the README's 3-D Secure step, as a
// shopper's browser goes through it against `payorch dev`: the merchant
// authorizes with the fake's challenge test method and a return URL, the
// browser opens next_action.url, the shopper presses Complete on the
// fake's challenge page and lands on the merchant's return URL; the
// fake's signed webhook has payorch settle the payment authorized (no
// confirm needed), with its events; the merchant's confirm then agrees.
func TestTourThreeDSecureInBrowser(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "payorch-tour-3ds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user must reach it when we are root
		t.Fatal(err)
	}
	base, merchant, stop := startDev(t, map[string]string{
		"PAYORCH_DATA_DIR": dir, "PAYORCH_DEV_PG_PORT": strconv.Itoa(freePort(t)), "PAYORCH_LOG_LEVEL": "error",
	})
	t.Cleanup(func() { _ = stop() })

	// The merchant's shop, where the shopper comes back.
	var mu sync.Mutex
	var returned []url.Values
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/return" { // the browser asks for /favicon.ico too
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		returned = append(returned, r.URL.Query())
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>Shop</title><h1 id="thanks">Thank you</h1>`))
	}))
	t.Cleanup(shop.Close)

	st, b := call(t, "POST", base+"/v1/payments", merchant, "tour-3ds",
		`{"amount_minor":4200,"currency":"EUR","payment_method":"pm_card_threeDSecure2Required",`+
			`"return_url":"`+shop.URL+`/return?order=42"}`)
	var p struct {
		ID          string `json:"id"`
		Status      string `json:"status"`
		ProviderRef string `json:"provider_ref"`
		NextAction  *struct {
			Type, URL string
		} `json:"next_action"`
	}
	if st != 201 || json.Unmarshal(b, &p) != nil || p.Status != "requires_action" || p.NextAction == nil ||
		p.NextAction.Type != "redirect_to_url" {
		t.Fatalf("authorize: %d %s", st, b)
	}

	ctx := testkit.Browser(t)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	step("open the challenge", chromedp.Navigate(p.NextAction.URL),
		chromedp.WaitVisible(chromedp.CSS(`button[value=complete]`)))
	step("complete it", chromedp.Click(chromedp.CSS(`button[value=complete]`)),
		chromedp.WaitVisible(chromedp.CSS(`#thanks`)))
	mu.Lock()
	if len(returned) != 1 || returned[0].Get("order") != "42" || returned[0].Get("payment_intent") != p.ProviderRef ||
		returned[0].Get("redirect_status") != "succeeded" {
		t.Fatalf("the shopper came back with %v", returned)
	}
	mu.Unlock()

	// The fake's webhook settles it; nobody called confirm.
	var got []byte
	testkit.WaitFor(t, 30*time.Second, "the payment to be authorized", testkit.Until(func() bool {
		_, got = call(t, "GET", base+"/v1/payments/"+p.ID, merchant, "", "")
		return strings.Contains(string(got), `"status":"authorized"`)
	}))
	if !strings.Contains(string(got), `"next_action":null`) || strings.Contains(string(got), `"capture_before":null`) {
		t.Fatalf("authorized payment: %s", got)
	}
	_, history := call(t, "GET", base+"/v1/payments/"+p.ID+"/events", merchant, "", "")
	if !strings.Contains(string(history), `"from_status":"requires_action","to_status":"authorized"`) ||
		!strings.Contains(string(history), `"found_by":"webhook"`) {
		t.Fatalf("history: %s", history)
	}
	for _, typ := range []string{"payment.requires_action", "payment.authorized"} {
		_, evs := call(t, "GET", base+"/v1/events?payment_id="+p.ID+"&type="+typ, merchant, "", "")
		if strings.Count(string(evs), `"type":"`+typ+`"`) != 1 {
			t.Fatalf("events %s: %s", typ, evs)
		}
	}
	st, b = call(t, "POST", base+"/v1/payments/"+p.ID+"/confirm", merchant, "tour-3ds-confirm", "")
	if st != 200 || !strings.Contains(string(b), `"status":"authorized"`) {
		t.Fatalf("confirm: %d %s", st, b)
	}
	st, b = call(t, "POST", base+"/v1/payments/"+p.ID+"/capture", merchant, "tour-3ds-capture", `{}`)
	if st != 200 || !strings.Contains(string(b), `"status":"captured"`) {
		t.Fatalf("capture: %d %s", st, b)
	}
}
