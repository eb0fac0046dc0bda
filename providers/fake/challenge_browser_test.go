package fake_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// TestChallengeInBrowser completes a challenge in headless Chromium: the
// page's style passes its Content-Security-Policy, and the form's redirect
// to the shop, another origin, is one the policy lets the browser follow.
func TestChallengeInBrowser(t *testing.T) {
	t.Parallel()
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>shop</title><p id="back">back at the shop</p>`))
	}))
	t.Cleanup(shop.Close)
	_, c := start(t, fake.Config{})
	h := challenge(t, c, threeDSReq(t, fake.TestCardThreeDSRequired, shop.URL+"/return?order=42", false))

	ctx := testkit.Browser(t)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	value := func(a chromedp.Action[string]) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		v, err := chromedp.Run(sctx, a)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	complete := chromedp.CSS(`button[value=complete]`)
	step("open the challenge", chromedp.Navigate(h.NextActionURL), chromedp.WaitVisible(complete))
	if bg := value(chromedp.Evaluate[string](`getComputedStyle(document.querySelector("button[value=complete]")).backgroundColor`)); bg != "rgb(26, 127, 55)" {
		t.Fatalf("the Complete button's background is %q: the policy blocked the page's style", bg)
	}
	step("complete", chromedp.Click(complete), chromedp.WaitVisible(chromedp.CSS(`#back`)))
	want := shop.URL + "/return?order=42&payment_intent=" + h.Ref + "&redirect_status=succeeded"
	if got := value(chromedp.Location()); got != want {
		t.Fatalf("the browser is at %s, want %s", got, want)
	}
	if got, err := c.Lookup(t.Context(), h.Ref); err != nil || got.Status != providers.StatusAuthorized {
		t.Fatalf("Lookup: %+v, %v; want authorized", got, err)
	}
}
