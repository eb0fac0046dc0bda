package fake_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

func TestConcurrentIdenticalRequestsExecuteOnce(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	req := authReq(t, 7700)
	// Every call with the key waits 300ms; the one that claimed the key
	// waits while holding it, so the others arrive while it executes.
	inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency, LatencyMS: 300, IdempotencyKey: req.Key})

	const n = 50
	holds := make([]providers.Hold, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { holds[i], errs[i] = c.Authorize(t.Context(), req) })
	}
	wg.Wait()

	ops := operations(t, c, req.Key)
	if len(ops) != 1 {
		t.Fatalf("%d concurrent requests executed %d operations, want 1", n, len(ops))
	}
	ok, inUse := 0, 0
	for i, err := range errs {
		if err != nil {
			wantKind(t, err, providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse)
			inUse++
			continue
		}
		ok++
		if holds[i].Ref != ops[0].Ref || holds[i].AmountMinor != 7700 {
			t.Errorf("answer %d is hold %s of %d, want %s of 7700", i, holds[i].Ref, holds[i].AmountMinor, ops[0].Ref)
		}
	}
	if ok == 0 || inUse == 0 {
		t.Errorf("%d answers were the hold and %d were in use; want some of each", ok, inUse)
	}
	if err := c.ClearFaults(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h, err := c.Authorize(t.Context(), req); err != nil || h.Ref != ops[0].Ref {
		t.Fatalf("retry after the storm: %s, %v; want %s", h.Ref, err, ops[0].Ref)
	}
}

func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	key := newKey(t)
	created, first := rawAuthorize(t, r.URL(), key,
		[]byte(`{"amount_minor":1200,"currency":"EUR","metadata":{"payment_id":"pay_1","tenant_id":"3"}}`))
	if first.status != http.StatusOK || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first answer %d %q (replayed %q)", first.status, first.body, first.header.Get("Idempotent-Replayed"))
	}
	// Key order and whitespace do not matter.
	created2, again := rawAuthorize(t, r.URL(), key,
		[]byte(`{ "metadata": {"tenant_id":"3", "payment_id":"pay_1"}, "currency": "EUR", "amount_minor": 1200 }`))
	if !bytes.Equal(created2.body, created.body) || again.status != first.status || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay %d %q, want %d %q", again.status, again.body, first.status, first.body)
	}
	if again.header.Get("Idempotent-Replayed") != "true" || created2.header.Get("Idempotent-Replayed") != "true" {
		t.Error("replay lacks Idempotent-Replayed: true")
	}
	if n := len(operations(t, c, key)); n != 1 {
		t.Errorf("%d operations, want 1", n)
	}
}

func TestDeclineIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	key := newKey(t)
	body := []byte(`{"amount_minor":900,"currency":"USD","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`)
	_, first := rawAuthorize(t, r.URL(), key, body)
	var eb struct {
		Error struct {
			Code string
			Hold struct{ Ref, Status string }
		}
	}
	if err := json.Unmarshal(first.body, &eb); err != nil || first.status != http.StatusPaymentRequired ||
		eb.Error.Code != providers.CodeInsufficientFunds || eb.Error.Hold.Status != "declined" || eb.Error.Hold.Ref == "" {
		t.Fatalf("decline answer %d %s", first.status, first.body)
	}
	_, again := rawAuthorize(t, r.URL(), key, body)
	if again.status != first.status || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed decline %d %s, want the first", again.status, again.body)
	}
	ops := operations(t, c, key)
	if len(ops) != 1 || ops[0].Outcome != providers.CodeInsufficientFunds || ops[0].Ref != eb.Error.Hold.Ref {
		t.Fatalf("log %+v, want one insufficient_funds authorize", ops)
	}
}

func TestSameKeyOtherBodyIsMismatch(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	key := newKey(t)
	hdr := map[string]string{"Idempotency-Key": key}
	if _, got := rawAuthorize(t, r.URL(), key, []byte(`{"amount_minor":100,"currency":"EUR"}`)); got.status != 200 {
		t.Fatalf("first: %d %s", got.status, got.body)
	}
	got := do(t, "POST", r.URL()+"/v1/holds", hdr, []byte(`{"amount_minor":100,"currency":"GBP"}`))
	if got.status != http.StatusBadRequest || !strings.Contains(string(got.body), `"code":"idempotency_key_mismatch"`) {
		t.Fatalf("other body: %d %s, want 400 idempotency_key_mismatch", got.status, got.body)
	}
	if n := len(operations(t, c, key)); n != 1 {
		t.Errorf("%d operations, want 1", n)
	}
}

func TestKeysAreScopedPerEndpoint(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	a, b := authorize(t, c, 1000), authorize(t, c, 1000)
	key := newKey(t)
	// One key on two endpoints is two requests.
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: a.Ref}); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if _, err := c.Cancel(t.Context(), providers.CancelRequest{Key: key, Ref: b.Ref}); err != nil {
		t.Fatalf("Cancel with the capture's key: %v", err)
	}
	// The same endpoint with another hold is other parameters.
	_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: b.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
	ops := operations(t, c, key)
	if len(ops) != 2 || ops[0].Operation != fake.OpCapture || ops[1].Operation != fake.OpCancel {
		t.Fatalf("log %+v, want a capture and a cancel", ops)
	}
}

func TestInvalidRequestsAreRefusedAndNotStored(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	valid := `{"amount_minor":100,"currency":"EUR"}`
	for _, tc := range []struct {
		name        string
		key         string
		contentType string
		body        string
		status      int
	}{
		{"MissingKey", "", "", valid, http.StatusBadRequest},
		{"KeyTooLong", strings.Repeat("k", 256), "", valid, http.StatusBadRequest},
		{"KeyNotASCII", "clé", "", valid, http.StatusBadRequest},
		{"UnknownField", "k", "", `{"amount_minor":100,"currency":"EUR","capture":true}`, http.StatusBadRequest},
		{"TrailingData", "k", "", valid + `{}`, http.StatusBadRequest},
		{"NotJSON", "k", "text/plain", valid, http.StatusUnsupportedMediaType},
		{"TooLarge", "k", "", `{"amount_minor":100,"currency":"EUR","description":"` + strings.Repeat("x", 70<<10) + `"}`, http.StatusRequestEntityTooLarge},
		{"UnknownPaymentMethod", "k", "", `{"amount_minor":100,"currency":"EUR","payment_method":"pm_card_amex_typo"}`, http.StatusBadRequest},
		{"LowerCaseCurrency", "k", "", `{"amount_minor":100,"currency":"eur"}`, http.StatusBadRequest},
		{"ZeroAmount", "k", "", `{"amount_minor":0,"currency":"EUR"}`, http.StatusBadRequest},
		{"FloatAmount", "k", "", `{"amount_minor":1.5,"currency":"EUR"}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := tc.key
			if key == "k" {
				key = newKey(t)
			}
			hdr := map[string]string{"Idempotency-Key": key}
			if tc.contentType != "" {
				hdr["Content-Type"] = tc.contentType
			}
			got := do(t, "POST", r.URL()+"/v1/holds", hdr, []byte(tc.body))
			if got.status != tc.status || !strings.Contains(string(got.body), `"code":"invalid_request"`) {
				t.Fatalf("got %d %s, want %d invalid_request", got.status, got.body, tc.status)
			}
			if key == "" || len(key) > 255 || key == "clé" {
				return
			}
			// Nothing was stored: the key still works with a valid body.
			if _, ok := rawAuthorize(t, r.URL(), key, []byte(valid)); ok.status != http.StatusOK {
				t.Fatalf("valid request after the refused one: %d %s", ok.status, ok.body)
			}
			if n := len(operations(t, c, key)); n != 1 {
				t.Errorf("%d operations, want 1", n)
			}
		})
	}
}

func TestTraceparentIsAccepted(t *testing.T) {
	t.Parallel()
	r, _ := start(t, fake.Config{})
	got := do(t, "POST", r.URL()+"/v1/holds", map[string]string{
		"Idempotency-Key": newKey(t),
		"traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, []byte(`{"amount_minor":100,"currency":"EUR"}`))
	if got.status != http.StatusOK {
		t.Fatalf("got %d %s", got.status, got.body)
	}
}

// rawAuthorize authorizes over raw HTTP as the Client does: create the hold,
// then confirm it, both under key. It returns both answers.
func rawAuthorize(t *testing.T, base, key string, body []byte) (created, confirmed rawResponse) {
	t.Helper()
	hdr := map[string]string{"Idempotency-Key": key}
	created = do(t, "POST", base+"/v1/holds", hdr, body)
	if created.status != http.StatusOK {
		return created, created
	}
	var h struct{ Ref string }
	if err := json.Unmarshal(created.body, &h); err != nil || h.Ref == "" {
		t.Fatalf("create answered %s", created.body)
	}
	return created, do(t, "POST", base+"/v1/holds/"+h.Ref+"/confirm", hdr, nil)
}
