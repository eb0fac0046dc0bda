package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// metricsStub stands in for the Prometheus handler cmd/payorch wires.
var metricsStub = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, "# TYPE up gauge\nup 1\n")
})

// loadOpenAPI parses and validates the embedded document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPI())
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// documentedOperations lists the document's operations as "METHOD /path".
func documentedOperations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	sort.Strings(ops)
	return ops
}

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)

	t.Run("ProblemCodesAreEveryCode", func(t *testing.T) {
		codes := map[string]bool{}
		for _, v := range doc.Components.Schemas["Problem"].Value.Properties["code"].Value.Enum {
			codes[v.(string)] = true
		}
		want := []orchestrator.Code{
			orchestrator.CodeIdempotencyKeyMissing, orchestrator.CodeIdempotencyKeyInvalid,
			orchestrator.CodeIdempotencyKeyReused, orchestrator.CodeIdempotencyKeyInUse,
			orchestrator.CodeValidationFailed, orchestrator.CodePaymentDeclined, orchestrator.CodePaymentStateConflict,
			orchestrator.CodeAmountExceedsAuthorized, orchestrator.CodeAmountExceedsLimit, orchestrator.CodeNotSupported,
			orchestrator.CodeNotFound, orchestrator.CodeConflict,
			orchestrator.CodeMethodNotAllowed, orchestrator.CodeUnauthorized, orchestrator.CodeForbidden,
			orchestrator.CodeBodyTooLarge, orchestrator.CodeUnsupportedMediaType, orchestrator.CodeProviderUnavailable,
			orchestrator.CodeRateLimited, orchestrator.CodeUnavailable, orchestrator.CodeInternal,
		}
		for _, c := range want {
			if !codes[string(c)] {
				t.Errorf("Problem.code lacks %q", c)
			}
		}
		if len(codes) != len(want) {
			t.Errorf("Problem.code has %d codes, orchestrator %d", len(codes), len(want))
		}
	})

	t.Run("DiscrepancyCategoriesAreEveryCategory", func(t *testing.T) {
		var documented []string
		for _, v := range doc.Components.Schemas["DiscrepancyCategory"].Value.Enum {
			documented = append(documented, v.(string))
		}
		if !slices.Equal(documented, reconcile.Categories) {
			t.Errorf("DiscrepancyCategory is %q, reconcile.Categories %q", documented, reconcile.Categories)
		}
	})

	t.Run("EveryRouteIsDocumentedAndTheReverse", func(t *testing.T) {
		e := newMigratedEnv(t, httpapi.Config{MetricsHandler: metricsStub})
		var routes []string
		for _, r := range e.srv.Echo().Routes() {
			// Skip newEnv's test-only routes and Echo's own not-found
			// routes of the /v1 group.
			if strings.HasPrefix(r.Path, "/test/") || r.Method == echo.RouteNotFound {
				continue
			}
			path := r.Path
			for _, seg := range strings.Split(r.Path, "/") {
				if strings.HasPrefix(seg, ":") {
					path = strings.Replace(path, seg, "{"+seg[1:]+"}", 1)
				}
			}
			routes = append(routes, r.Method+" "+path)
		}
		sort.Strings(routes)
		routes = slices.Compact(routes)
		documented := documentedOperations(doc)
		for _, r := range routes {
			if !slices.Contains(documented, r) {
				t.Errorf("route %s is not in openapi.yaml", r)
			}
		}
		for _, op := range documented {
			if !slices.Contains(routes, op) {
				t.Errorf("openapi.yaml documents %s, which the router lacks", op)
			}
		}
	})
}

// contract drives the real server and validates every request and
// response against openapi.yaml.
type contract struct {
	*env
	router routers.Router
	// exercised counts the documented operations the flows hit.
	exercised map[string]bool
}

// contractHookSecret is the webhook secret of the contract's connector
// hooked.
const contractHookSecret = "whsec_contract"

func newContract(t *testing.T) *contract {
	t.Helper()
	// Connector hooked takes webhooks signed with contractHookSecret (its
	// provider is never called).
	// With a vault on the same database, for the payment methods.
	pool := pgtest.Pool(t, testDBURL(t))
	cfg := httpapi.Config{MetricsHandler: metricsStub, AllowHTTPLoopbackOrigins: true,
		Vault: vault.New(vault.Config{Pool: pool, Keys: testVaultKeys(t)})}
	e := newMigratedEnv(t, cfg, orchestrator.Config{Pool: pool, Providers: map[string]providers.Provider{
		"hooked": fake.NewClient("http://127.0.0.1:9", nil).WithWebhookSecret(contractHookSecret)}})
	return contractOn(t, e)
}

// The card form's pages are text/html, which the validator does not read
// by itself: it checks them as the strings the document says they are.
func init() {
	openapi3filter.RegisterBodyDecoder("text/html", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef,
		_ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
}

// contractOn validates the requests to e's server against the document.
func contractOn(t *testing.T, e *env) *contract {
	t.Helper()
	doc := loadOpenAPI(t)
	doc.Servers = openapi3.Servers{{URL: e.url}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{env: e, router: router, exercised: map[string]bool{}}
}

// call is one request of a flow.
type call struct {
	method, path string
	apiKey       string
	idemKey      string
	body         string
	hdr          map[string]string
	// offContract: the request breaks the document on purpose (to see the
	// server refuse it); the validator must refuse it too.
	offContract bool
}

func bearerOnly(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme.Type != "http" || in.SecurityScheme.Scheme != "bearer" {
		return fmt.Errorf("unexpected security scheme %s %s", in.SecurityScheme.Type, in.SecurityScheme.Scheme)
	}
	scheme, key, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return fmt.Errorf("no bearer API key")
	}
	return nil
}

// do sends c, validating the request and the response against the
// document; any violation fails the test.
func (ct *contract) do(t *testing.T, c call) (*http.Response, []byte) {
	t.Helper()
	newReq := func() *http.Request {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, ct.url+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.apiKey)
		}
		if c.idemKey != "" {
			req.Header.Set("Idempotency-Key", c.idemKey)
		}
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		return req
	}

	// Validate a copy, so the request sent is untouched by the validator.
	vreq := newReq()
	route, params, err := ct.router.FindRoute(vreq)
	if err != nil {
		t.Fatalf("%s %s: no operation in openapi.yaml: %v", c.method, c.path, err)
	}
	ct.exercised[route.Method+" "+route.Path] = true
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerOnly, MultiError: true}}
	err = openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case c.offContract && err == nil:
		t.Fatalf("%s %s: the request is meant to break the document, yet it validates", c.method, c.path)
	case !c.offContract && err != nil:
		t.Fatalf("%s %s: request does not match openapi.yaml: %v", c.method, c.path, err)
	}

	res, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Fatalf("%s %s: %d response does not match openapi.yaml: %v\nheaders %v\nbody %s",
			c.method, c.path, res.StatusCode, err, res.Header, body)
	}
	return res, body
}

func wantStatus(t *testing.T, res *http.Response, body []byte, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", res.StatusCode, status, body)
	}
}

// TestOpenAPIContract drives the server through its main flows; every
// request and response must match openapi.yaml, and every documented
// operation must be exercised.
func TestOpenAPIContract(t *testing.T) {
	t.Parallel()
	ct := newContract(t)
	merchant := ct.keys[orchestrator.RoleMerchant]
	support := ct.keys[orchestrator.RoleSupport]
	finance := ct.keys[orchestrator.RoleFinance]
	admin := ct.keys[orchestrator.RoleAdmin]
	ctx := context.Background()

	t.Run("Health", func(t *testing.T) {
		res, b := ct.do(t, call{method: "GET", path: "/healthz"})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/readyz"})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/metrics"})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/openapi.yaml"})
		wantStatus(t, res, b, 200)
		if !bytes.Equal(b, httpapi.OpenAPI()) || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/yaml") {
			t.Fatalf("/openapi.yaml serves %q, not the embedded document", res.Header.Get("Content-Type"))
		}
	})

	t.Run("Keys", func(t *testing.T) {
		for _, k := range []string{merchant, support, finance, admin} {
			res, b := ct.do(t, call{method: "GET", path: "/v1/me", apiKey: k})
			wantStatus(t, res, b, 200)
		}
		res, b := ct.do(t, call{method: "GET", path: "/v1/tenants", apiKey: admin})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/api_keys", apiKey: admin})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: fmt.Sprintf("/v1/api_keys?tenant_id=%d", ct.tenant), apiKey: admin})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/tenants", apiKey: merchant})
		wantProblem(t, res, b, 403, "forbidden")
		res, b = ct.do(t, call{method: "GET", path: "/v1/me", apiKey: "nope"})
		wantProblem(t, res, b, 401, "unauthorized")
		res, b = ct.do(t, call{method: "GET", path: "/v1/me", offContract: true})
		wantProblem(t, res, b, 401, "unauthorized")
	})

	var pay, other payment
	t.Run("Payments", func(t *testing.T) {
		body := `{"amount_minor":1000,"currency":"EUR","description":"order 1","metadata":{"order":"1"}}`
		res, b := ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-1", body: body})
		wantStatus(t, res, b, 201)
		pay = decode[payment](t, b)
		res, b2 := ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-1", body: body})
		wantStatus(t, res, b2, 201)
		if res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, b2) {
			t.Fatalf("replay: %v %s", res.Header, b2)
		}
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-1",
			body: `{"amount_minor":2000,"currency":"EUR"}`})
		wantProblem(t, res, b, 409, "idempotency_key_reused")
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-decline",
			body: `{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`})
		wantProblem(t, res, b, 402, "payment_declined")

		capture := "/v1/payments/" + pay.ID + "/capture"
		res, b = ct.do(t, call{method: "POST", path: capture, apiKey: merchant, idemKey: "c-over", body: `{"amount_minor":5000}`})
		wantProblem(t, res, b, 422, "amount_exceeds_authorized")
		res, b = ct.do(t, call{method: "POST", path: capture, apiKey: merchant, idemKey: "c-cap", body: `{"amount_minor":600}`})
		wantStatus(t, res, b, 200)
		if p := decode[payment](t, b); p.Status != "captured" || p.CapturedMinor != 600 {
			t.Fatalf("partial capture: %s", b)
		}
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/" + pay.ID + "/refunds", apiKey: merchant,
			idemKey: "c-ref", body: `{"amount_minor":100}`})
		wantStatus(t, res, b, 201)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/" + pay.ID + "/refunds", apiKey: merchant,
			idemKey: "c-ref-all"})
		wantStatus(t, res, b, 201)

		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-2",
			body: `{"amount_minor":2500,"currency":"USD"}`})
		wantStatus(t, res, b, 201)
		other = decode[payment](t, b)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/" + other.ID + "/cancel", apiKey: merchant, idemKey: "c-can"})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/" + other.ID + "/capture", apiKey: merchant,
			idemKey: "c-cap-2", body: `{}`})
		wantProblem(t, res, b, 409, "payment_state_conflict")

		// A hold with on_expiry, extended; a canceled one cannot be.
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-3",
			body: `{"amount_minor":700,"currency":"EUR","on_expiry":"capture","request_extended_authorization":true}`})
		wantStatus(t, res, b, 201)
		held := decode[payment](t, b)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments?expiring_before=" + url.QueryEscape(time.Now().Add(30*24*time.Hour).Format(time.RFC3339)),
			apiKey: merchant})
		wantStatus(t, res, b, 200)
		if !strings.Contains(string(b), held.ID) || strings.Contains(string(b), other.ID) {
			t.Fatalf("expiring_before: %s", b)
		}
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/" + held.ID + "/extend", apiKey: merchant, idemKey: "c-ext"})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/" + other.ID + "/extend", apiKey: merchant, idemKey: "c-ext-2"})
		wantProblem(t, res, b, 409, "payment_state_conflict")

		// A flexible hold: raised to a total, then by an amount; captured in
		// a part, then above the hold (overcapture), finally.
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-flex",
			body: `{"amount_minor":1000,"currency":"EUR","request_incremental_authorization":true,` +
				`"request_multicapture":true,"request_overcapture":true}`})
		wantStatus(t, res, b, 201)
		flex := decode[payment](t, b)
		if !strings.Contains(string(b), `"incremental_authorization":"available","multicapture":"available","overcapture":"available"`) {
			t.Fatalf("flexible hold: %s", b)
		}
		flexPath := "/v1/payments/" + flex.ID
		res, b = ct.do(t, call{method: "POST", path: flexPath + "/increment", apiKey: merchant, idemKey: "c-flex-i1",
			body: `{"amount_minor":1200}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: flexPath + "/increment", apiKey: merchant, idemKey: "c-flex-i2",
			body: `{"increase_minor":100}`})
		wantStatus(t, res, b, 200)
		if decode[payment](t, b).AmountMinor != 1300 {
			t.Fatalf("increments: %s", b)
		}
		res, b = ct.do(t, call{method: "POST", path: flexPath + "/increment", apiKey: merchant, idemKey: "c-flex-i3",
			body: `{"amount_minor":1300}`})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "POST", path: flexPath + "/capture", apiKey: merchant, idemKey: "c-flex-c1",
			body: `{"amount_minor":500,"final_capture":false}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: flexPath + "/capture", apiKey: merchant, idemKey: "c-flex-c2",
			body: `{"amount_minor":99999}`})
		wantProblem(t, res, b, 422, "amount_exceeds_limit")
		res, b = ct.do(t, call{method: "POST", path: flexPath + "/capture", apiKey: merchant, idemKey: "c-flex-c3",
			body: `{"amount_minor":900}`})
		wantStatus(t, res, b, 200)
		if p := decode[payment](t, b); p.Status != "captured" || p.CapturedMinor != 1400 {
			t.Fatalf("overcapture: %s", b)
		}
		// Its money movements, oldest first: two increments, a part, the
		// refused overcapture (never recorded) and the final capture.
		res, b = ct.do(t, call{method: "GET", path: flexPath + "/operations", apiKey: merchant})
		wantStatus(t, res, b, 200)
		type flexOp struct {
			Object       string `json:"object"`
			AmountMinor  int64  `json:"amount_minor"`
			FinalCapture *bool  `json:"final_capture"`
		}
		var flexOps []string
		for _, op := range decode[listOf[flexOp]](t, b).Data {
			final := "-"
			if op.FinalCapture != nil {
				final = strconv.FormatBool(*op.FinalCapture)
			}
			flexOps = append(flexOps, fmt.Sprintf("%s %d %s", op.Object, op.AmountMinor, final))
		}
		if got := strings.Join(flexOps, ", "); got != "increment 1200 -, increment 1300 -, capture 500 false, capture 900 true" {
			t.Fatalf("operations: %s\n%s", got, b)
		}
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments/pay_00000000000000000000000000000000/operations", apiKey: merchant})
		wantProblem(t, res, b, 404, "not_found")

		// A 3-D Secure challenge: confirmed while open (202), then after
		// the shopper completed it (200, authorized).
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-3ds",
			body: `{"amount_minor":900,"currency":"EUR","payment_method":"pm_card_threeDSecure2Required",` +
				`"return_url":"https://shop.example/back"}`})
		wantStatus(t, res, b, 201)
		sca := decode[payment](t, b)
		if sca.Status != "requires_action" || !strings.Contains(string(b), `"next_action":{"type":"redirect_to_url"`) {
			t.Fatalf("3-D Secure authorize: %s", b)
		}
		confirm := "/v1/payments/" + sca.ID + "/confirm"
		res, b = ct.do(t, call{method: "POST", path: confirm, apiKey: merchant, idemKey: "c-3ds-c0"})
		wantStatus(t, res, b, 202)
		if _, err := ct.fake.Authenticate(context.Background(), *sca.ProviderRef, true); err != nil {
			t.Fatal(err)
		}
		res, b = ct.do(t, call{method: "POST", path: confirm, apiKey: merchant, idemKey: "c-3ds-c1", body: `{}`})
		wantStatus(t, res, b, 200)
		if decode[payment](t, b).Status != "authorized" || !strings.Contains(string(b), `"next_action":null`) {
			t.Fatalf("confirm: %s", b)
		}
	})
	if pay.ID == "" || other.ID == "" {
		t.FailNow()
	}

	t.Run("Refusals", func(t *testing.T) {
		// Well-formed for the document, refused by the server: no such currency.
		res, b := ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-zzz",
			body: `{"amount_minor":100,"currency":"ZZZ"}`})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-ret",
			body: `{"amount_minor":100,"currency":"EUR","return_url":"http://shop.example/back"}`})
		wantProblem(t, res, b, 400, "validation_failed")
		// Off the document, and refused by the server as well.
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-str",
			body: `{"amount_minor":"100","currency":"EUR"}`, offContract: true})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-x",
			body: `{"amount_minor":100,"currency":"EUR","colour":"red"}`, offContract: true})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant,
			body: `{"amount_minor":100,"currency":"EUR"}`, offContract: true})
		wantProblem(t, res, b, 400, "idempotency_key_missing")
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: support, idemKey: "c-sup",
			body: `{"amount_minor":100,"currency":"EUR"}`})
		wantProblem(t, res, b, 403, "forbidden")
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments/pay_00000000000000000000000000000000", apiKey: merchant})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "POST", path: "/v1/payments/pay_00000000000000000000000000000000/cancel",
			apiKey: merchant, idemKey: "c-404"})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments?tenant_id=1", apiKey: merchant})
		wantProblem(t, res, b, 400, "validation_failed")
	})

	t.Run("ReadPayments", func(t *testing.T) {
		res, b := ct.do(t, call{method: "GET", path: "/v1/payments/" + pay.ID, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments/" + pay.ID, apiKey: support})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments?limit=1", apiKey: merchant})
		wantStatus(t, res, b, 200)
		page := decode[struct {
			Data    []payment `json:"data"`
			HasMore bool      `json:"has_more"`
		}](t, b)
		if len(page.Data) != 1 || !page.HasMore {
			t.Fatalf("first page: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments?limit=100&status=captured&starting_after=" + page.Data[0].ID, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments?created_gte=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), apiKey: finance})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments?idempotency_key=c-1", apiKey: support})
		wantStatus(t, res, b, 200)
		if got := decode[struct{ Data []payment }](t, b); len(got.Data) != 1 || got.Data[0].ID != pay.ID {
			t.Fatalf("look-up by key: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: fmt.Sprintf("/v1/payments?idempotency_key=c-1&tenant_id=%d", ct.tenant), apiKey: finance})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments/" + pay.ID + "/events", apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments/" + other.ID + "/events", apiKey: support})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/events?payment_id=" + pay.ID, apiKey: merchant})
		wantStatus(t, res, b, 200)
		evs := decode[struct {
			Data []struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			} `json:"data"`
		}](t, b)
		if n := len(evs.Data); n < 2 || evs.Data[n-1].Type != "payment.pending" || evs.Data[n-2].Type != "payment.authorized" {
			t.Fatalf("events of the payment, newest first: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: "/v1/events/" + evs.Data[0].ID, apiKey: support})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payments/" + pay.ID + "/attempts", apiKey: merchant})
		wantStatus(t, res, b, 200)
		if got := decode[struct {
			Data []struct {
				Attempt   int    `json:"attempt"`
				Connector string `json:"connector"`
			} `json:"data"`
		}](t, b); len(got.Data) != 1 || got.Data[0].Attempt != 1 || got.Data[0].Connector != "fake" {
			t.Fatalf("attempts of a payment authorized at once: %s", b)
		}
	})

	t.Run("FeeSchedules", func(t *testing.T) {
		fees := "/v1/connectors/fake/fees"
		res, b := ct.do(t, call{method: "GET", path: fees, apiKey: admin})
		wantProblem(t, res, b, 404, "not_found")
		schedule := `{"currencies":{"EUR":{"percent_bp":140,"fixed_minor":25}},"default":{"percent_bp":290,"fixed_minor":30},` +
			`"tolerance_minor":1}`
		res, b = ct.do(t, call{method: "PUT", path: fees, apiKey: admin, body: schedule})
		wantStatus(t, res, b, 200)
		if !strings.Contains(string(b), `"version":1`) {
			t.Fatalf("first version: %s", b)
		}
		res, b = ct.do(t, call{method: "PUT", path: fees, apiKey: admin, body: schedule}) // the same: nothing stored
		wantStatus(t, res, b, 200)
		if !strings.Contains(string(b), `"version":1`) {
			t.Fatalf("the same schedule again: %s", b)
		}
		res, b = ct.do(t, call{method: "PUT", path: fees, apiKey: admin,
			body: `{"currencies":{"EUR":{"percent_bp":150,"fixed_minor":25}},"tolerance_minor":0}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: fees, apiKey: admin})
		wantStatus(t, res, b, 200)
		if !strings.Contains(string(b), `"version":2`) || !strings.Contains(string(b), `"percent_bp":150`) ||
			!strings.Contains(string(b), `"payout_delay_days":null`) || !strings.Contains(string(b), `"payout_grace_days":1`) {
			t.Fatalf("active version: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: fees + "/versions?limit=1", apiKey: admin})
		wantStatus(t, res, b, 200)
		if !strings.Contains(string(b), `"has_more":true`) {
			t.Fatalf("versions: %s", b)
		}
		res, b = ct.do(t, call{method: "PUT", path: fees, apiKey: admin, offContract: true,
			body: `{"currencies":{"EUR":{"percent_bp":10001,"fixed_minor":0}}}`})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "PUT", path: fees, apiKey: admin,
			body: `{"currencies":{},"payout_delay_days":2,"payout_grace_days":0}`})
		wantStatus(t, res, b, 200)
		if !strings.Contains(string(b), `"payout_delay_days":2`) || !strings.Contains(string(b), `"payout_grace_days":0`) {
			t.Fatalf("payout terms: %s", b)
		}
		for _, bad := range []string{`{"payout_delay_days":31}`, `{"payout_delay_days":-1}`, `{"payout_grace_days":8}`} {
			res, b = ct.do(t, call{method: "PUT", path: fees, apiKey: admin, offContract: true, body: bad})
			wantProblem(t, res, b, 400, "validation_failed")
		}
		res, b = ct.do(t, call{method: "PUT", path: "/v1/connectors/nope/fees", apiKey: admin, body: schedule})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "GET", path: fees, apiKey: finance})
		wantProblem(t, res, b, 403, "forbidden")
	})

	t.Run("BankStatements", func(t *testing.T) { contractBankStatements(t, ct, finance, admin) })

	t.Run("Reconciliation", func(t *testing.T) {
		res, b := ct.do(t, call{method: "POST", path: "/v1/payments", apiKey: merchant, idemKey: "c-rec",
			body: `{"amount_minor":700,"currency":"EUR"}`})
		wantStatus(t, res, b, 201)
		drifted := decode[payment](t, b)
		if err := ct.fake.Drift(ctx, fake.Drift{Kind: fake.DriftAmount, Ref: *drifted.ProviderRef,
			Field: fake.AmountAuthorized, AmountMinor: 800}); err != nil {
			t.Fatal(err)
		}
		// Two captures of five days ago at the fake, of nobody's: a payout
		// of two items (the run's listing makes it).
		fiveDaysAgo := time.Now().UTC().AddDate(0, 0, -5)
		if n, err := ct.fake.Seed(ctx, slices.Values([]fake.SeedHold{
			{Status: providers.StatusCaptured, AmountMinor: 1200, CapturedMinor: 1200, Currency: "EUR", CreatedAt: fiveDaysAgo},
			{Status: providers.StatusCaptured, AmountMinor: 3400, CapturedMinor: 3400, Currency: "EUR", CreatedAt: fiveDaysAgo},
		})); err != nil || n != 2 {
			t.Fatalf("seeded %d: %v", n, err)
		}
		body := `{"provider":"fake","date":"` + time.Now().UTC().Format(time.DateOnly) + `"}`
		res, b = ct.do(t, call{method: "POST", path: "/v1/reconciliation/runs", apiKey: finance, idemKey: "r-1", body: body})
		wantStatus(t, res, b, 202)
		run := decode[runJSON](t, b)
		res, b = ct.do(t, call{method: "POST", path: "/v1/reconciliation/runs", apiKey: finance, idemKey: "r-1", body: body})
		wantStatus(t, res, b, 202)
		runPath := fmt.Sprintf("/v1/reconciliation/runs/%d", run.ID)
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("run %d to finish", run.ID), func() (bool, error) {
			res, b = ct.do(t, call{method: "GET", path: runPath, apiKey: finance})
			wantStatus(t, res, b, 200)
			run = decode[runJSON](t, b)
			return run.Status != "running", fmt.Errorf("status %s", run.Status)
		})
		if run.Status != "succeeded" || run.DiscrepancyCount < 1 {
			t.Fatalf("run %s", b)
		}
		// Its event, a staff event (tenant_id null), as finance reads it.
		res, b = ct.do(t, call{method: "GET", path: "/v1/events?type=reconciliation.run.completed", apiKey: finance})
		wantStatus(t, res, b, 200)
		runEvents := decode[struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}](t, b)
		if len(runEvents.Data) != 1 {
			t.Fatalf("run events: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: "/v1/events/" + runEvents.Data[0].ID, apiKey: finance})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/events/" + runEvents.Data[0].ID, apiKey: merchant})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "POST", path: "/v1/webhook_endpoints", apiKey: finance, idemKey: "we-staff",
			body: `{"url":"https://example.com/finance","event_types":["reconciliation.run.completed","reconciliation.run.failed"]}`})
		wantStatus(t, res, b, 201)
		res, b = ct.do(t, call{method: "GET", path: "/v1/webhook_endpoints", apiKey: finance})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/reconciliation/runs?provider=fake&limit=10", apiKey: admin})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: runPath + "/discrepancies?type=amount_mismatch&status=open&limit=10", apiKey: finance})
		wantStatus(t, res, b, 200)
		ds := decode[struct {
			Data []struct {
				ID int64 `json:"id"`
			} `json:"data"`
		}](t, b)
		if len(ds.Data) != 1 {
			t.Fatalf("discrepancies: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: runPath + "/discrepancies", apiKey: finance,
			hdr: map[string]string{"Accept": "text/csv"}})
		wantStatus(t, res, b, 200)
		if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
			t.Fatalf("csv Content-Type %q", res.Header.Get("Content-Type"))
		}
		res, b = ct.do(t, call{method: "GET", path: "/v1/reconciliation/runs/999999", apiKey: finance})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "GET", path: "/v1/reconciliation/runs", apiKey: support})
		wantProblem(t, res, b, 403, "forbidden")

		contractMoneyViews(t, ct, finance)

		resolve := fmt.Sprintf("/v1/reconciliation/discrepancies/%d/resolve", ds.Data[0].ID)
		res, b = ct.do(t, call{method: "POST", path: resolve, apiKey: finance, idemKey: "res-1", body: `{"note":"provider corrected it"}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: resolve, apiKey: finance, idemKey: "res-2", body: `{"note":"again"}`})
		wantProblem(t, res, b, 409, "conflict")
		res, b = ct.do(t, call{method: "POST", path: resolve, apiKey: finance, idemKey: "res-3", body: `{"note":""}`, offContract: true})
		wantProblem(t, res, b, 400, "validation_failed")
	})

	t.Run("ProviderWebhook", func(t *testing.T) {
		body := `{"id":"fevt_contract","object":"event","type":"hold.captured","created_at":"2026-12-01T10:00:00Z",` +
			`"data":{"hold_ref":"fh_contract","object_id":"fh_contract","amount_minor":100,"currency":"EUR"}}`
		sig := providers.SignWebhook(contractHookSecret, time.Now(), []byte(body))
		res, b := ct.do(t, call{method: "POST", path: "/webhooks/hooked", body: body, hdr: map[string]string{fake.SignatureHeader: sig}})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: "/webhooks/hooked", body: body, hdr: map[string]string{fake.SignatureHeader: sig}})
		wantStatus(t, res, b, 200)
		if r := decode[orchestrator.InboundResult](t, b); !r.Duplicate || r.Outcome != orchestrator.InboundUnknownObject {
			t.Fatalf("second delivery: %s", b)
		}
		res, b = ct.do(t, call{method: "POST", path: "/webhooks/hooked", body: body})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "POST", path: "/webhooks/fake", body: body, hdr: map[string]string{fake.SignatureHeader: sig}})
		wantProblem(t, res, b, 400, "validation_failed")
	})

	t.Run("Routing", func(t *testing.T) {
		path := fmt.Sprintf("/v1/tenants/%d/routing", ct.tenant)
		res, b := ct.do(t, call{method: "GET", path: path, apiKey: admin})
		wantStatus(t, res, b, 200)
		rules := `{"rules":[{"name":"euro","match":{"currencies":["EUR"],"amount_min":1,"amount_max":100000,` +
			`"payment_methods":["pm_card_visa"],"metadata":{"channel":"web"}},"connectors":{"strategy":"priority","connectors":[{"name":"fake"}]}}],` +
			`"default":{"strategy":"volume_split","connectors":[{"name":"fake","weight":100}]}}`
		res, b = ct.do(t, call{method: "PUT", path: path, apiKey: admin, body: rules})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: path + "/versions?limit=10", apiKey: admin})
		wantStatus(t, res, b, 200)
		// Well-formed for the document, refused by the server.
		res, b = ct.do(t, call{method: "PUT", path: path, apiKey: admin,
			body: `{"default":{"strategy":"priority","connectors":[{"name":"nope"}]}}`})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "PUT", path: path, apiKey: admin, offContract: true,
			body: `{"default":{"strategy":"priority","connectors":[{"name":"fake","colour":"red"}]}}`})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "GET", path: path, apiKey: merchant})
		wantProblem(t, res, b, 403, "forbidden")
		res, b = ct.do(t, call{method: "GET", path: "/v1/tenants/999999/routing/versions", apiKey: admin})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "GET", path: "/v1/connectors", apiKey: support})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/connectors", apiKey: merchant})
		wantProblem(t, res, b, 403, "forbidden")
	})

	t.Run("Webhooks", func(t *testing.T) {
		create := `{"url":"https://example.com/hooks","event_types":["*"],"description":"main"}`
		res, b := ct.do(t, call{method: "POST", path: "/v1/webhook_endpoints", apiKey: merchant, idemKey: "w-1", body: create})
		wantStatus(t, res, b, 201)
		ep := decode[webhookEndpoint](t, b)
		if ep.Secret == "" || res.Header.Get("Location") != "/v1/webhook_endpoints/"+ep.ID {
			t.Fatalf("created %s (Location %q)", b, res.Header.Get("Location"))
		}
		res, b = ct.do(t, call{method: "POST", path: "/v1/webhook_endpoints", apiKey: merchant, idemKey: "w-2", offContract: true,
			body: `{"url":"https://example.com/hooks","event_types":["payment.exploded"]}`})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "GET", path: "/v1/webhook_endpoints", apiKey: merchant})
		wantStatus(t, res, b, 200)
		path := "/v1/webhook_endpoints/" + ep.ID
		res, b = ct.do(t, call{method: "GET", path: path, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: path, apiKey: merchant, idemKey: "w-off", body: `{"enabled":false}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: path, apiKey: merchant, idemKey: "w-on", body: `{"enabled":true}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "POST", path: path + "/rotate_secret", apiKey: merchant, idemKey: "w-rot"})
		wantStatus(t, res, b, 200)

		res, b = ct.do(t, call{method: "GET", path: "/v1/events?limit=1&payment_id=" + pay.ID, apiKey: merchant})
		wantStatus(t, res, b, 200)
		evs := decode[struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}](t, b)
		if len(evs.Data) != 1 {
			t.Fatalf("events: %s", b)
		}
		// The payment's events came before the endpoint: a redelivery
		// sends the event to it.
		evPath := "/v1/events/" + evs.Data[0].ID
		// Support reads deliveries, but only the merchant redelivers.
		res, b = ct.do(t, call{method: "POST", path: evPath + "/redeliver", apiKey: support, idemKey: "w-red-support", body: `{}`})
		wantStatus(t, res, b, 403)
		res, b = ct.do(t, call{method: "POST", path: evPath + "/redeliver", apiKey: merchant, idemKey: "w-red", body: `{}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: evPath + "/deliveries", apiKey: merchant})
		wantStatus(t, res, b, 200)
		if ds := decode[listOf[webhookDelivery]](t, b); len(ds.Data) != 1 || ds.Data[0].EndpointID != ep.ID || ds.Data[0].Status != "pending" {
			t.Fatalf("deliveries: %s", b)
		}
		res, b = ct.do(t, call{method: "GET", path: evPath + "/deliveries", apiKey: finance})
		wantProblem(t, res, b, 404, "not_found")
		res, b = ct.do(t, call{method: "DELETE", path: path, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: path, apiKey: merchant})
		wantProblem(t, res, b, 404, "not_found")
	})

	t.Run("PaymentMethods", func(t *testing.T) {
		const shop = "https://shop.example"
		origins := fmt.Sprintf("/v1/tenants/%d/browser_origins", ct.tenant)
		res, b := ct.do(t, call{method: "PUT", path: origins, apiKey: admin, body: `{"origins":["` + shop + `"]}`})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: origins, apiKey: admin})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "PUT", path: origins, apiKey: admin, body: `{"origins":["ftp://shop.example"]}`})
		wantProblem(t, res, b, 400, "validation_failed")
		_, ppk, err := ct.svc.CreateAPIKey(ctx, orchestrator.RolePublishable, ct.tenant, "checkout")
		if err != nil {
			t.Fatal(err)
		}

		body := cardBody(visa, visaCVC)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payment_methods", apiKey: merchant, idemKey: "pm-1", body: body})
		wantStatus(t, res, b, 201)
		pm := decode[paymentMethod](t, b)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payment_methods", apiKey: merchant, idemKey: "pm-1", body: body})
		wantStatus(t, res, b, 201)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payment_methods", apiKey: merchant, idemKey: "pm-bad",
			body: cardBody("4242424242424241", "")})
		wantProblem(t, res, b, 400, "validation_failed")
		res, b = ct.do(t, call{method: "OPTIONS", path: "/v1/payment_methods", hdr: map[string]string{"Origin": shop,
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type,idempotency-key"}})
		wantStatus(t, res, b, 204)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payment_methods", apiKey: ppk, idemKey: "pm-ppk", body: cardBody(mastercard, ""),
			hdr: map[string]string{"Origin": shop}})
		wantStatus(t, res, b, 201)
		res, b = ct.do(t, call{method: "POST", path: "/v1/payment_methods", apiKey: ppk, idemKey: "pm-ppk-2", body: cardBody(mastercard, ""),
			hdr: map[string]string{"Origin": "https://evil.example"}})
		wantProblem(t, res, b, 403, "forbidden")
		res, b = ct.do(t, call{method: "GET", path: "/v1/payment_methods?limit=10&fingerprint=" + *pm.Card.Fingerprint, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: fmt.Sprintf("/v1/payment_methods?tenant_id=%d", ct.tenant), apiKey: support})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payment_methods/" + pm.ID, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/v1/payment_methods/" + pm.ID, apiKey: ppk})
		wantProblem(t, res, b, 403, "forbidden")
		res, b = ct.do(t, call{method: "DELETE", path: "/v1/payment_methods/" + pm.ID, apiKey: merchant})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "DELETE", path: "/v1/payment_methods/vpm_00000000000000000000000000000000", apiKey: merchant})
		wantProblem(t, res, b, 404, "not_found")

		res, b = ct.do(t, call{method: "GET", path: "/card_form?key=" + ppk + "&origin=" + url.QueryEscape(shop)})
		wantStatus(t, res, b, 200)
		res, b = ct.do(t, call{method: "GET", path: "/card_form?key=" + ppk + "&origin=" + url.QueryEscape("https://evil.example")})
		wantStatus(t, res, b, 403)
	})

	if t.Failed() {
		return // a flow stopped early; its operations were not all reached
	}
	for _, op := range documentedOperations(loadOpenAPI(t)) {
		if !ct.exercised[op] {
			t.Errorf("no flow exercises %s", op)
		}
	}
}

// contractMoneyViews is the money views' part of the contract test: the
// summary of the day just reconciled, and the payout of the captures
// seeded days ago, whole and page by page.
func contractMoneyViews(t *testing.T, ct *contract, finance string) {
	today := time.Now().UTC().Format(time.DateOnly)
	res, b := ct.do(t, call{method: "GET", path: "/v1/reconciliation/summary?provider=fake&business_date=" + today, apiKey: finance})
	wantStatus(t, res, b, 200)
	res, b = ct.do(t, call{method: "GET", path: "/v1/reconciliation/summary?provider=fake&business_date=2001-01-01", apiKey: finance})
	wantProblem(t, res, b, 404, "not_found")
	res, b = ct.do(t, call{method: "GET", path: "/v1/reconciliation/summary?business_date=" + today, apiKey: finance, offContract: true})
	wantProblem(t, res, b, 400, "validation_failed")

	var payouts []providers.Payout
	err := ct.fake.Payouts(context.Background(), providers.ReportRequest{From: time.Now().AddDate(0, 0, -10), To: time.Now()},
		func(p providers.Payout) error {
			payouts = append(payouts, p)
			return nil
		})
	if err != nil || len(payouts) != 1 {
		t.Fatalf("payouts %+v: %v", payouts, err)
	}
	path := "/v1/reconciliation/payouts/fake/" + payouts[0].ID
	res, b = ct.do(t, call{method: "GET", path: path, apiKey: finance})
	wantStatus(t, res, b, 200)
	if !strings.Contains(string(b), `"item_count":2`) || !strings.Contains(string(b), `"difference_minor":0`) ||
		!strings.Contains(string(b), `"payment":null`) {
		t.Fatalf("payout %s", b)
	}
	res, b = ct.do(t, call{method: "GET", path: path + "?limit=1", apiKey: finance})
	wantStatus(t, res, b, 200)
	first := decode[struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
		HasMore bool `json:"has_more"`
	}](t, b)
	if len(first.Items) != 1 || !first.HasMore {
		t.Fatalf("first page %s", b)
	}
	res, b = ct.do(t, call{method: "GET", path: path + "?limit=1&starting_after=" + first.Items[0].ID, apiKey: finance})
	wantStatus(t, res, b, 200)
	if !strings.Contains(string(b), `"has_more":false`) || strings.Contains(string(b), first.Items[0].ID) {
		t.Fatalf("second page %s", b)
	}
	res, b = ct.do(t, call{method: "GET", path: "/v1/reconciliation/payouts/fake/fpo_nonesuch", apiKey: finance})
	wantProblem(t, res, b, 404, "not_found")
	res, b = ct.do(t, call{method: "GET", path: path + "?limit=0", apiKey: finance, offContract: true})
	wantProblem(t, res, b, 400, "validation_failed")
}
