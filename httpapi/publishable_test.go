package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

const shopOrigin = "https://shop.example"

func TestPublishableKeys(t *testing.T) {
	t.Parallel()
	e := newVaultEnv(t, httpapi.Config{}, shopOrigin)
	ppk, merchant := e.keys[orchestrator.RolePublishable], e.keys[orchestrator.RoleMerchant]
	fromShop := map[string]string{"Origin": shopOrigin}
	methods := func() int {
		return e.count(t, `SELECT count(*) FROM payment_methods WHERE tenant_id = $1`, e.tenant)
	}

	t.Run("MayOnlyCreatePaymentMethods", func(t *testing.T) {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/payments", ""},
			{"GET", "/v1/me", ""},
			{"GET", "/v1/payment_methods", ""},
			{"GET", "/v1/payment_methods/vpm_00000000000000000000000000000000", ""},
			{"DELETE", "/v1/payment_methods/vpm_00000000000000000000000000000000", ""},
			{"POST", "/v1/payments", `{"amount_minor":100,"currency":"EUR"}`},
			{"GET", "/v1/events", ""},
			{"GET", "/v1/nothing/here", ""},
		} {
			res, b := e.do(t, r.method, r.path, ppk, strings.NewReader(r.body), map[string]string{"Content-Type": "application/json",
				"Idempotency-Key": "ppk-" + r.method + r.path, "Origin": shopOrigin})
			wantProblem(t, res, b, 403, "forbidden")
		}
		if n := e.count(t, `SELECT count(*) FROM payments`); n != 0 {
			t.Fatalf("a publishable key made %d payments", n)
		}
	})

	t.Run("CreatesFromAnAllowedOriginWithCORSHeaders", func(t *testing.T) {
		res, b := e.createMethod(t, ppk, "ppk-create-1", cardBody(visa, visaCVC), fromShop)
		if res.StatusCode != 201 {
			t.Fatalf("create: %d %s", res.StatusCode, b)
		}
		if got := res.Header.Get("Access-Control-Allow-Origin"); got != shopOrigin {
			t.Fatalf("Access-Control-Allow-Origin %q", got)
		}
		if !strings.Contains(strings.Join(res.Header.Values("Vary"), ","), "Origin") {
			t.Fatalf("Vary %q", res.Header.Values("Vary"))
		}
		if res.Header.Get("Location") != "" {
			t.Fatalf("a publishable key is pointed at a method it cannot read: %q", res.Header.Get("Location"))
		}
		noCardIn(t, "answer", string(b), visa, visaCVC)
		pm := decode[paymentMethod](t, b)
		if !strings.HasPrefix(pm.ID, "vpm_") || pm.Card.Last4 != "4242" || pm.Card.Fingerprint != nil {
			t.Fatalf("a publishable key's answer: %s", b)
		}
		// The merchant reads it, fingerprint and all.
		res, b = e.do(t, "GET", "/v1/payment_methods/"+pm.ID, merchant, nil, nil)
		if res.StatusCode != 200 || decode[paymentMethod](t, b).Card.Fingerprint == nil {
			t.Fatalf("merchant get: %d %s", res.StatusCode, b)
		}
		var by string
		if err := e.pool.QueryRow(context.Background(), `SELECT publishable_key_id FROM payment_methods WHERE id = $1`, pm.ID).Scan(&by); err != nil || !strings.HasPrefix(by, "key_") {
			t.Fatalf("publishable_key_id %q %v", by, err)
		}
		// A validation error is readable by the page too.
		res, b = e.createMethod(t, ppk, "ppk-create-bad", cardBody("4242424242424241", ""), fromShop)
		wantProblem(t, res, b, 400, "validation_failed")
		if res.Header.Get("Access-Control-Allow-Origin") != shopOrigin {
			t.Fatal("a refusal to an allowed origin lacks Access-Control-Allow-Origin")
		}
	})

	t.Run("KeysOfPublishableAndSecretKeysAreApart", func(t *testing.T) {
		body := cardBody(mastercard, "")
		res, mine := e.createMethod(t, merchant, "shared-key", body, nil)
		if res.StatusCode != 201 {
			t.Fatalf("merchant: %d %s", res.StatusCode, mine)
		}
		res, theirs := e.createMethod(t, ppk, "shared-key", body, fromShop)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("publishable under the merchant's key: %d %v %s", res.StatusCode, res.Header, theirs)
		}
		if decode[paymentMethod](t, mine).ID == decode[paymentMethod](t, theirs).ID {
			t.Fatal("a publishable key got the merchant's method for the merchant's key")
		}
	})

	t.Run("WrongOrMissingOriginIsRefusedBeforeAnything", func(t *testing.T) {
		before := methods()
		for name, hdr := range map[string]map[string]string{
			"Missing":     nil,
			"Other":       {"Origin": "https://evil.example"},
			"Null":        {"Origin": "null"},
			"OtherScheme": {"Origin": "http://shop.example"},
			"OtherPort":   {"Origin": "https://shop.example:8443"},
		} {
			res, b := e.createMethod(t, ppk, "ppk-origin-"+name, cardBody(visa, ""), hdr)
			wantProblem(t, res, b, 403, "forbidden")
			if res.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("%s: Access-Control-Allow-Origin %q", name, res.Header.Get("Access-Control-Allow-Origin"))
			}
		}
		if got := methods(); got != before {
			t.Fatalf("refused requests made %d methods", got-before)
		}
		if n := e.count(t, `SELECT count(*) FROM idempotency_keys WHERE key LIKE 'ppk-origin-%'`); n != 0 {
			t.Fatalf("refused requests claimed %d keys", n)
		}
		// The server's own origin (its card form) may.
		res, b := e.createMethod(t, ppk, "ppk-self", cardBody(visa, ""), map[string]string{"Origin": e.url})
		if res.StatusCode != 201 || res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("own origin: %d %v %s", res.StatusCode, res.Header, b)
		}
		// A secret key is no browser's: no CORS headers for it.
		res, b = e.createMethod(t, merchant, "merchant-from-shop", cardBody(visa, ""), fromShop)
		if res.StatusCode != 201 || res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("merchant from an origin: %d %v %s", res.StatusCode, res.Header, b)
		}
	})

	t.Run("PreflightNeedsNoKey", func(t *testing.T) {
		res, b := e.do(t, "OPTIONS", "/v1/payment_methods", "", nil, map[string]string{"Origin": shopOrigin,
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type,idempotency-key"})
		if res.StatusCode != 204 {
			t.Fatalf("preflight: %d %s", res.StatusCode, b)
		}
		h := res.Header
		if h.Get("Access-Control-Allow-Origin") != shopOrigin || h.Get("Access-Control-Allow-Methods") != "POST" ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Idempotency-Key") ||
			!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || h.Get("Access-Control-Max-Age") == "" {
			t.Fatalf("preflight headers %v", h)
		}
		res, b = e.do(t, "OPTIONS", "/v1/payment_methods", "", nil, map[string]string{"Origin": shopOrigin,
			"Access-Control-Request-Method": "DELETE"})
		wantProblem(t, res, b, 403, "forbidden")
		res, b = e.do(t, "OPTIONS", "/v1/payment_methods", "", nil, map[string]string{"Origin": shopOrigin,
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-secret"})
		wantProblem(t, res, b, 403, "forbidden")
		if res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("a refused preflight allows the origin")
		}
	})

	t.Run("CannotSignInToTheConsole", func(t *testing.T) {
		cc := newConsoleClient(t, e.url)
		res, page := cc.signIn(ppk)
		if res.StatusCode != 403 || !strings.Contains(page, "publishable key cannot sign in") {
			t.Fatalf("console sign-in with a publishable key: %d\n%s", res.StatusCode, page)
		}
		if n := e.count(t, `SELECT count(*) FROM console_sessions`); n != 0 {
			t.Fatalf("%d sessions", n)
		}
	})
}

func TestPublishableThrottles(t *testing.T) {
	t.Parallel()

	t.Run("PerClientAddress", func(t *testing.T) {
		t.Parallel()
		e := newVaultEnv(t, httpapi.Config{PublishableClientLimit: 3, PublishableKeyLimit: -1}, shopOrigin)
		_, other, err := e.svc.CreateAPIKey(context.Background(), orchestrator.RolePublishable, e.tenant, "")
		if err != nil {
			t.Fatal(err)
		}
		// Three from this address, with two keys; the fourth is refused
		// whatever the key.
		for i, key := range []string{e.keys[orchestrator.RolePublishable], other, other} {
			if res, b := e.createMethod(t, key, "ip-"+strconv.Itoa(i), cardBody(visa, ""), map[string]string{"Origin": shopOrigin}); res.StatusCode != 201 {
				t.Fatalf("create %d: %d %s", i, res.StatusCode, b)
			}
		}
		res, b := e.createMethod(t, e.keys[orchestrator.RolePublishable], "ip-3", cardBody(visa, ""), map[string]string{"Origin": shopOrigin})
		wantProblem(t, res, b, 429, "rate_limited")
		if ra, _ := strconv.Atoi(res.Header.Get("Retry-After")); ra < 1 || ra > 20 {
			t.Fatalf("Retry-After %q", res.Header.Get("Retry-After"))
		}
		if res.Header.Get("Access-Control-Allow-Origin") != shopOrigin {
			t.Fatal("the page cannot read its 429")
		}
		// Secret keys are the merchant's servers: not throttled here.
		if res, b := e.createMethod(t, e.keys[orchestrator.RoleMerchant], "ip-merchant", cardBody(visa, ""), nil); res.StatusCode != 201 {
			t.Fatalf("merchant: %d %s", res.StatusCode, b)
		}
	})

	t.Run("PerKey", func(t *testing.T) {
		t.Parallel()
		// A stopped clock (no refill however slow the test); expiry is
		// checked against it too.
		now := time.Now()
		e := newVaultEnv(t, httpapi.Config{PublishableKeyLimit: 2, PublishableClientLimit: -1, Clock: func() time.Time { return now }}, shopOrigin)
		ppk := e.keys[orchestrator.RolePublishable]
		for i := range 2 {
			if res, b := e.createMethod(t, ppk, "key-"+strconv.Itoa(i), cardBody(visa, ""), map[string]string{"Origin": shopOrigin}); res.StatusCode != 201 {
				t.Fatalf("create %d: %d %s", i, res.StatusCode, b)
			}
		}
		res, b := e.createMethod(t, ppk, "key-2", cardBody(visa, ""), map[string]string{"Origin": shopOrigin})
		wantProblem(t, res, b, 429, "rate_limited")
		if res.Header.Get("Retry-After") != "30" { // 2 a minute: one every 30 s
			t.Fatalf("Retry-After %q", res.Header.Get("Retry-After"))
		}
		_, other, err := e.svc.CreateAPIKey(context.Background(), orchestrator.RolePublishable, e.tenant, "")
		if err != nil {
			t.Fatal(err)
		}
		if res, b := e.createMethod(t, other, "key-other", cardBody(visa, ""), map[string]string{"Origin": shopOrigin}); res.StatusCode != 201 {
			t.Fatalf("another key has its own bucket: %d %s", res.StatusCode, b)
		}
	})
}

func TestBrowserOriginsAPI(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	admin := e.keys[orchestrator.RoleAdmin]
	path := "/v1/tenants/" + strconv.FormatInt(e.tenant, 10) + "/browser_origins"
	put := func(key, body string) (*http.Response, []byte) {
		return e.do(t, "PUT", path, key, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	}
	res, b := e.do(t, "GET", path, admin, nil, nil)
	if res.StatusCode != 200 || string(b) != `{"tenant_id":`+strconv.FormatInt(e.tenant, 10)+`,"origins":[]}`+"\n" {
		t.Fatalf("get: %d %s", res.StatusCode, b)
	}
	res, b = put(admin, `{"origins":["https://Shop.example:443","https://pay.shop.example"]}`)
	if res.StatusCode != 200 || !strings.Contains(string(b), `"origins":["https://shop.example","https://pay.shop.example"]`) {
		t.Fatalf("put: %d %s", res.StatusCode, b)
	}
	for body, param := range map[string]string{
		`{"origins":["https://shop.example/pay"]}`:                  "origins[0]",
		`{"origins":["https://a.example","http://localhost:3000"]}`: "origins[1]",
		`{"origins":"https://shop.example"}`:                        "origins",
		`{}`:                                                        "origins",
		`{"origins":["https://a.example"],"x":1}`:                   "x",
	} {
		res, b := put(admin, body)
		if p := wantProblem(t, res, b, 400, "validation_failed"); p.Param != param {
			t.Fatalf("%s: param %q, want %s", body, p.Param, param)
		}
	}
	if res, b = e.do(t, "GET", path, admin, nil, nil); !strings.Contains(string(b), "pay.shop.example") {
		t.Fatalf("refused puts changed the origins: %s", b)
	}
	res, b = put(e.keys[orchestrator.RoleMerchant], `{"origins":[]}`)
	wantProblem(t, res, b, 403, "forbidden")
	res, b = e.do(t, "PUT", "/v1/tenants/999999/browser_origins", admin, strings.NewReader(`{"origins":[]}`),
		map[string]string{"Content-Type": "application/json"})
	wantProblem(t, res, b, 404, "not_found")
	res, b = put(admin, `{"origins":[]}`)
	if res.StatusCode != 200 || !strings.Contains(string(b), `"origins":[]`) {
		t.Fatalf("clear: %d %s", res.StatusCode, b)
	}
}
