package httpapi_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers/fake"
)

// tab drives one browser tab and writes screenshots to dir: the test's temp
// dir, or PAYORCH_CONSOLE_SCREENSHOTS to keep them after the test.
type tab struct {
	ctx context.Context
	dir string
}

func newTab(t *testing.T, extra ...chromedp.ExecAllocatorOption) tab {
	t.Helper()
	dir := os.Getenv("PAYORCH_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return tab{ctx: testkit.Browser(t, extra...), dir: dir}
}

const stepTimeout = 20 * time.Second

// do runs steps, failing the test with the step's name.
func (b tab) do(t *testing.T, step string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

func browserValue[T any](t *testing.T, b tab, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (b tab) text(t *testing.T, sel string) string {
	t.Helper()
	return browserValue(t, b, chromedp.Text(chromedp.CSS(sel)))
}

func (b tab) location(t *testing.T) string {
	t.Helper()
	return browserValue(t, b, chromedp.Location())
}

func (b tab) screenshot(t *testing.T, name string) {
	t.Helper()
	png := browserValue(t, b, chromedp.FullScreenshot(100))
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// consoleFixture makes a payment and a finished run with one amount
// discrepancy on it.
func consoleFixture(t *testing.T, e *env) (payment, runJSON) {
	t.Helper()
	p := e.authorizeOK(t, "console-order-1", 123456)
	if err := e.fake.Drift(context.Background(), fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef,
		Field: fake.AmountAuthorized, AmountMinor: 123500}); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	res, b := e.post(t, "/v1/reconciliation/runs", e.keys[orchestrator.RoleFinance], "console-run-1",
		`{"provider":"fake","date":"`+today+`"}`)
	if res.StatusCode != 202 {
		t.Fatalf("start run: %d %s", res.StatusCode, b)
	}
	r := e.waitRun(t, decode[runJSON](t, b).ID)
	if r.Status != "succeeded" || r.DiscrepancyCount != 1 {
		t.Fatalf("run %+v", r)
	}
	return p, r
}

func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newMigratedEnv(t, httpapi.Config{})
	p, r := consoleFixture(t, e)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	signIn := func(t *testing.T, key string) {
		t.Helper()
		b.do(t, "sign in",
			chromedp.Navigate(e.url+"/console/"),
			chromedp.WaitVisible(css(`#api_key`)),
			chromedp.SendKeys(css(`#api_key`), key),
			chromedp.Click(css(`#signin button`)),
			chromedp.WaitVisible(css(`#signout`)),
		)
	}

	t.Run("SignInRejectsABadKeyWithoutEchoingIt", func(t *testing.T) {
		b.do(t, "signed out",
			chromedp.Navigate(e.url+"/console/search"),
			chromedp.WaitVisible(css(`#api_key`)),
		)
		if loc := b.location(t); !strings.HasSuffix(loc, "/console/signin") {
			t.Fatalf("signed-out GET went to %s, want the sign-in page", loc)
		}
		b.do(t, "bad key",
			chromedp.SendKeys(css(`#api_key`), "pok_not_a_key"),
			chromedp.Click(css(`#signin button`)),
			chromedp.WaitVisible(css(`.flash.err`)),
		)
		b.screenshot(t, "01-signin-rejected")
		html := browserValue(t, b, chromedp.OuterHTML(css(`html`)))
		mustContain(t, "rejected sign-in", html, "was not accepted")
		if strings.Contains(html, "pok_not_a_key") {
			t.Fatal("the sign-in page echoes the key back")
		}
	})

	t.Run("SupportFindsAPaymentByIdempotencyKey", func(t *testing.T) {
		signIn(t, e.keys[orchestrator.RoleSupport])
		b.do(t, "search",
			chromedp.SendKeys(css(`#q`), "console-order-1"),
			chromedp.Click(css(`#search button`)),
			chromedp.WaitVisible(css(`#results`)),
		)
		b.screenshot(t, "02-search")
		mustContain(t, "results", b.text(t, `#results`), p.ID, "1,234.56\u00a0EUR", "authorized")
		b.do(t, "open payment",
			chromedp.Click(css(`#results a`)),
			chromedp.WaitVisible(css(`#timeline`)),
		)
		b.screenshot(t, "03-payment")
		mustContain(t, "payment page", b.text(t, `main`), p.ID, *p.ProviderRef, "Capture before", "1,234.56\u00a0EUR",
			"state_changed", "provider_call", "authorized")
	})

	t.Run("SignOutEndsTheSession", func(t *testing.T) {
		b.do(t, "sign out",
			chromedp.Click(css(`#signout`)),
			chromedp.WaitVisible(css(`#api_key`)),
		)
		mustContain(t, "after sign-out", b.text(t, `main`), "You have signed out.")
		b.do(t, "revisit",
			chromedp.Navigate(e.url+"/console/payments/"+p.ID),
			chromedp.WaitVisible(css(`#api_key`)),
		)
		if loc := b.location(t); !strings.HasSuffix(loc, "/console/signin") {
			t.Fatalf("after sign-out the payment page went to %s", loc)
		}
	})

	t.Run("FinanceReviewsARunAndResolvesADiscrepancy", func(t *testing.T) {
		signIn(t, e.keys[orchestrator.RoleFinance])
		b.do(t, "runs",
			chromedp.Navigate(e.url+"/console/runs"),
			chromedp.WaitVisible(css(`#runs`)),
		)
		b.screenshot(t, "04-runs")
		mustContain(t, "runs", b.text(t, `#runs`), fmt.Sprintf("#%d", r.ID), "fake", "v1", "succeeded")
		b.do(t, "run",
			chromedp.Click(css(fmt.Sprintf(`#runs a[href="/console/runs/%d"]`, r.ID))),
			chromedp.WaitVisible(css(`#discrepancies`)),
		)
		b.screenshot(t, "05-run")
		mustContain(t, "run page", b.text(t, `main`), "amount_mismatch", p.ID, "1,234.56\u00a0EUR", "1,235.00\u00a0EUR", "0.44\u00a0EUR", "open", "first version")

		// A forged CSRF token is refused and changes nothing.
		b.do(t, "forged resolve",
			chromedp.SetValue(css(`form.resolve input[name=csrf_token]`), "forged"),
			chromedp.SendKeys(css(`form.resolve input[name=note]`), "forged note"),
			chromedp.Click(css(`form.resolve button`)),
			chromedp.WaitVisible(css(`.error-page`)),
		)
		b.screenshot(t, "06-csrf-rejected")
		mustContain(t, "csrf page", b.text(t, `main`), "403", "security token")
		if n := e.count(t, `SELECT count(*) FROM reconciliation_discrepancies WHERE resolved_at IS NOT NULL`); n != 0 {
			t.Fatalf("a forged form resolved %d discrepancies", n)
		}

		b.do(t, "resolve",
			chromedp.Navigate(fmt.Sprintf("%s/console/runs/%d?category=amount_mismatch", e.url, r.ID)),
			chromedp.WaitVisible(css(`form.resolve`)),
			chromedp.SendKeys(css(`form.resolve input[name=note]`), "provider corrected it"),
			chromedp.Click(css(`form.resolve button`)),
			chromedp.WaitVisible(css(`.flash.ok`)),
		)
		b.screenshot(t, "07-resolved")
		mustContain(t, "after resolve", b.text(t, `main`), "is resolved", "resolved", "provider corrected it")
		if loc := b.location(t); !strings.Contains(loc, "category=amount_mismatch") {
			t.Fatalf("resolve lost the filter: %s", loc)
		}
		var by string
		if err := e.pool.QueryRow(context.Background(),
			`SELECT resolved_by FROM reconciliation_discrepancies WHERE run_id = $1`, r.ID).Scan(&by); err != nil || !strings.HasPrefix(by, "key_") {
			t.Fatalf("resolved_by %q (%v)", by, err)
		}

		b.do(t, "open filter",
			chromedp.SetValue(css(`#state`), "open"),
			chromedp.Click(css(`#filters button`)),
			chromedp.WaitVisible(css(`p.empty`)),
		)
		b.screenshot(t, "08-open-filter-empty")
		mustContain(t, "open filter", b.text(t, `p.empty`), "No discrepancies match this filter")

		b.do(t, "sign out",
			chromedp.Click(css(`#signout`)),
			chromedp.WaitVisible(css(`#api_key`)),
		)
	})
}

// consoleClient is a browser without JavaScript: a cookie jar and forms.
type consoleClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newConsoleClient(t *testing.T, base string) *consoleClient {
	jar, _ := cookiejar.New(nil)
	return &consoleClient{t: t, base: base, c: &http.Client{Jar: jar}}
}

var csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func (cc *consoleClient) get(path string) (*http.Response, string) {
	cc.t.Helper()
	res, err := cc.c.Get(cc.base + path)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func (cc *consoleClient) post(path string, form url.Values) (*http.Response, string) {
	cc.t.Helper()
	res, err := cc.c.PostForm(cc.base+path, form)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf token in\n%s", page)
	}
	return m[1]
}

// signIn signs in with key and returns the landing page.
func (cc *consoleClient) signIn(key string) (*http.Response, string) {
	cc.t.Helper()
	_, page := cc.get("/console/signin")
	return cc.post("/console/signin", url.Values{"csrf_token": {csrfOf(cc.t, page)}, "api_key": {key}})
}

func TestConsoleWithoutJavaScript(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	p, r := consoleFixture(t, e)
	ctx := context.Background()
	other, _, otherKey, err := e.svc.CreateTenant(ctx, "Globex")
	if err != nil {
		t.Fatal(err)
	}
	res, b := e.post(t, "/v1/payments", otherKey, "console-order-1", `{"amount_minor":500,"currency":"JPY"}`)
	if res.StatusCode != 201 {
		t.Fatalf("other tenant's payment: %d %s", res.StatusCode, b)
	}
	op := decode[payment](t, b)

	t.Run("SessionCookieIsHttpOnlyStrictAndStoredHashed", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		_, page := cc.get("/console/signin")
		token := csrfOf(t, page)
		jar := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Jar: cc.c.Jar}
		res, err := jar.PostForm(e.url+"/console/signin", url.Values{"csrf_token": {token}, "api_key": {e.keys[orchestrator.RoleSupport]}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		var sess *http.Cookie
		for _, c := range res.Cookies() {
			if c.Name == "payorch_session" {
				sess = c
			}
		}
		if res.StatusCode != http.StatusSeeOther || sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/console/" {
			t.Fatalf("sign-in: %d, cookie %+v", res.StatusCode, sess)
		}
		if n := e.count(t, `SELECT count(*) FROM console_sessions WHERE id_hash = sha256($1::bytea)`, []byte(sess.Value)); n != 1 {
			t.Fatalf("%d sessions stored under the token's hash", n)
		}
		if n := e.count(t, `SELECT count(*) FROM console_sessions WHERE expires_at > created_at + interval '7 hours'
			AND expires_at <= created_at + interval '8 hours'`); n != 1 {
			t.Fatal("session does not expire after 8h")
		}
	})

	t.Run("SignInWithoutTheFormTokenIsRefused", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		res, body := cc.post("/console/signin", url.Values{"csrf_token": {"guess"}, "api_key": {e.keys[orchestrator.RoleSupport]}})
		if res.StatusCode != http.StatusForbidden || strings.Contains(body, "signout") {
			t.Fatalf("sign-in without the double-submit cookie: %d", res.StatusCode)
		}
	})

	t.Run("MerchantSeesOnlyItsTenant", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		cc.signIn(e.keys[orchestrator.RoleMerchant])
		res, body := cc.get("/console/search?q=console-order-1")
		if res.StatusCode != 200 || !strings.Contains(body, p.ID) || strings.Contains(body, op.ID) {
			t.Fatalf("merchant search: %d\n%s", res.StatusCode, body)
		}
		res, body = cc.get("/console/payments/" + op.ID)
		if res.StatusCode != 404 || !strings.Contains(body, "<html") {
			t.Fatalf("another tenant's payment: %d\n%s", res.StatusCode, body)
		}
		res, _ = cc.get(fmt.Sprintf("/console/search?q=console-order-1&tenant=%d", other.ID))
		if res.StatusCode != 400 {
			t.Fatalf("merchant with a tenant filter: %d", res.StatusCode)
		}
		res, body = cc.get("/console/runs")
		if res.StatusCode != 403 || !strings.Contains(body, "Forbidden") {
			t.Fatalf("merchant on runs: %d", res.StatusCode)
		}
	})

	t.Run("SupportSearchesEveryTenantOrOne", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		cc.signIn(e.keys[orchestrator.RoleSupport])
		_, body := cc.get("/console/search?q=console-order-1")
		mustContain(t, "support search", body, p.ID, op.ID, "500\u00a0JPY")
		_, body = cc.get(fmt.Sprintf("/console/search?q=console-order-1&tenant=%d", other.ID))
		if !strings.Contains(body, op.ID) || strings.Contains(body, p.ID) {
			t.Fatalf("tenant filter:\n%s", body)
		}
		_, body = cc.get("/console/search?q=" + p.ID)
		mustContain(t, "search by id", body, p.ID)
		_, body = cc.get("/console/search?q=nothing-here")
		mustContain(t, "no match", body, "No payment matches")
		res, _ := cc.get("/console/runs")
		if res.StatusCode != 403 {
			t.Fatalf("support on runs: %d", res.StatusCode)
		}
	})

	t.Run("FinanceDownloadsCSVAndSeesResolveConflicts", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		cc.signIn(e.keys[orchestrator.RoleFinance])
		res, body := cc.get(fmt.Sprintf("/console/runs/%d/discrepancies.csv?category=amount_mismatch", r.ID))
		recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") || err != nil ||
			len(recs) != 2 || recs[1][2] != "amount_mismatch" || recs[1][4] != p.ID {
			t.Fatalf("csv: %d %q (%v)", res.StatusCode, body, err)
		}
		_, page := cc.get(fmt.Sprintf("/console/runs/%d", r.ID))
		var id int64
		if m := regexp.MustCompile(`/console/discrepancies/(\d+)/resolve`).FindStringSubmatch(page); m != nil {
			fmt.Sscan(m[1], &id)
		}
		form := url.Values{"csrf_token": {csrfOf(t, page)}, "note": {""}}
		path := fmt.Sprintf("/console/discrepancies/%d/resolve", id)
		res, body = cc.post(path, form)
		if res.StatusCode != 400 || !strings.Contains(body, "Write a note") {
			t.Fatalf("empty note: %d", res.StatusCode)
		}
		form.Set("note", "checked with the provider")
		if res, _ = cc.post(path, form); res.StatusCode != 200 { // after the 303
			t.Fatalf("resolve: %d", res.StatusCode)
		}
		res, body = cc.post(path, form)
		if res.StatusCode != 409 || !strings.Contains(body, "already resolved") {
			t.Fatalf("second resolve: %d", res.StatusCode)
		}
		res, body = cc.get("/console/runs/999999")
		if res.StatusCode != 404 || !strings.Contains(body, "error-page") {
			t.Fatalf("unknown run: %d", res.StatusCode)
		}
		res, body = cc.get("/console/no/such/page")
		if res.StatusCode != 404 || !strings.Contains(body, "error-page") {
			t.Fatalf("unknown page: %d %s", res.StatusCode, body)
		}
	})

	t.Run("RevokingTheKeyEndsItsSessions", func(t *testing.T) {
		_, k, err := e.svc.CreateAPIKey(ctx, orchestrator.RoleSupport, 0, "revoked soon")
		if err != nil {
			t.Fatal(err)
		}
		cc := newConsoleClient(t, e.url)
		if res, _ := cc.signIn(k); res.Request.URL.Path != "/console/search" {
			t.Fatalf("signed in to %s", res.Request.URL)
		}
		var keyID string
		if err := e.pool.QueryRow(ctx, `SELECT api_key_id FROM console_sessions ORDER BY created_at DESC LIMIT 1`).Scan(&keyID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.RevokeAPIKey(ctx, keyID); err != nil {
			t.Fatal(err)
		}
		if res, _ := cc.get("/console/search"); res.Request.URL.Path != "/console/signin" {
			t.Fatalf("a revoked key's session still works: %s", res.Request.URL)
		}
	})

	t.Run("SignOutNeedsTheSessionToken", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		_, page := cc.signIn(e.keys[orchestrator.RoleSupport])
		if res, _ := cc.post("/console/signout", url.Values{"csrf_token": {"nope"}}); res.StatusCode != 403 {
			t.Fatalf("sign-out with a forged token: %d", res.StatusCode)
		}
		if res, _ := cc.post("/console/signout", url.Values{"csrf_token": {csrfOf(t, page)}}); res.Request.URL.Path != "/console/signin" {
			t.Fatalf("sign-out went to %s", res.Request.URL)
		}
		if res, _ := cc.get("/console/search"); res.Request.URL.Path != "/console/signin" {
			t.Fatal("the session outlived sign-out")
		}
	})

	t.Run("LogsNameTheRouteAndNeverTheKey", func(t *testing.T) {
		logs := e.logs.String()
		mustContain(t, "logs", logs, `"route":"/console/search"`, `"route":"/console/runs/:id"`)
		for role, key := range e.keys {
			if strings.Contains(logs, key) {
				t.Errorf("the %s API key is in the logs", role)
			}
		}
	})

	t.Run("APIStillSpeaksProblemJSON", func(t *testing.T) {
		res, b := e.do(t, "GET", "/v1/nothing", e.keys[orchestrator.RoleSupport], nil, nil)
		wantProblem(t, res, b, 404, "not_found")
	})
}
