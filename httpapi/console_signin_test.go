package httpapi_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// newConsoleClientFrom is newConsoleClient whose connections come from
// the loopback address from (any of 127.0.0.0/8 on Linux), so the server
// sees another client address.
func newConsoleClientFrom(t *testing.T, base, from string) *consoleClient {
	t.Helper()
	cc := newConsoleClient(t, base)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	cc.c.Transport = tr
	return cc
}

// signInWith posts the sign-in form with key and the extra headers hdr,
// not following the redirect of a successful sign-in.
func (cc *consoleClient) signInWith(key string, hdr map[string]string) (*http.Response, string) {
	cc.t.Helper()
	_, page := cc.get("/console/signin")
	form := url.Values{"csrf_token": {csrfOf(cc.t, page)}, "api_key": {key}}
	req, err := http.NewRequest("POST", cc.base+"/console/signin", strings.NewReader(form.Encode()))
	if err != nil {
		cc.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := *cc.c
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.Do(req)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		cc.t.Fatal(err)
	}
	return res, string(b)
}

// stoppedClock is a clock near the real time (cookies' Max-Age is counted
// from the real one) that moves only when advanced, so no token refills
// while a test runs, however slowly.
func stoppedClock() (now func() time.Time, advance func(time.Duration)) {
	base := time.Now()
	var offset atomic.Int64
	return func() time.Time { return base.Add(time.Duration(offset.Load())) },
		func(d time.Duration) { offset.Add(int64(d)) }
}

const wrongKey = "pok_0123456789abcdef_notthesecretnotthesecretnotthesecretxxxxxxx"

// wantSignIn asserts a sign-in answer: 303 to the console when signed in,
// else status.
func wantSignIn(t *testing.T, what string, res *http.Response, body string, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, res.StatusCode, status, body)
	}
	signedIn := false
	for _, c := range res.Cookies() {
		if c.Name == "payorch_session" && c.Value != "" {
			signedIn = true
		}
	}
	if signedIn != (status == http.StatusSeeOther) {
		t.Fatalf("%s: status %d but session cookie set: %v", what, status, signedIn)
	}
}

// wantLimited asserts the 429 of a blocked client with its Retry-After.
func wantLimited(t *testing.T, what string, res *http.Response, body, retryAfter string) {
	t.Helper()
	wantSignIn(t, what, res, body, http.StatusTooManyRequests)
	if got := res.Header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("%s: Retry-After %q, want %q", what, got, retryAfter)
	}
	mustContain(t, what, body, "Too many failed sign-ins", `id="api_key"`)
}

func TestConsoleSignInLimit(t *testing.T) {
	t.Parallel()

	t.Run("PerClientAddressAndLiftsOverTheWindow", func(t *testing.T) {
		t.Parallel()
		clock, advance := stoppedClock()
		e := newMigratedEnv(t, httpapi.Config{Clock: clock})
		key := e.keys[orchestrator.RoleSupport]

		cc := newConsoleClient(t, e.url) // from 127.0.0.1
		for range 10 {
			res, body := cc.signInWith(wrongKey, nil)
			wantSignIn(t, "wrong key", res, body, http.StatusUnauthorized)
			mustContain(t, "wrong key", body, "was not accepted")
		}
		sessions := e.count(t, `SELECT count(*) FROM console_sessions`)
		// The 11th attempt is refused without looking at the key: the
		// right key too. 10 per 5 minutes refill one every 30s.
		res, body := cc.signInWith(key, nil)
		wantLimited(t, "right key while blocked", res, body, "30")
		if n := e.count(t, `SELECT count(*) FROM console_sessions`); n != sessions {
			t.Fatal("a blocked sign-in made a session")
		}
		if res, _ := cc.get("/console/search"); res.Request.URL.Path != "/console/signin" {
			t.Fatalf("a blocked client reached %s", res.Request.URL.Path)
		}
		// Forwarding headers are not believed unless a proxy is trusted.
		res, body = cc.signInWith(key, map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Real-Ip": "203.0.113.8"})
		wantLimited(t, "spoofed X-Forwarded-For", res, body, "30")

		// Another client address is not affected.
		other := newConsoleClientFrom(t, e.url, "127.0.0.2")
		res, body = other.signInWith(wrongKey, nil)
		wantSignIn(t, "other client's wrong key", res, body, http.StatusUnauthorized)
		res, body = other.signInWith(key, nil)
		wantSignIn(t, "other client's right key", res, body, http.StatusSeeOther)

		// A token is back after 30s: one more try, then blocked again.
		advance(29 * time.Second)
		res, body = cc.signInWith(key, nil)
		wantLimited(t, "after 29s", res, body, "1")
		advance(time.Second)
		res, body = cc.signInWith(wrongKey, nil)
		wantSignIn(t, "after 30s", res, body, http.StatusUnauthorized)
		res, body = cc.signInWith(key, nil)
		wantLimited(t, "after the 11th failure", res, body, "30")

		// After the window the client may sign in again, and has its full
		// allowance back.
		advance(5 * time.Minute)
		res, body = cc.signInWith(key, nil)
		wantSignIn(t, "after the window", res, body, http.StatusSeeOther)
		for range 10 {
			res, body = cc.signInWith(wrongKey, nil)
			wantSignIn(t, "wrong key after the window", res, body, http.StatusUnauthorized)
		}
		res, body = cc.signInWith(key, nil)
		wantLimited(t, "blocked again", res, body, "30")

		rm := e.metricsNow(t)
		wantPoint(t, rm, "payorch.http.requests", map[string]string{"method": "POST", "route": "/console/signin", "status": "429"}, 5)
		mustContain(t, "logs", e.logs.String(), `"code":"rate_limited"`)
	})

	t.Run("SuccessfulSignInsDoNotCount", func(t *testing.T) {
		t.Parallel()
		clock, _ := stoppedClock()
		e := newMigratedEnv(t, httpapi.Config{ConsoleSignInLimit: 3, Clock: clock})
		cc := newConsoleClient(t, e.url)
		for range 5 {
			res, body := cc.signInWith(e.keys[orchestrator.RoleSupport], nil)
			wantSignIn(t, "right key", res, body, http.StatusSeeOther)
		}
		for range 2 {
			res, body := cc.signInWith(wrongKey, nil)
			wantSignIn(t, "wrong key", res, body, http.StatusUnauthorized)
		}
		// A key of one's own does not reset the count either.
		res, body := cc.signInWith(e.keys[orchestrator.RoleSupport], nil)
		wantSignIn(t, "right key between failures", res, body, http.StatusSeeOther)
		res, body = cc.signInWith(wrongKey, nil)
		wantSignIn(t, "3rd wrong key", res, body, http.StatusUnauthorized)
		res, body = cc.signInWith(e.keys[orchestrator.RoleSupport], nil)
		wantLimited(t, "after the 3rd failure", res, body, "100") // 3 per 5 minutes: one per 100s
	})

	t.Run("FormsThatCheckNoKeyDoNotCount", func(t *testing.T) {
		t.Parallel()
		clock, _ := stoppedClock()
		e := newMigratedEnv(t, httpapi.Config{ConsoleSignInLimit: 1, Clock: clock})
		cc := newConsoleClient(t, e.url)
		for range 3 {
			res, body := cc.signInWith("", nil)
			wantSignIn(t, "empty key", res, body, http.StatusUnauthorized)
			res, body = cc.post("/console/signin", url.Values{"csrf_token": {"guess"}, "api_key": {wrongKey}})
			wantSignIn(t, "forged form", res, body, http.StatusForbidden)
		}
		res, body := cc.signInWith(e.keys[orchestrator.RoleSupport], nil)
		wantSignIn(t, "right key", res, body, http.StatusSeeOther)
	})

	t.Run("BehindATrustedProxyTheForwardedClientCounts", func(t *testing.T) {
		t.Parallel()
		clock, _ := stoppedClock()
		e := newMigratedEnv(t, httpapi.Config{Clock: clock, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		key := e.keys[orchestrator.RoleSupport]
		cc := newConsoleClient(t, e.url)
		from := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
		for range 10 {
			res, body := cc.signInWith(wrongKey, from("198.51.100.1"))
			wantSignIn(t, "wrong key", res, body, http.StatusUnauthorized)
		}
		res, body := cc.signInWith(key, from("198.51.100.1"))
		wantLimited(t, "forwarded client", res, body, "30")
		// What the client put before its address is not believed: the
		// proxy appends the address it saw.
		res, body = cc.signInWith(key, from("192.0.2.55, 198.51.100.1"))
		wantLimited(t, "client with a forged hop", res, body, "30")
		// Other forwarded clients, and the proxy's own address, are not
		// affected.
		res, body = cc.signInWith(key, from("198.51.100.2"))
		wantSignIn(t, "another forwarded client", res, body, http.StatusSeeOther)
		res, body = cc.signInWith(key, nil)
		wantSignIn(t, "the proxy itself", res, body, http.StatusSeeOther)
		// A header from an untrusted peer is ignored: 127.0.0.2 is the
		// client, whatever it forwards.
		other := newConsoleClientFrom(t, e.url, "127.0.0.2")
		for range 10 {
			res, body = other.signInWith(wrongKey, from("198.51.100.3"))
			wantSignIn(t, "untrusted peer's wrong key", res, body, http.StatusUnauthorized)
		}
		res, body = other.signInWith(key, from("198.51.100.4"))
		wantLimited(t, "untrusted peer", res, body, "30")
		res, body = cc.signInWith(key, from("198.51.100.3"))
		wantSignIn(t, "forwarded client named by an untrusted peer", res, body, http.StatusSeeOther)
	})

	t.Run("AConcurrentBurstIsCountedBeforeAnyKeyIsChecked", func(t *testing.T) {
		t.Parallel()
		clock, _ := stoppedClock()
		e := newMigratedEnv(t, httpapi.Config{Clock: clock}) // 10 per 5 minutes
		key := e.keys[orchestrator.RoleSupport]

		// One sign-in form for the whole burst (the double-submit token
		// is per form, not per attempt), so the attempts start together.
		cc := newConsoleClient(t, e.url)
		_, page := cc.get("/console/signin")
		token := csrfOf(t, page)
		u, _ := url.Parse(e.url + "/console/signin")
		var formCookie string
		for _, ck := range cc.c.Jar.Cookies(u) {
			if ck.Name == "payorch_signin" {
				formCookie = ck.Value
			}
		}
		tr := &http.Transport{MaxIdleConnsPerHost: -1}
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

		const burst = 200
		type answer struct {
			right  bool
			status int
			retry  string
			err    error
		}
		answers := make([]answer, burst)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range burst {
			right := i%50 == 25 // 4 right keys among 196 wrong ones
			k := wrongKey
			if right {
				k = key
			}
			wg.Go(func() {
				form := url.Values{"csrf_token": {token}, "api_key": {k}}
				req, _ := http.NewRequest("POST", e.url+"/console/signin", strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.AddCookie(&http.Cookie{Name: "payorch_signin", Value: formCookie})
				<-start
				res, err := client.Do(req)
				if err != nil {
					answers[i] = answer{right: right, err: err}
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				answers[i] = answer{right: right, status: res.StatusCode, retry: res.Header.Get("Retry-After")}
			})
		}
		close(start)
		wg.Wait()

		evaluated, signedIn := 0, 0
		var retries []string
		for _, a := range answers {
			switch {
			case a.err != nil:
				t.Fatalf("sign-in request: %v", a.err)
			case a.status == http.StatusTooManyRequests:
				retries = append(retries, a.retry)
			case !a.right && a.status == http.StatusUnauthorized:
				evaluated++
			case a.right && a.status == http.StatusSeeOther:
				signedIn++
			default:
				t.Fatalf("right key %v answered %d", a.right, a.status)
			}
		}
		t.Logf("burst of %d: %d wrong keys checked, %d right keys signed in", burst, evaluated, signedIn)
		if evaluated < 1 || evaluated > 10 {
			t.Fatalf("%d wrong keys were checked in a burst against a limit of 10", evaluated)
		}
		for _, r := range retries {
			if r != "30" {
				t.Fatalf("429 with Retry-After %q, want 30", r)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM console_sessions`); n != signedIn {
			t.Fatalf("%d sessions for %d successful sign-ins", n, signedIn)
		}
		// Exactly the checked wrong keys were counted: what is left of
		// the allowance is 10 minus them (a right key in the burst took
		// nothing for good), and then the right key is refused too.
		for i := evaluated; i < 10; i++ {
			res, body := cc.signInWith(wrongKey, nil)
			wantSignIn(t, fmt.Sprintf("wrong key %d after the burst", i+1), res, body, http.StatusUnauthorized)
		}
		res, body := cc.signInWith(key, nil)
		wantLimited(t, "right key after 10 failures", res, body, "30")
	})

	t.Run("NegativeLimitTurnsItOff", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{ConsoleSignInLimit: -1})
		cc := newConsoleClient(t, e.url)
		for range 12 {
			res, body := cc.signInWith(wrongKey, nil)
			wantSignIn(t, "wrong key", res, body, http.StatusUnauthorized)
		}
		res, body := cc.signInWith(e.keys[orchestrator.RoleSupport], nil)
		wantSignIn(t, "right key", res, body, http.StatusSeeOther)
	})
}
