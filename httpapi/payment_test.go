package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

type payment struct {
	ID            string  `json:"id"`
	TenantID      int64   `json:"tenant_id"`
	Status        string  `json:"status"`
	AmountMinor   int64   `json:"amount_minor"`
	CapturedMinor int64   `json:"captured_minor"`
	RefundedMinor int64   `json:"refunded_minor"`
	ProviderRef   *string `json:"provider_ref"`
	FailureCode   *string `json:"failure_code"`
}

// post sends a keyed JSON POST as key's holder.
func (e *env) post(t *testing.T, path, apiKey, idemKey, body string) (*http.Response, []byte) {
	t.Helper()
	hdr := map[string]string{"Content-Type": "application/json"}
	if idemKey != "" {
		hdr["Idempotency-Key"] = idemKey
	}
	var r *strings.Reader
	if body != "" {
		r = strings.NewReader(body)
	} else {
		r = strings.NewReader("")
	}
	return e.do(t, "POST", path, apiKey, r, hdr)
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// authorizeOK authorizes amount EUR under idemKey and returns the payment.
func (e *env) authorizeOK(t *testing.T, idemKey string, amount int64) payment {
	t.Helper()
	res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], idemKey,
		fmt.Sprintf(`{"amount_minor":%d,"currency":"EUR"}`, amount))
	if res.StatusCode != 201 {
		t.Fatalf("authorize: %d %s", res.StatusCode, body)
	}
	return decode[payment](t, body)
}

// providerOps counts the operations the fake executed under the key we
// forward for (tenant, operation, client key).
func (e *env) providerOps(t *testing.T, tenant int64, op, clientKey string) []fake.Operation {
	t.Helper()
	ops, err := e.fake.Operations(context.Background(), providers.ForwardedKey(tenant, op, clientKey))
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func (e *env) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAuthorizeExactlyOnce(t *testing.T) {
	t.Parallel()

	t.Run("HundredConcurrentIdenticalRequestsMakeOneHold", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		const key = "storm-1"
		// Keep the first execution in flight so the others collide with it.
		if err := e.fake.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency,
			LatencyMS: 300, IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpAuthorize, key)}); err != nil {
			t.Fatal(err)
		}
		type answer struct {
			status     int
			body       []byte
			retryAfter string
			replayed   string
		}
		answers := make([]answer, 100)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, `{"amount_minor":1000,"currency":"EUR"}`)
				answers[i] = answer{res.StatusCode, body, res.Header.Get("Retry-After"), res.Header.Get("Idempotent-Replayed")}
			}()
		}
		wg.Wait()
		// Afterwards, one more retry must replay the stored answer.
		res, stored := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, `{"currency":"EUR","amount_minor":1000}`)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("final retry: %d replayed=%q %s", res.StatusCode, res.Header.Get("Idempotent-Replayed"), stored)
		}
		created, inUse := 0, 0
		for _, a := range answers {
			switch a.status {
			case 201:
				created++
				if !bytes.Equal(a.body, stored) {
					t.Fatalf("a 201 differs from the stored answer:\n%s\n%s", a.body, stored)
				}
			case 409:
				inUse++
				if !strings.Contains(string(a.body), `"code":"idempotency_key_in_use"`) || a.retryAfter == "" {
					t.Fatalf("409 without in_use code or Retry-After: %s", a.body)
				}
			default:
				t.Fatalf("unexpected answer %d %s", a.status, a.body)
			}
		}
		if created == 0 || inUse == 0 {
			t.Fatalf("created %d, in_use %d: the storm did not collide", created, inUse)
		}
		if ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, key); len(ops) != 1 {
			t.Fatalf("provider executed %d authorizations, want 1", len(ops))
		}
		if n := e.count(t, `SELECT count(*) FROM payments`); n != 1 {
			t.Fatalf("%d payment rows, want 1", n)
		}
	})

	t.Run("KeyReusedWithAnotherBodyNamesFieldsAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		p := e.authorizeOK(t, "reuse-1", 1000)
		res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "reuse-1",
			`{"amount_minor":2000,"currency":"USD","description":"x"}`)
		prob := wantProblem(t, res, body, 409, "idempotency_key_reused")
		if strings.Join(prob.Fields, ",") != "amount_minor,currency,description" {
			t.Fatalf("fields %v", prob.Fields)
		}
		if strings.Contains(string(body), "2000") || strings.Contains(string(body), "USD") {
			t.Fatalf("reused problem leaks values: %s", body)
		}
		if res.Header.Get("Idempotency-Key-Expires") == "" {
			t.Fatal("no Idempotency-Key-Expires on the 409")
		}
		if ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, "reuse-1"); len(ops) != 1 {
			t.Fatalf("%d provider ops", len(ops))
		}
		var amount int64
		if err := e.pool.QueryRow(context.Background(), `SELECT amount_minor FROM payments WHERE id = $1`, p.ID).Scan(&amount); err != nil || amount != 1000 {
			t.Fatalf("payment amount %d (%v)", amount, err)
		}
	})

	t.Run("SameRequestSpelledDifferentlyIsAReplay", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		_, first := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "spell-1", `{"amount_minor":1000,"currency":"EUR","metadata":{"a":"1","b":"2"}}`)
		res, again := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "spell-1", "{ \"metadata\": {\"b\":\"2\",\"a\":\"1\"},\n \"currency\":\"EUR\", \"amount_minor\": 1e3 }")
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first, again) {
			t.Fatalf("respelled retry: %d %s", res.StatusCode, again)
		}
	})

	t.Run("TimeoutAfterExecuteIsPendingThenSettledByRetry", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{}, orchestrator.Config{ProviderTimeout: 500 * time.Millisecond})
		const key = "timeout-1"
		if err := e.fake.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute,
			Count: 1, IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpAuthorize, key)}); err != nil {
			t.Fatal(err)
		}
		res, body := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, `{"amount_minor":1000,"currency":"EUR"}`)
		if res.StatusCode != 202 || res.Header.Get("Location") == "" {
			t.Fatalf("unknown outcome: %d %s", res.StatusCode, body)
		}
		pending := decode[payment](t, body)
		if pending.Status != "pending" {
			t.Fatalf("status %s", pending.Status)
		}
		res, body = e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, `{"amount_minor":1000,"currency":"EUR"}`)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") == "true" {
			t.Fatalf("retry: %d replayed=%q %s", res.StatusCode, res.Header.Get("Idempotent-Replayed"), body)
		}
		p := decode[payment](t, body)
		ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, key)
		if len(ops) != 1 || p.ID != pending.ID || p.ProviderRef == nil || *p.ProviderRef != ops[0].Ref || p.Status != "authorized" {
			t.Fatalf("after retry: payment %+v, provider ops %+v", p, ops)
		}
		// The reference was saved before the confirmation: the retry
		// settled it with one lookup, without authorizing again.
		if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'provider_call' AND operation = 'authorize'`, p.ID); n != 1 {
			t.Fatalf("%d authorize calls, want 1", n)
		}
	})

	t.Run("DeclineIsStoredAndReplayed", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		body := `{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`
		res, first := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "decline-1", body)
		prob := wantProblem(t, res, first, 402, "payment_declined")
		if prob.PaymentID == "" {
			t.Fatal("declined problem does not name the payment")
		}
		res2, again := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "decline-1", body)
		if res2.StatusCode != 402 || res2.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first, again) {
			t.Fatalf("replay of decline: %d %s", res2.StatusCode, again)
		}
		res, got := e.do(t, "GET", "/v1/payments/"+prob.PaymentID, e.keys[orchestrator.RoleMerchant], nil, nil)
		p := decode[payment](t, got)
		if res.StatusCode != 200 || p.Status != "failed" || p.FailureCode == nil || *p.FailureCode != "insufficient_funds" {
			t.Fatalf("declined payment: %d %s", res.StatusCode, got)
		}
		if ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, "decline-1"); len(ops) != 1 {
			t.Fatalf("%d provider ops", len(ops))
		}
	})
}

func TestIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	m := e.keys[orchestrator.RoleMerchant]
	body := `{"amount_minor":1000,"currency":"EUR"}`
	res, b := e.post(t, "/v1/payments", m, "", body)
	wantProblem(t, res, b, 400, "idempotency_key_missing")
	for _, k := range []string{strings.Repeat("k", 256), "tab\there", "é"} {
		res, b := e.do(t, "POST", "/v1/payments", m, strings.NewReader(body),
			map[string]string{"Content-Type": "application/json", "Idempotency-Key": k})
		wantProblem(t, res, b, 400, "idempotency_key_invalid")
	}
	res, b = e.do(t, "POST", "/v1/payments", m, strings.NewReader(body),
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": "a b ~"})
	if res.StatusCode != 201 {
		t.Fatalf("a key of printable ASCII with spaces is valid: %d %s", res.StatusCode, b)
	}
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys`); n != 1 {
		t.Fatalf("%d keys stored; rejected requests must store nothing", n)
	}
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	m := e.keys[orchestrator.RoleMerchant]
	for name, tc := range map[string]struct{ body, param string }{
		"UnknownField":     {`{"amount_minor":1000,"currency":"EUR","amount":5}`, "amount"},
		"DuplicateKey":     {`{"amount_minor":1000,"amount_minor":2000,"currency":"EUR"}`, ""},
		"TrailingData":     {`{"amount_minor":1000,"currency":"EUR"} {}`, ""},
		"FractionalAmount": {`{"amount_minor":10.5,"currency":"EUR"}`, "amount_minor"},
		"StringAmount":     {`{"amount_minor":"1000","currency":"EUR"}`, "amount_minor"},
		"MissingAmount":    {`{"currency":"EUR"}`, "amount_minor"},
		"ZeroAmount":       {`{"amount_minor":0,"currency":"EUR"}`, "amount_minor"},
		"LowerCurrency":    {`{"amount_minor":1000,"currency":"eur"}`, "currency"},
		"FakeCurrency":     {`{"amount_minor":1000,"currency":"ABC"}`, "currency"},
		"UnknownProvider":  {`{"amount_minor":1000,"currency":"EUR","provider":"paypal"}`, "provider"},
		"NotAnObject":      {`[1,2]`, ""},
		"HugeExponent":     {`{"amount_minor":1e999999999,"currency":"EUR"}`, ""},
	} {
		res, b := e.post(t, "/v1/payments", m, "v-"+name, tc.body)
		p := wantProblem(t, res, b, 400, "validation_failed")
		if tc.param != "" && p.Param != tc.param {
			t.Errorf("%s: param %q, want %q (%s)", name, p.Param, tc.param, b)
		}
	}
	// A body never overrides a path parameter.
	p := e.authorizeOK(t, "v-ok", 1000)
	res, b := e.post(t, "/v1/payments/"+p.ID+"/capture", m, "v-cap", `{"id":"pay_00000000000000000000000000000000"}`)
	wantProblem(t, res, b, 400, "validation_failed")
	if n := e.count(t, `SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("%d payments after rejected requests", n)
	}
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys`); n != 1 {
		t.Fatalf("%d keys after rejected requests", n)
	}
}

func TestPaymentLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("SecondCaptureUnderAnotherKeyIsAStateConflict", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		p := e.authorizeOK(t, "cap-1", 1000)
		res, b := e.post(t, "/v1/payments/"+p.ID+"/capture", m, "cap-a", `{"amount_minor":600}`)
		if res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, b)
		}
		got := decode[payment](t, b)
		if got.Status != "captured" || got.CapturedMinor != 600 {
			t.Fatalf("captured payment %+v", got)
		}
		res, b = e.post(t, "/v1/payments/"+p.ID+"/capture", m, "cap-b", "")
		wantProblem(t, res, b, 409, "payment_state_conflict")
		res, b2 := e.post(t, "/v1/payments/"+p.ID+"/capture", m, "cap-b", "")
		if res.StatusCode != 409 || res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, b2) {
			t.Fatalf("state conflict not stored: %d %s", res.StatusCode, b2)
		}
		if ops := e.providerOps(t, e.tenant, orchestrator.OpCapture, "cap-b"); len(ops) != 0 {
			t.Fatalf("the refused capture reached the provider: %+v", ops)
		}
	})

	t.Run("ConcurrentCapturesUnderDifferentKeysCaptureOnce", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		p := e.authorizeOK(t, "ccap-1", 1000)
		statuses := make([]int, 10)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, _ := e.post(t, "/v1/payments/"+p.ID+"/capture", m, fmt.Sprintf("ccap-k%d", i), "")
				statuses[i] = res.StatusCode
			}()
		}
		wg.Wait()
		ok := 0
		for _, s := range statuses {
			if s == 200 {
				ok++
			} else if s != 409 {
				t.Fatalf("status %d", s)
			}
		}
		if ok != 1 {
			t.Fatalf("%d captures succeeded, want 1 (%v)", ok, statuses)
		}
		all, err := e.fake.Operations(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		captures := 0
		for _, op := range all {
			if op.Operation == fake.OpCapture {
				captures++
			}
		}
		if captures != 1 {
			t.Fatalf("provider executed %d captures", captures)
		}
	})

	t.Run("CaptureAfterCancelIsAConflict", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		p := e.authorizeOK(t, "cnl-1", 1000)
		res, b := e.post(t, "/v1/payments/"+p.ID+"/cancel", m, "cnl-a", "")
		if res.StatusCode != 200 || decode[payment](t, b).Status != "canceled" {
			t.Fatalf("cancel: %d %s", res.StatusCode, b)
		}
		res, b = e.post(t, "/v1/payments/"+p.ID+"/capture", m, "cnl-b", "")
		wantProblem(t, res, b, 409, "payment_state_conflict")
	})

	t.Run("CaptureOverAuthorizedIs422", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		p := e.authorizeOK(t, "over-1", 1000)
		res, b := e.post(t, "/v1/payments/"+p.ID+"/capture", m, "over-a", `{"amount_minor":1001}`)
		wantProblem(t, res, b, 422, "amount_exceeds_authorized")
		res, b = e.post(t, "/v1/payments/"+p.ID+"/capture", m, "over-b", `{"amount_minor":1000}`)
		if res.StatusCode != 200 {
			t.Fatalf("capture after a refused one: %d %s", res.StatusCode, b)
		}
	})

	t.Run("RefundsAddUpToTheCapturedAmount", func(t *testing.T) {
		t.Parallel()
		e := newMigratedEnv(t, httpapi.Config{})
		m := e.keys[orchestrator.RoleMerchant]
		p := e.authorizeOK(t, "ref-1", 1000)
		if res, b := e.post(t, "/v1/payments/"+p.ID+"/capture", m, "ref-cap", `{"amount_minor":900}`); res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, b)
		}
		res, b := e.post(t, "/v1/payments/"+p.ID+"/refunds", m, "ref-a", `{"amount_minor":400}`)
		if res.StatusCode != 201 {
			t.Fatalf("refund: %d %s", res.StatusCode, b)
		}
		res, b = e.post(t, "/v1/payments/"+p.ID+"/refunds", m, "ref-b", `{"amount_minor":501}`)
		wantProblem(t, res, b, 422, "amount_exceeds_authorized")
		res, b = e.post(t, "/v1/payments/"+p.ID+"/refunds", m, "ref-c", "")
		if res.StatusCode != 201 || !strings.Contains(string(b), `"amount_minor":500`) {
			t.Fatalf("refund of the rest: %d %s", res.StatusCode, b)
		}
		res, b = e.post(t, "/v1/payments/"+p.ID+"/refunds", m, "ref-d", `{"amount_minor":1}`)
		wantProblem(t, res, b, 409, "payment_state_conflict")
		_, b = e.do(t, "GET", "/v1/payments/"+p.ID, m, nil, nil)
		got := decode[payment](t, b)
		if got.Status != "refunded" || got.RefundedMinor != 900 || got.CapturedMinor != 900 {
			t.Fatalf("after refunds: %+v", got)
		}
		_, b = e.do(t, "GET", "/v1/payments/"+p.ID+"/events", m, nil, nil)
		for _, want := range []string{`"to_status":"authorized"`, `"to_status":"captured"`, `"to_status":"partially_refunded"`,
			`"to_status":"refunded"`, `"operation":"refund"`, `"forwarded_key":"po_`} {
			if !strings.Contains(string(b), want) {
				t.Fatalf("events lack %s: %s", want, b)
			}
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	tb, _, keyB, err := e.svc.CreateTenant(ctx, "Other")
	if err != nil {
		t.Fatal(err)
	}
	pa := e.authorizeOK(t, "shared-key", 1000)
	for _, path := range []string{"/v1/payments/" + pa.ID, "/v1/payments/" + pa.ID + "/events"} {
		res, b := e.do(t, "GET", path, keyB, nil, nil)
		wantProblem(t, res, b, 404, "not_found")
	}
	res, b := e.post(t, "/v1/payments/"+pa.ID+"/capture", keyB, "b-cap", "")
	wantProblem(t, res, b, 404, "not_found")
	_, b = e.do(t, "GET", "/v1/payments?idempotency_key=shared-key", keyB, nil, nil)
	if strings.Contains(string(b), pa.ID) {
		t.Fatal("tenant B found tenant A's payment by key")
	}
	// The same key in tenant B is an independent payment.
	res, b = e.post(t, "/v1/payments", keyB, "shared-key", `{"amount_minor":5000,"currency":"USD"}`)
	if res.StatusCode != 201 {
		t.Fatalf("tenant B with the same key: %d %s", res.StatusCode, b)
	}
	pb := decode[payment](t, b)
	if pb.ID == pa.ID || pb.TenantID != tb.ID || pb.AmountMinor != 5000 {
		t.Fatalf("tenant B's payment %+v collides with A's %s", pb, pa.ID)
	}
	if ops := e.providerOps(t, tb.ID, orchestrator.OpAuthorize, "shared-key"); len(ops) != 1 {
		t.Fatalf("tenant B's forwarded key executed %d times", len(ops))
	}
	// Staff see both by key.
	_, b = e.do(t, "GET", "/v1/payments?idempotency_key=shared-key", e.keys[orchestrator.RoleSupport], nil, nil)
	if !strings.Contains(string(b), pa.ID) || !strings.Contains(string(b), pb.ID) {
		t.Fatalf("support lookup by key: %s", b)
	}
	res, b = e.do(t, "GET", fmt.Sprintf("/v1/payments?idempotency_key=shared-key&tenant_id=%d", tb.ID), e.keys[orchestrator.RoleSupport], nil, nil)
	if res.StatusCode != 200 || strings.Contains(string(b), pa.ID) || !strings.Contains(string(b), pb.ID) {
		t.Fatalf("support lookup by key and tenant: %s", b)
	}
	// Staff cannot move money.
	res, b = e.post(t, "/v1/payments/"+pa.ID+"/capture", e.keys[orchestrator.RoleSupport], "s-cap", "")
	wantProblem(t, res, b, 403, "forbidden")
}

func TestListPaymentsPaginates(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	m := e.keys[orchestrator.RoleMerchant]
	ids := map[string]bool{}
	for i := range 5 {
		ids[e.authorizeOK(t, fmt.Sprintf("list-%d", i), int64(100+i)).ID] = true
	}
	seen := map[string]bool{}
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		path := "/v1/payments?limit=2"
		if after != "" {
			path += "&starting_after=" + after
		}
		res, b := e.do(t, "GET", path, m, nil, nil)
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, b)
		}
		page := decode[struct {
			Data    []payment `json:"data"`
			HasMore bool      `json:"has_more"`
		}](t, b)
		for _, p := range page.Data {
			if seen[p.ID] {
				t.Fatalf("%s listed twice", p.ID)
			}
			seen[p.ID] = true
			after = p.ID
		}
		if !page.HasMore {
			break
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("listed %d of %d", len(seen), len(ids))
	}
	res, b := e.do(t, "GET", "/v1/payments?status=bogus", m, nil, nil)
	wantProblem(t, res, b, 400, "validation_failed")
	res, b = e.do(t, "GET", "/v1/payments?limit=101", m, nil, nil)
	wantProblem(t, res, b, 400, "validation_failed")
}
