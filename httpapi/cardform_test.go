package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

// shopPage serves, on loopback under host (localhost: another site than
// the API's 127.0.0.1), a merchant's checkout page that embeds the card
// form in an iframe and shows the payment method's id it is handed (in
// #result), and a /done page that shows the query it was sent back with.
// Its origin is returned with it.
func shopPage(t *testing.T, apiURL, ppk string) (origin string) {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	origin = strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	mux.HandleFunc("GET /checkout", func(w http.ResponseWriter, r *http.Request) {
		frameOrigin := r.URL.Query().Get("origin") // which origin the form is told to answer
		if frameOrigin == "" {
			frameOrigin = origin
		}
		src := apiURL + "/card_form?" + url.Values{"key": {ppk}, "origin": {frameOrigin}}.Encode()
		fmt.Fprintf(w, `<!doctype html><html><body><h1>Checkout</h1>
<iframe id="card" src="%s" width="480" height="420"></iframe>
<p>Payment method: <span id="result"></span></p>
<script>
window.addEventListener("message", (e) => {
  if (e.origin === %q && e.data && e.data.type === "payorch.payment_method") {
    document.getElementById("result").textContent = e.data.id;
  }
});
</script></body></html>`, src, apiURL)
	})
	mux.HandleFunc("GET /done", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><html><body><p id="back">%s</p></body></html>`, r.URL.Query().Get("payment_method"))
	})
	return origin
}

// noSiteIsolation keeps a cross-site iframe in its page's process, where
// queries from its element (FromNode) reach its document. Origins, their
// checks (postMessage's target, frame-ancestors, CORS) and the page's CSP
// hold all the same: only the process model changes. The pages are the
// test's own.
var noSiteIsolation = []chromedp.ExecAllocatorOption{
	chromedp.Flag("disable-features", "SitePerProcess,IsolateOrigins"),
	chromedp.Flag("disable-site-isolation-trials", true),
}

// inFrame is the query option of the card form's iframe (#card) of b's
// page.
func inFrame(t *testing.T, b tab) chromedp.QueryOption {
	t.Helper()
	nodes := browserValue(t, b, chromedp.Nodes(chromedp.CSS(`#card`)))
	return chromedp.FromNode(nodes[0])
}

// fillCard types a card into the form (in a frame, with in) and saves it.
func fillCard(t *testing.T, b tab, number, month, year, cvc string, in ...chromedp.QueryOption) {
	t.Helper()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.do(t, "fill the card form",
		chromedp.WaitVisible(css(`#number`), in...),
		chromedp.SendKeys(css(`#holder_name`), "Jane Doe", in...),
		chromedp.SendKeys(css(`#number`), number, in...),
		chromedp.SendKeys(css(`#exp_month`), month, in...),
		chromedp.SendKeys(css(`#exp_year`), year, in...),
		chromedp.SendKeys(css(`#cvc`), cvc, in...),
		chromedp.Click(css(`#save`), in...),
	)
}

func TestCardFormInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t, noSiteIsolation...)
	// The tenant's origin is the shop's; the shop is served only once the
	// key exists, so the origins are set after.
	e := newVaultEnv(t, httpapi.Config{})
	ppk, merchant := e.keys[orchestrator.RolePublishable], e.keys[orchestrator.RoleMerchant]
	shop := shopPage(t, e.url, ppk)
	if _, err := e.svc.SetBrowserOrigins(context.Background(), e.tenant, []string{shop}, true); err != nil {
		t.Fatal(err)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	year := fmt.Sprint(time.Now().Year() + 2)

	t.Run("EmbeddedFormHandsBackOnlyTheID", func(t *testing.T) {
		b.do(t, "open checkout", chromedp.Navigate(shop+"/checkout"), chromedp.WaitVisible(css(`#card`)))
		in := inFrame(t, b)
		// A mistyped number is refused in the form, naming the field.
		fillCard(t, b, "4242 4242 4242 4241", "12", year, "123", in)
		b.do(t, "refusal shown", chromedp.WaitVisible(css(`#status.err`), in))
		mustContain(t, "refusal", browserValue(t, b, chromedp.Text(css(`#status`), in)), "card.number")
		b.screenshot(t, "card-form-01-refused")
		// A fresh form (a new frame) for the next card.
		b.do(t, "reload checkout", chromedp.Navigate(shop+"/checkout"), chromedp.WaitVisible(css(`#card`)))
		in = inFrame(t, b)
		fillCard(t, b, "4242 4242 4242 4242", "12", year, "123", in)
		b.do(t, "saved", chromedp.WaitVisible(css(`#status.ok`), in))
		var id string
		testkit.WaitFor(t, stepTimeout, "the id in the shop's page", func() (bool, error) {
			id = b.text(t, `#result`)
			return strings.HasPrefix(id, "vpm_"), fmt.Errorf("result %q", id)
		})
		b.screenshot(t, "card-form-02-shop-got-id")
		if html := browserValue(t, b, chromedp.OuterHTML(css(`body`))); strings.Contains(html, "4242") {
			t.Fatal("the shop's page holds card digits")
		}
		for _, f := range []string{`#number`, `#cvc`} {
			if v := browserValue(t, b, chromedp.Value(css(f), in)); v != "" {
				t.Fatalf("%s still holds %q after the card was saved", f, v)
			}
		}
		res, body := e.do(t, "GET", "/v1/payment_methods/"+id, merchant, nil, nil)
		if res.StatusCode != 200 {
			t.Fatalf("merchant reads the method: %d %s", res.StatusCode, body)
		}
		pm := decode[paymentMethod](t, body)
		if pm.Card.Brand != "visa" || pm.Card.Last4 != "4242" || pm.Card.ExpMonth != 12 || fmt.Sprint(pm.Card.ExpYear) != year {
			t.Fatalf("method %s", body)
		}
		noCardIn(t, "logs", e.logs.String(), visa)
	})

	t.Run("LinkedFormReturnsToTheShop", func(t *testing.T) {
		u := e.url + "/card_form?" + url.Values{"key": {ppk}, "return_url": {shop + "/done?order=7"}}.Encode()
		b.do(t, "open form", chromedp.Navigate(u))
		fillCard(t, b, "5555555555554444", "1", year[2:], "")
		b.do(t, "back at the shop", chromedp.WaitVisible(css(`#back`)))
		loc, err := url.Parse(b.location(t))
		if err != nil {
			t.Fatal(err)
		}
		id := loc.Query().Get("payment_method")
		if !strings.HasPrefix(loc.String(), shop+"/done") || loc.Query().Get("order") != "7" || !strings.HasPrefix(id, "vpm_") {
			t.Fatalf("returned to %s", loc)
		}
		res, body := e.do(t, "GET", "/v1/payment_methods/"+id, merchant, nil, nil)
		if pm := decode[paymentMethod](t, body); res.StatusCode != 200 || pm.Card.Brand != "mastercard" || pm.Card.Last4 != "4444" {
			t.Fatalf("method: %d %s", res.StatusCode, body)
		}
	})

	t.Run("PageOfAnotherOriginIsRefused", func(t *testing.T) {
		evil := shopPage(t, e.url, ppk) // another port: another origin, not the tenant's
		// Telling the truth about its origin, it is refused by the server.
		b.do(t, "open evil checkout", chromedp.Navigate(evil+"/checkout"), chromedp.WaitVisible(css(`#card`)))
		in := inFrame(t, b)
		b.do(t, "refusal", chromedp.WaitVisible(css(`#card-form-error`), in))
		mustContain(t, "refused form", browserValue(t, b, chromedp.Text(css(`#card-form-error`), in)), "not allowed")
		if n := browserValue(t, b, chromedp.Nodes(css(`#number`), in, chromedp.AtLeast(0))); len(n) != 0 {
			t.Fatal("a page of another origin got the card fields")
		}
		b.screenshot(t, "card-form-03-refused-origin")
		// Lying (naming the shop's origin), it gets a form the browser
		// will not show in it (frame-ancestors).
		served := func() int { return strings.Count(e.logs.String(), `"route":"/card_form","status":200`) }
		before := served()
		b.do(t, "open lying checkout", chromedp.Navigate(evil+"/checkout?origin="+url.QueryEscape(shop)), chromedp.WaitVisible(css(`#card`)))
		testkit.WaitFor(t, stepTimeout, "the lying page's frame request", func() (bool, error) {
			return served() > before, nil
		})
		// Chrome blocks the answer: the frame holds its error page.
		testkit.WaitFor(t, stepTimeout, "the frame to be blocked", func() (bool, error) {
			n := browserValue(t, b, chromedp.Nodes(css(`#card`)))[0]
			if n.ContentDocument == nil {
				return false, errors.New("no document in the frame yet")
			}
			return n.ContentDocument.DocumentURL == "chrome-error://chromewebdata/", fmt.Errorf("frame at %s", n.ContentDocument.DocumentURL)
		})
		in = inFrame(t, b)
		if n := browserValue(t, b, chromedp.Nodes(css(`#number`), in, chromedp.AtLeast(0))); len(n) != 0 {
			t.Fatal("the card form rendered in a page of another origin")
		}
		b.screenshot(t, "card-form-04-blocked-frame")
	})
}

func TestCardForm(t *testing.T) {
	t.Parallel()
	const shop = "https://shop.example"
	e := newVaultEnv(t, httpapi.Config{}, shop)
	ppk := e.keys[orchestrator.RolePublishable]
	get := func(q url.Values) (*http.Response, string) {
		res, b := e.do(t, "GET", "/card_form?"+q.Encode(), "", nil, nil)
		return res, string(b)
	}

	t.Run("EmbeddableOnlyByItsOriginWithAStrictPolicy", func(t *testing.T) {
		res, page := get(url.Values{"key": {ppk}, "origin": {shop}})
		if res.StatusCode != 200 || !strings.Contains(page, `autocomplete="cc-number"`) || !strings.Contains(page, `autocomplete="cc-csc"`) {
			t.Fatalf("%d\n%s", res.StatusCode, page)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'nonce-", "connect-src 'self'", "form-action 'none'",
			"frame-ancestors " + shop} {
			if !strings.Contains(csp, want) {
				t.Fatalf("CSP %q lacks %q", csp, want)
			}
		}
		nonce := csp[strings.Index(csp, "'nonce-")+7:]
		nonce = nonce[:strings.Index(nonce, "'")]
		if strings.Count(page, `nonce="`+nonce+`"`) != 2 || strings.Contains(page, "<script src") || strings.Contains(page, "http://") {
			t.Fatalf("the page loads something but its own nonce'd script and style:\n%s", page)
		}
		if regexp.MustCompile(`<input[^>]* name=`).MatchString(page) {
			t.Fatal("a card field has a name: a native submission would carry it")
		}
		res2, _ := get(url.Values{"key": {ppk}, "origin": {shop}})
		if res2.Header.Get("Content-Security-Policy") == csp {
			t.Fatal("the nonce is not fresh per page")
		}
		// Linked, not embedded: nobody may frame it.
		res, _ = get(url.Values{"key": {ppk}, "return_url": {shop + "/done"}})
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			res.Header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("linked form: %d %v", res.StatusCode, res.Header)
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		for name, tc := range map[string]struct {
			q      url.Values
			status int
			want   string
		}{
			"NoKey":            {url.Values{"origin": {shop}}, 400, "publishable key"},
			"SecretKey":        {url.Values{"key": {e.keys[orchestrator.RoleMerchant]}, "origin": {shop}}, 400, "publishable key"},
			"UnknownKey":       {url.Values{"key": {"ppk_0000000000000000_" + strings.Repeat("A", 43)}, "origin": {shop}}, 401, "not valid"},
			"NoOriginOrReturn": {url.Values{"key": {ppk}}, 400, "origin"},
			"OtherOrigin":      {url.Values{"key": {ppk}, "origin": {"https://evil.example"}}, 403, "not allowed"},
			"OtherReturnURL":   {url.Values{"key": {ppk}, "return_url": {"https://evil.example/done"}}, 403, "not allowed"},
			"ScriptReturnURL":  {url.Values{"key": {ppk}, "return_url": {"javascript:alert(1)"}}, 403, "not allowed"},
		} {
			res, page := get(tc.q)
			if res.StatusCode != tc.status || !strings.Contains(page, tc.want) || strings.Contains(page, `id="number"`) {
				t.Fatalf("%s: %d\n%s", name, res.StatusCode, page)
			}
			if strings.Contains(page, e.keys[orchestrator.RoleMerchant]) || strings.Contains(page, "evil") {
				t.Fatalf("%s: the refusal echoes its input:\n%s", name, page)
			}
			if strings.Contains(page, "<script") || strings.Contains(page, "<input") {
				t.Fatalf("%s: a refusal holds a script or a field:\n%s", name, page)
			}
		}
	})

	t.Run("OffWithoutAVault", func(t *testing.T) {
		off := newMigratedEnv(t, httpapi.Config{})
		res, b := off.do(t, "GET", "/card_form?key="+ppk+"&origin="+url.QueryEscape(shop), "", nil, nil)
		if res.StatusCode != 503 || !strings.Contains(string(b), "not set up") {
			t.Fatalf("%d %s", res.StatusCode, b)
		}
	})
}
