package httpapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

// consoleCookies GETs the sign-in form with the headers hdr and returns
// the cookies it sets.
func consoleCookies(t *testing.T, c *http.Client, base string, hdr map[string]string) map[string]*http.Cookie {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/console/signin", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("sign-in form: %d", res.StatusCode)
	}
	got := map[string]*http.Cookie{}
	for _, ck := range res.Cookies() {
		got[ck.Name] = ck
	}
	if got["payorch_signin"] == nil {
		t.Fatal("the sign-in form set no payorch_signin cookie")
	}
	return got
}

// signInCookies signs in with key through cc (its cookie jar must not
// drop Secure cookies: an https base) and returns the cookies of the
// answer.
func signInCookies(t *testing.T, cc *consoleClient, key string, hdr map[string]string) map[string]*http.Cookie {
	t.Helper()
	res, body := cc.signInWith(key, hdr)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d\n%s", res.StatusCode, body)
	}
	got := map[string]*http.Cookie{}
	for _, ck := range res.Cookies() {
		got[ck.Name] = ck
	}
	if got["payorch_session"] == nil || got["payorch_signin"] == nil {
		t.Fatalf("sign-in set %v, want the session and the cleared form cookie", got)
	}
	return got
}

func wantSecure(t *testing.T, what string, cookies map[string]*http.Cookie, secure bool) {
	t.Helper()
	for name, ck := range cookies {
		if ck.Secure != secure {
			t.Errorf("%s: cookie %s Secure=%v, want %v", what, name, ck.Secure, secure)
		}
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
			t.Errorf("%s: cookie %s is not HttpOnly and SameSite=Strict: %+v", what, name, ck)
		}
	}
}

// selfSignedCert makes a certificate for 127.0.0.1 and localhost, valid
// for an hour, and a pool that trusts it.
func selfSignedCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, roots := testkit.SelfSignedCert(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert, roots
}

func TestConsoleCookiesAreSecureBehindTLS(t *testing.T) {
	t.Parallel()

	t.Run("PlainHTTPWithoutATrustedProxyIsNotSecure", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		wantSecure(t, "plain http", consoleCookies(t, http.DefaultClient, e.url, nil), false)
		// No proxy is trusted: a forwarded scheme is the client's word.
		wantSecure(t, "untrusted X-Forwarded-Proto", consoleCookies(t, http.DefaultClient, e.url,
			map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Ssl": "on"}), false)
	})

	t.Run("ATrustedProxysForwardedHTTPSMakesThemSecure", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		https := map[string]string{"X-Forwarded-Proto": "https"}
		wantSecure(t, "trusted proxy, https", consoleCookies(t, http.DefaultClient, e.url, https), true)
		wantSecure(t, "trusted proxy, http", consoleCookies(t, http.DefaultClient, e.url,
			map[string]string{"X-Forwarded-Proto": "http"}), false)
		wantSecure(t, "trusted proxy, no header", consoleCookies(t, http.DefaultClient, e.url, nil), false)
		// The nearest proxy's value (the last) counts, not what the
		// client put before it.
		wantSecure(t, "trusted proxy appending to a forged value", consoleCookies(t, http.DefaultClient, e.url,
			map[string]string{"X-Forwarded-Proto": "https, http"}), false)
		cc := newConsoleClient(t, e.url)
		wantSecure(t, "sign-in through the proxy", signInCookies(t, cc, e.keys[orchestrator.RoleSupport], https), true)

		// The same header from a peer that is not a trusted proxy is
		// ignored.
		other := newConsoleClientFrom(t, e.url, "127.0.0.2")
		wantSecure(t, "untrusted peer", consoleCookies(t, other.c, e.url, https), false)
	})

	t.Run("AnHTTPSPublicURLAlwaysMakesThemSecure", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{PublicURL: &url.URL{Scheme: "https", Host: "pay.example.com"}})
		wantSecure(t, "plain http, https public URL", consoleCookies(t, http.DefaultClient, e.url, nil), true)
		// The jar of an http base would drop Secure cookies: send them
		// by hand, as the proxy in front would.
		cc := newConsoleClient(t, e.url)
		cc.c.Jar = nil
		res, page := cc.get("/console/signin")
		form := url.Values{"csrf_token": {csrfOf(t, page)}, "api_key": {e.keys[orchestrator.RoleSupport]}}
		req, _ := http.NewRequest("POST", e.url+"/console/signin", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, ck := range res.Cookies() {
			req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
		}
		res, err := (&http.Transport{}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got := map[string]*http.Cookie{}
		for _, ck := range res.Cookies() {
			got[ck.Name] = ck
		}
		if res.StatusCode != http.StatusSeeOther || got["payorch_session"] == nil {
			t.Fatalf("sign-in: %d %v", res.StatusCode, got)
		}
		wantSecure(t, "sign-in, https public URL", got, true)

		e = newMigratedEnv(t, httpapi.Config{PublicURL: &url.URL{Scheme: "http", Host: "127.0.0.1:8080"}})
		wantSecure(t, "plain http, http public URL", consoleCookies(t, http.DefaultClient, e.url, nil), false)
	})

	t.Run("NativeTLSServesHTTPSAndMakesThemSecure", func(t *testing.T) {
		t.Parallel()
		cert, roots := selfSignedCert(t)
		e := newMigratedEnv(t, httpapi.Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- e.srv.Serve(ctx, l) }()
		base := "https://" + l.Addr().String()
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
		defer tr.CloseIdleConnections()

		cc := newConsoleClient(t, base)
		cc.c.Transport = tr
		res, _ := cc.get("/console/signin")
		if res.TLS == nil || len(res.TLS.PeerCertificates) == 0 || !res.TLS.PeerCertificates[0].Equal(cert.Leaf) {
			t.Fatalf("the console was not served over TLS with the configured certificate: %+v", res.TLS)
		}
		wantSecure(t, "native TLS", consoleCookies(t, cc.c, base, nil), true)
		wantSecure(t, "sign-in over TLS", signInCookies(t, cc, e.keys[orchestrator.RoleSupport], nil), true)
		// The jar sends the Secure session back over https.
		if res, body := cc.get("/console/search"); res.StatusCode != http.StatusOK || res.Request.URL.Path != "/console/search" {
			t.Fatalf("signed-in page over TLS: %d %s\n%s", res.StatusCode, res.Request.URL, body)
		}
		// The API is there too, and plain HTTP is not.
		res, err = (&http.Client{Transport: tr}).Get(base + "/readyz")
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("readyz over TLS: %v %v", res, err)
		}
		res.Body.Close()
		if res, err := http.Get("http://" + l.Addr().String() + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				t.Fatal("the TLS listener answers plain HTTP")
			}
		}
		// A client that does not trust the certificate is refused.
		if _, err := http.Get(base + "/readyz"); err == nil {
			t.Fatal("an unverified certificate was accepted")
		}

		cancel()
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
	})
}

func TestConsoleTakesTheCSRFTokenOnlyFromTheFormBody(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	_, r := consoleFixture(t, e)
	// postWithTokenInQuery posts form to path with the CSRF token in the
	// query string only.
	postWithTokenInQuery := func(cc *consoleClient, path, token string, form url.Values) (*http.Response, string) {
		cc.t.Helper()
		return cc.post(path+"?csrf_token="+url.QueryEscape(token), form)
	}
	wantRefused := func(t *testing.T, what string, res *http.Response, body string) {
		t.Helper()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %d, want 403\n%s", what, res.StatusCode, body)
		}
	}

	t.Run("SignIn", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		_, page := cc.get("/console/signin")
		token := csrfOf(t, page)
		before := e.count(t, `SELECT count(*) FROM console_sessions`)
		res, body := postWithTokenInQuery(cc, "/console/signin", token, url.Values{"api_key": {e.keys[orchestrator.RoleSupport]}})
		wantRefused(t, "sign-in with the token in the query", res, body)
		if n := e.count(t, `SELECT count(*) FROM console_sessions`); n != before {
			t.Fatal("a sign-in with the token in the query made a session")
		}
		if res, _ := cc.get("/console/search"); res.Request.URL.Path != "/console/signin" {
			t.Fatalf("signed in by a token in the query: reached %s", res.Request.URL.Path)
		}
		// The same form with the token in its body signs in.
		_, page = cc.get("/console/signin")
		if res, _ := cc.post("/console/signin", url.Values{"csrf_token": {csrfOf(t, page)}, "api_key": {e.keys[orchestrator.RoleSupport]}}); res.Request.URL.Path != "/console/search" {
			t.Fatalf("sign-in with the token in the body went to %s", res.Request.URL.Path)
		}
	})

	t.Run("SignOut", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		_, page := cc.signIn(e.keys[orchestrator.RoleSupport])
		token := csrfOf(t, page)
		res, body := postWithTokenInQuery(cc, "/console/signout", token, url.Values{})
		wantRefused(t, "sign-out with the token in the query", res, body)
		if res, _ := cc.get("/console/search"); res.StatusCode != http.StatusOK || res.Request.URL.Path != "/console/search" {
			t.Fatalf("a sign-out with the token in the query ended the session: %d %s", res.StatusCode, res.Request.URL.Path)
		}
		if res, _ := cc.post("/console/signout", url.Values{"csrf_token": {token}}); res.Request.URL.Path != "/console/signin" {
			t.Fatalf("sign-out with the token in the body went to %s", res.Request.URL.Path)
		}
	})

	t.Run("Resolve", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		cc.signIn(e.keys[orchestrator.RoleFinance])
		_, page := cc.get(fmt.Sprintf("/console/runs/%d", r.ID))
		m := regexp.MustCompile(`/console/discrepancies/(\d+)/resolve`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no resolve form on the run page\n%s", page)
		}
		path := m[0]
		token := csrfOf(t, page)
		res, body := postWithTokenInQuery(cc, path, token, url.Values{"note": {"resolved through the query"}})
		wantRefused(t, "resolve with the token in the query", res, body)
		if n := e.count(t, `SELECT count(*) FROM reconciliation_discrepancies WHERE resolved_at IS NOT NULL`); n != 0 {
			t.Fatalf("a resolve with the token in the query resolved %d discrepancies", n)
		}
		if res, _ := cc.post(path, url.Values{"csrf_token": {token}, "note": {"checked"}}); res.StatusCode != http.StatusOK {
			t.Fatalf("resolve with the token in the body: %d", res.StatusCode)
		}
		if n := e.count(t, `SELECT count(*) FROM reconciliation_discrepancies WHERE resolved_at IS NOT NULL`); n != 1 {
			t.Fatalf("%d discrepancies resolved, want 1", n)
		}
	})
}
