package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// A flexible hold's page says what the payment asked for and was granted,
// and lists its money movements oldest first: two increments and one the
// issuer declined, two parts and the final capture, a refund; each with
// its kind, status, amount (an increment: its new total and what it
// added), key and failure code. The timeline says what a part and an
// increment did, where the state alone reads authorized → authorized. A
// plain payment shows no flexible-hold facts.
func TestConsoleFlexibleHoldInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	merchant := e.keys[orchestrator.RoleMerchant]
	call := func(path, key, body string, want int) []byte {
		t.Helper()
		res, got := e.post(t, path, merchant, key, body)
		if res.StatusCode != want {
			t.Fatalf("POST %s (%s): %d %s, want %d", path, key, res.StatusCode, got, want)
		}
		return got
	}
	flex := decode[payment](t, call("/v1/payments", "flex", `{"amount_minor":1000,"currency":"EUR",`+
		`"request_incremental_authorization":true,"request_multicapture":true,"request_overcapture":true}`, 201))
	path := "/v1/payments/" + flex.ID
	call(path+"/increment", "flex-i1", `{"amount_minor":1400}`, 200)
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultDecline,
		IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpIncrement, "flex-i2")}); err != nil {
		t.Fatal(err)
	}
	call(path+"/increment", "flex-i2", `{"amount_minor":1500}`, 402)
	call(path+"/increment", "flex-i3", `{"increase_minor":200}`, 200)
	call(path+"/capture", "flex-c1", `{"amount_minor":300,"final_capture":false}`, 200)
	call(path+"/capture", "flex-c2", `{"amount_minor":500,"final_capture":false}`, 200)
	call(path+"/capture", "flex-c3", `{"amount_minor":400}`, 200)
	call(path+"/refunds", "flex-r1", `{"amount_minor":200}`, 201)
	res, body := e.do(t, "GET", path, merchant, nil, nil)
	held := decode[struct {
		Status             string `json:"status"`
		CapturedMinor      int64  `json:"captured_minor"`
		MaxCapturableMinor *int64 `json:"max_capturable_minor"`
	}](t, body)
	if res.StatusCode != 200 || held.Status != "partially_refunded" || held.CapturedMinor != 1200 ||
		held.MaxCapturableMinor == nil {
		t.Fatalf("the flexible payment: %d %s", res.StatusCode, body)
	}
	plain := e.authorizeOK(t, "plain", 700)
	call("/v1/payments/"+plain.ID+"/capture", "plain-c", `{}`, 200)
	// Another tenant's merchant reads none of it.
	other, _, _, err := e.svc.CreateTenant(ctx, "Other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.PaymentOperations(ctx, orchestrator.Scope{TenantID: other.ID}, flex.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("another tenant's operations: %v, want not_found", err)
	}

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.do(t, "open the flexible payment",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(css(`#api_key`)),
		chromedp.SendKeys(css(`#api_key`), e.keys[orchestrator.RoleSupport]),
		chromedp.Click(css(`#signin button`)),
		chromedp.WaitVisible(css(`header nav`)),
		chromedp.Navigate(e.url+"/console/payments/"+flex.ID),
		chromedp.WaitVisible(css(`#operations`)),
	)
	b.screenshot(t, "flexhold-01-payment")
	text := func(sel string) string { return strings.ReplaceAll(b.text(t, sel), "\u00a0", " ") }
	for sel, want := range map[string]string{"#flex-incremental": "Incremental authorization available",
		"#flex-multicapture": "Multicapture available", "#flex-overcapture": "Overcapture available",
		// (under 1,000 EUR: no thousands separator)
		"#max-capturable": fmt.Sprintf("Capturable up to %d.%02d EUR", *held.MaxCapturableMinor/100, *held.MaxCapturableMinor%100)} {
		mustContain(t, sel, strings.Join(strings.Fields(text(sel)), " "), want)
	}
	rows := browserValue(t, b, chromedp.Evaluate[[][]string](`Array.from(document.querySelectorAll("#operations tbody tr"),
		r => Array.from(r.cells, c => c.innerText.replaceAll("\u00a0", " ").replace(/\s+/g, " ").trim()))`))
	want := [][]string{ // kind (its id follows), status, amount, key, failure
		{"increment", "succeeded", "to 14.00 EUR (+4.00 EUR)", "flex-i1", ""},
		{"increment", "failed", "to 15.00 EUR", "flex-i2", "card_declined"},
		{"increment", "succeeded", "to 16.00 EUR (+2.00 EUR)", "flex-i3", ""},
		{"capture — part", "succeeded", "3.00 EUR", "flex-c1", ""},
		{"capture — part", "succeeded", "5.00 EUR", "flex-c2", ""},
		{"capture — final", "succeeded", "4.00 EUR", "flex-c3", ""},
		{"refund", "succeeded", "2.00 EUR", "flex-r1", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("money movements: %d rows, want %d:\n%q", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if len(r) != 7 || !strings.HasPrefix(r[0], w[0]+" ") || r[1] != w[1] || r[2] != w[2] || r[3] != w[3] || r[4] != w[4] ||
			!strings.HasSuffix(r[5], "UTC") || !strings.HasSuffix(r[6], "UTC") {
			t.Fatalf("money movement %d: %q, want %q", i+1, r, w)
		}
	}
	// The timeline says what each state change of an operation did, in
	// order; the declined increment changed nothing.
	changes := browserValue(t, b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#timeline td.op-change"),
		c => c.innerText.replaceAll("\u00a0", " ").replace(/ (cap|inc|re)_[0-9a-f]+$/, ""))`))
	if got, want := strings.Join(changes, "; "), "Raised the hold to 14.00 EUR; Raised the hold to 16.00 EUR; "+
		"Captured a part: 3.00 EUR; Captured a part: 5.00 EUR; Captured 4.00 EUR; Refunded 2.00 EUR"; got != want {
		t.Fatalf("the timeline's operations:\n%s\nwant\n%s", got, want)
	}

	b.do(t, "open the plain payment",
		chromedp.Navigate(e.url+"/console/payments/"+plain.ID),
		chromedp.WaitVisible(css(`#operations`)),
	)
	b.screenshot(t, "flexhold-02-plain")
	if n := browserValue(t, b, chromedp.Evaluate[int](
		`document.querySelectorAll("#flex-incremental, #flex-multicapture, #flex-overcapture, #max-capturable").length`)); n != 0 {
		t.Fatalf("a plain payment shows %d flexible-hold facts", n)
	}
	mustContain(t, "the plain payment's money movements", strings.ReplaceAll(text(`#operations tbody`), "\u00a0", " "),
		"capture — final", "7.00 EUR", "plain-c")
}
