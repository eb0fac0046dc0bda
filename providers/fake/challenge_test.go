package fake_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// browser is a shopper's browser: no bearer token, redirects not
// followed (the test reads them).
var browser = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// page is an answer to the browser.
type page struct {
	status   int
	header   http.Header
	body     string
	location string
}

// open GETs rawURL as the browser.
func open(t *testing.T, rawURL string) page {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return browse(t, req)
}

// submit posts the challenge form of the page at pageURL (token from its
// query) with result, as the browser does.
func submit(t *testing.T, pageURL, token, result string) page {
	t.Helper()
	u, err := url.Parse(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	if token == "" {
		token = u.Query().Get("token")
	}
	u.RawQuery = ""
	form := url.Values{"token": {token}, "result": {result}}.Encode()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u.String(), strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return browse(t, req)
}

func browse(t *testing.T, req *http.Request) page {
	t.Helper()
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(b), location: resp.Header.Get("Location")}
}

// wantHTML checks a page's status and that it is HTML under the CSP.
func wantHTML(t *testing.T, p page, status int) {
	t.Helper()
	if p.status != status || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") {
		t.Fatalf("page %d %s, want %d text/html:\n%s", p.status, p.header.Get("Content-Type"), status, p.body)
	}
	csp := p.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "style-src 'sha256-"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("CSP %q lacks %q", csp, want)
		}
	}
	if p.header.Get("Referrer-Policy") != "no-referrer" || p.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v: the token could leak by Referer or cache", p.header)
	}
}

// redirected is where a completed challenge sends the browser.
func redirected(ref, status string) string {
	return returnURL + "&payment_intent=" + ref + "&redirect_status=" + status
}

func TestChallengePage(t *testing.T) {
	t.Parallel()
	_, c, rc := startHooked(t, fake.Config{})
	ctx := t.Context()

	t.Run("CompleteAuthorizesOnceAndGoesBack", func(t *testing.T) {
		t.Parallel()
		req := threeDSReq(t, fake.TestCardThreeDSRequired, returnURL, false)
		req.Description = "Order 42 <at> Shop"
		h := challenge(t, c, req)
		p := open(t, h.NextActionURL)
		wantHTML(t, p, http.StatusOK)
		for _, want := range []string{"12.34 EUR", "Order 42 &lt;at&gt; Shop", "visa •••• 3220", h.Ref,
			`value="complete">Complete</button>`, `value="fail">Fail</button>`, `method="post"`} {
			if !strings.Contains(p.body, want) {
				t.Fatalf("page lacks %q:\n%s", want, p.body)
			}
		}
		if strings.Contains(p.body, fake.TestCardThreeDSRequired) || strings.Contains(p.body, "<script") {
			t.Fatalf("page shows the card number or a script:\n%s", p.body)
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://shop.example;") {
			t.Fatalf("CSP %q does not let the form lead back to the shop", csp)
		}

		done := submit(t, h.NextActionURL, "", "complete")
		if done.status != http.StatusSeeOther || done.location != redirected(h.Ref, "succeeded") {
			t.Fatalf("submit: %d to %q, want 303 to %s", done.status, done.location, redirected(h.Ref, "succeeded"))
		}
		got, err := c.Lookup(ctx, h.Ref)
		if err != nil || got.Status != providers.StatusAuthorized || got.CaptureBefore.IsZero() || got.NextActionURL != "" {
			t.Fatalf("Lookup: %+v, %v; want authorized with a capture_before", got, err)
		}

		// A second submission, either button, changes nothing.
		again := submit(t, h.NextActionURL, "", "fail")
		if again.status != http.StatusSeeOther || again.location != done.location {
			t.Fatalf("second submit: %d to %q, want the same redirect", again.status, again.location)
		}
		if got, _ := c.Lookup(ctx, h.Ref); got.Status != providers.StatusAuthorized {
			t.Fatalf("second submit moved the hold to %s", got.Status)
		}
		after := open(t, h.NextActionURL)
		wantHTML(t, after, http.StatusOK)
		if !strings.Contains(after.body, "authenticated") || strings.Contains(after.body, "<form") {
			t.Fatalf("page after completion:\n%s", after.body)
		}
		ops := operations(t, c, req.Key)
		if len(ops) != 2 || ops[1].Operation != fake.OpAuthenticate {
			t.Fatalf("operations %+v, want the challenge and one authentication", ops)
		}

		// The events: one requires_action, one authorized carrying the
		// authorization's key; a capture after them proves no other is
		// queued (they leave in order).
		if _, err := c.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the capture event", func() bool { return len(rc.types(h.Ref)) >= 3 })
		if got := strings.Join(rc.types(h.Ref), " "); got != "hold.requires_action hold.authorized hold.captured" {
			t.Fatalf("events: %s", got)
		}
		for _, ev := range rc.events() {
			if ev.HoldRef == h.Ref && ev.Type == fake.EventHoldAuthorized &&
				(ev.Kind != providers.WebhookAuthorized || ev.IdempotencyKey != req.Key || ev.AmountMinor != 1234) {
				t.Errorf("authorized event %+v", ev)
			}
		}
		ds, err := c.WebhookDeliveries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent := map[string]int{}
		for _, d := range ds {
			if d.HoldRef == h.Ref && d.Outcome == "delivered" {
				sent[d.Type]++
			}
		}
		if sent[fake.EventHoldAuthorized] != 1 || sent[fake.EventHoldRequiresAction] != 1 {
			t.Fatalf("deliveries %v, want one of each", sent)
		}
	})

	t.Run("FailDeclinesAndGoesBack", func(t *testing.T) {
		t.Parallel()
		req := threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false)
		h := challenge(t, c, req)
		p := open(t, h.NextActionURL)
		wantHTML(t, p, http.StatusOK)
		if !strings.Contains(p.body, "pm_card_threeDSecure2Required") {
			t.Fatalf("page does not name the payment method:\n%s", p.body)
		}
		done := submit(t, h.NextActionURL, "", "fail")
		if done.status != http.StatusSeeOther || done.location != redirected(h.Ref, "failed") {
			t.Fatalf("submit: %d to %q", done.status, done.location)
		}
		got, err := c.Lookup(ctx, h.Ref)
		if err != nil || got.Status != providers.StatusDeclined || got.DeclineCode != providers.CodeAuthenticationFailed {
			t.Fatalf("Lookup: %+v, %v; want declined authentication_failed", got, err)
		}
		if again := submit(t, h.NextActionURL, "", "complete"); again.location != done.location {
			t.Fatalf("second submit went to %q", again.location)
		}
		if got, _ := c.Lookup(ctx, h.Ref); got.Status != providers.StatusDeclined {
			t.Fatalf("second submit moved the hold to %s", got.Status)
		}
		waitFor(t, "the failure event", func() bool { return len(rc.types(h.Ref)) >= 2 })
		for _, ev := range rc.events() {
			if ev.HoldRef == h.Ref && ev.Type == fake.EventHoldPaymentFailed &&
				(ev.Kind != providers.WebhookAuthorizationFailed || ev.FailureCode != providers.CodeAuthenticationFailed || ev.IdempotencyKey != req.Key) {
				t.Errorf("failure event %+v", ev)
			}
		}
		if got := strings.Join(rc.types(h.Ref), " "); got != "hold.requires_action hold.payment_failed" {
			t.Fatalf("events: %s", got)
		}
	})

	t.Run("WrongTokenIsNotFoundAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		h := challenge(t, c, threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false))
		base := strings.SplitN(h.NextActionURL, "?", 2)[0]
		other := challenge(t, c, threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false))
		otherToken := strings.SplitN(other.NextActionURL, "token=", 2)[1]
		for name, u := range map[string]string{
			"NoToken":             base,
			"WrongToken":          base + "?token=" + strings.Repeat("0", 64),
			"AnotherHoldsToken":   base + "?token=" + otherToken,
			"UnknownHold":         strings.Replace(h.NextActionURL, h.Ref, "fh_000000000000000000000000", 1),
			"NoHold":              strings.SplitN(base, "/3ds/", 2)[0] + "/3ds/",
			"NotAChallengeAnswer": strings.SplitN(base, "/3ds/", 2)[0] + "/3ds/" + h.Ref + "/x",
		} {
			t.Run(name, func(t *testing.T) { wantHTML(t, open(t, u), http.StatusNotFound) })
		}
		wantHTML(t, submit(t, h.NextActionURL, otherToken, "complete"), http.StatusNotFound)
		wantHTML(t, submit(t, h.NextActionURL, strings.Repeat("0", 64), "fail"), http.StatusNotFound)
		bad := submit(t, h.NextActionURL, "", "maybe")
		wantHTML(t, bad, http.StatusBadRequest)
		if got, _ := c.Lookup(ctx, h.Ref); got.Status != providers.StatusRequiresAction {
			t.Fatalf("a refused submission moved the hold to %s", got.Status)
		}
	})

	t.Run("CanceledChallengeHasExpired", func(t *testing.T) {
		t.Parallel()
		h := challenge(t, c, threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false))
		if _, err := c.Cancel(ctx, providers.CancelRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
			t.Fatal(err)
		}
		p := submit(t, h.NextActionURL, "", "complete")
		wantHTML(t, p, http.StatusGone)
		if !strings.Contains(p.body, "expired") || p.location != "" {
			t.Fatalf("submit after cancel: %d %q\n%s", p.status, p.location, p.body)
		}
		if got, _ := c.Lookup(ctx, h.Ref); got.Status != providers.StatusCanceled {
			t.Fatalf("completing a canceled challenge moved it to %s", got.Status)
		}
		if page := open(t, h.NextActionURL); !strings.Contains(page.body, "expired") || strings.Contains(page.body, "<form") {
			t.Fatalf("page of a canceled challenge:\n%s", page.body)
		}
	})
}

// TestChallengePagesOpenNothingElse: the pages are the only paths served
// without the token; a path that only starts like theirs reaches nothing.
func TestChallengePagesOpenNothingElse(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	for _, p := range []string{"/3ds/../_admin/faults", "/3ds/%2e%2e/_admin/faults", "/3ds/x/../../_admin/faults"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.URL()+p,
			strings.NewReader(`{"operation":"authorize","fault":"error_before_execute"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if got := browse(t, req); got.status/100 == 2 {
			t.Errorf("POST %s without the token: %d %s", p, got.status, got.body)
		}
	}
	if fs, err := c.Faults(t.Context()); err != nil || len(fs) != 0 {
		t.Fatalf("faults armed without the token: %+v, %v", fs, err)
	}
}
