package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// Support sees the holds that lapse within 24 h, soonest first, and a
// payment's page highlights its deadline; a hold with days left, or a
// captured payment, is not listed.
func TestConsoleExpiringHoldsInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newMigratedEnv(t, httpapi.Config{})
	soon := e.authorizeOK(t, "hold-soon", 1000)
	sooner := e.authorizeOK(t, "hold-sooner", 2000)
	later := e.authorizeOK(t, "hold-later", 3000)
	done := e.authorizeOK(t, "hold-done", 4000)
	for id, in := range map[string]time.Duration{soon.ID: 5 * time.Hour, sooner.ID: 90 * time.Minute, done.ID: time.Hour} {
		if _, err := e.pool.Exec(context.Background(), `UPDATE payments SET capture_before = $2 WHERE id = $1`,
			id, time.Now().Add(in)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE payments SET status = 'captured' WHERE id = $1`, done.ID); err != nil {
		t.Fatal(err)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.do(t, "sign in",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(css(`#api_key`)),
		chromedp.SendKeys(css(`#api_key`), e.keys[orchestrator.RoleSupport]),
		chromedp.Click(css(`#signin button`)),
		chromedp.WaitVisible(css(`header nav`)),
		chromedp.Click(css(`header nav a[href="/console/holds"]`)),
		chromedp.WaitVisible(css(`#holds`)),
	)
	b.screenshot(t, "holds-01-list")
	list := b.text(t, `#holds`)
	mustContain(t, "holds", list, sooner.ID, soon.ID, "1h 2", "4h 5")
	if strings.Index(list, sooner.ID) > strings.Index(list, soon.ID) {
		t.Fatalf("not soonest first:\n%s", list)
	}
	for _, id := range []string{later.ID, done.ID} {
		if strings.Contains(list, id) {
			t.Fatalf("%s is listed:\n%s", id, list)
		}
	}
	b.do(t, "open the payment",
		chromedp.Click(css(`#holds a[href="/console/payments/`+sooner.ID+`"]`)),
		chromedp.WaitVisible(css(`#capture-before.expiring`)),
	)
	b.screenshot(t, "holds-02-payment")
	mustContain(t, "deadline", b.text(t, `#capture-before`), "expires in 1h")
	b.do(t, "a hold with days left",
		chromedp.Navigate(e.url+"/console/payments/"+later.ID),
		chromedp.WaitVisible(css(`#capture-before`)),
	)
	if n := browserValue(t, b, chromedp.Evaluate[int](`document.querySelectorAll("#capture-before.expiring").length`)); n != 0 {
		t.Fatal("a hold with days left is highlighted")
	}
}
