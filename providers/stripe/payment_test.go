package stripe

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

var testSeq atomic.Int64

// authReq is an approving authorization of amount under a fresh key.
func authReq(amount int64) providers.AuthorizeRequest {
	n := testSeq.Add(1)
	return providers.AuthorizeRequest{
		Key:       providers.ForwardedKey(n, "POST /v1/payments", time.Now().String()),
		PaymentID: "pay_test" + time.Now().Format("150405.000000000"), TenantID: 42,
		AmountMinor: amount, Currency: "EUR", PaymentMethod: "pm_card_visa", Description: "order 17",
	}
}

// fwdKey is a fresh forwarded key for another write.
func fwdKey(op string) string {
	return providers.ForwardedKey(testSeq.Add(1), op, time.Now().String())
}

func mustAuthorize(t *testing.T, c *Client, amount int64) providers.Hold {
	t.Helper()
	h, err := c.Authorize(t.Context(), authReq(amount))
	if err != nil || h.Status != providers.StatusAuthorized {
		t.Fatalf("Authorize(%d): %+v, %v", amount, h, err)
	}
	return h
}

// wantKind checks err's kind and code.
func wantKind(t *testing.T, err error, kind providers.Kind, code string) {
	t.Helper()
	if k, c := providers.KindOf(err), providers.CodeOf(err); err == nil || k != kind || c != code {
		t.Fatalf("error %v: kind %s code %q, want %s %q", err, k, c, kind, code)
	}
}

// TestWriteRequestShapes checks every write's Idempotency-Key and form
// parameters as the adapter sends them.
func TestWriteRequestShapes(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	req := authReq(5000)
	h, err := c.Authorize(t.Context(), req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	writes := e.recorded(req.Key)
	if len(writes) != 2 {
		t.Fatalf("authorize sent %d keyed requests, want create and confirm: %+v", len(writes), writes)
	}
	create, confirm := writes[0], writes[1]
	wantWrite(t, create, "/v1/payment_intents", req.Key+":create", map[string]string{
		"amount": "5000", "currency": "eur", "capture_method": "manual", "payment_method": "pm_card_visa",
		"payment_method_types[0]": "card", "description": "order 17",
		"metadata[payment_id]": req.PaymentID, "metadata[tenant_id]": "42",
	})
	wantWrite(t, confirm, "/v1/payment_intents/"+h.Ref+"/confirm", req.Key+":confirm", map[string]string{
		"expand[0]": "latest_charge", "error_on_requires_action": "true",
	})

	partial := fwdKey("capture")
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: partial, Ref: h.Ref, AmountMinor: 3000}); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	wantWrite(t, firstWrite(t, e, partial), "/v1/payment_intents/"+h.Ref+"/capture", partial, map[string]string{
		"amount_to_capture": "3000", "expand[0]": "latest_charge",
	})
	refundKey := fwdKey("refund")
	if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: refundKey, Ref: h.Ref, AmountMinor: 1000}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	wantWrite(t, firstWrite(t, e, refundKey), "/v1/refunds", refundKey, map[string]string{
		"payment_intent": h.Ref, "amount": "1000",
	})

	h2 := mustAuthorize(t, c, 700)
	full := fwdKey("capture")
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: full, Ref: h2.Ref}); err != nil {
		t.Fatalf("Capture all: %v", err)
	}
	wantWrite(t, firstWrite(t, e, full), "/v1/payment_intents/"+h2.Ref+"/capture", full, map[string]string{
		"expand[0]": "latest_charge",
	})
	h3 := mustAuthorize(t, c, 800)
	cancel := fwdKey("cancel")
	if _, err := c.Cancel(t.Context(), providers.CancelRequest{Key: cancel, Ref: h3.Ref}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	wantWrite(t, firstWrite(t, e, cancel), "/v1/payment_intents/"+h3.Ref+"/cancel", cancel, map[string]string{
		"expand[0]": "latest_charge",
	})

	for _, r := range e.recorded("") {
		if r.Method != http.MethodPost && r.Key != "" {
			t.Errorf("%s %s carries Idempotency-Key %q", r.Method, r.Path, r.Key)
		}
		if r.Method == http.MethodPost && (r.Key == "" || len(r.Key) > 255) {
			t.Errorf("%s %s carries Idempotency-Key %q", r.Method, r.Path, r.Key)
		}
	}
}

// firstWrite is the first request carrying key.
func firstWrite(t *testing.T, e *emulator, key string) emuRequest {
	t.Helper()
	rs := e.recorded(key)
	if len(rs) == 0 {
		t.Fatalf("no request carried the forwarded key %s", key)
	}
	return rs[0]
}

// wantWrite checks one recorded write: path, key and exactly these form
// parameters.
func wantWrite(t *testing.T, r emuRequest, path, key string, form map[string]string) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != path || r.Key != key {
		t.Errorf("write %s %s key %q, want POST %s key %q", r.Method, r.Path, r.Key, path, key)
	}
	for name, want := range form {
		if got := r.Form.Get(name); got != want {
			t.Errorf("%s: %s = %q, want %q", path, name, got, want)
		}
	}
	for name := range r.Form {
		if _, ok := form[name]; !ok {
			t.Errorf("%s: unexpected parameter %s=%q", path, name, r.Form.Get(name))
		}
	}
}

// TestScriptedAnswers: each answer Stripe may give a write, scripted before
// anything executes, classified once, and never retried by stripe-go.
func TestScriptedAnswers(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	for _, tc := range []struct {
		name                 string
		status               int
		typ, code, decline   string
		kind                 providers.Kind
		wantCode             string
		executedAfterNoFault bool
	}{
		{"DeclineIsFinal", 402, "card_error", "card_declined", "do_not_honor", providers.KindDeclined, "do_not_honor", false},
		{"KeyInUseIsNotExecuted", 409, "invalid_request_error", "idempotency_key_in_use", "", providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse, true},
		{"RateLimitIsNotExecuted", 429, "invalid_request_error", "rate_limit", "", providers.KindNotExecuted, providers.CodeProviderUnavailable, true},
		{"IdempotencyErrorIsMismatch", 400, "idempotency_error", "", "", providers.KindRejected, providers.CodeIdempotencyMismatch, false},
		{"ServerErrorIsUnknown", 500, "api_error", "", "", providers.KindUnknown, providers.CodeProviderInternalError, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := mustAuthorize(t, c, 4000)
			req := providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref}
			e.answerWith(req.Key, "", tc.status, tc.typ, tc.code, tc.decline)
			_, err := c.Capture(t.Context(), req)
			wantKind(t, err, tc.kind, tc.wantCode)
			if n := len(e.recorded(req.Key)); n != 1 {
				t.Errorf("the adapter sent %d requests, want 1 (no library retries)", n)
			}
			if e.executions(req.Key) != 0 {
				t.Error("the scripted answer executed the capture")
			}
			if !tc.executedAfterNoFault {
				return
			}
			// Safe to retry with the same key: it executes once now.
			got, err := c.Capture(t.Context(), req)
			if err != nil || got.Status != providers.StatusCaptured {
				t.Fatalf("retried Capture: %+v, %v", got, err)
			}
			if n := e.executions(req.Key); n != 1 {
				t.Errorf("executed %d times, want 1", n)
			}
		})
	}
}

// TestInFlightKeyIsNotExecuted: a retry while the first request with the
// key still executes gets Stripe's 409, and the capture happens once.
func TestInFlightKeyIsNotExecuted(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	h := mustAuthorize(t, c, 4000)
	req := providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 1000}
	f := e.arm(&emuFault{kind: faultBlock, key: req.Key})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(f.release) }) }
	t.Cleanup(release) // never leave the emulator's handler blocked
	type result struct {
		h   providers.Hold
		err error
	}
	first := make(chan result, 1)
	go func() {
		h, err := c.Capture(t.Context(), req)
		first <- result{h, err}
	}()
	select {
	case <-f.arrived:
	case r := <-first:
		t.Fatalf("the first Capture did not wait on its key: %+v, %v", r.h, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first Capture never reached Stripe with its key")
	}
	_, err := c.Capture(t.Context(), req)
	wantKind(t, err, providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse)
	release()
	r := <-first
	if r.err != nil || r.h.Status != providers.StatusCaptured || r.h.CapturedMinor != 1000 {
		t.Fatalf("first Capture: %+v, %v", r.h, r.err)
	}
	if n := e.executions(req.Key); n != 1 {
		t.Errorf("executed %d times, want 1", n)
	}
}

// TestHangPastClientTimeoutIsUnknown: an answer that never comes is an
// unknown outcome after the HTTP client's timeout, and the retry with the
// same key settles it without a second capture.
func TestHangPastClientTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 300*time.Millisecond)
	h := mustAuthorize(t, c, 4000)
	req := providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 2500}
	e.arm(&emuFault{kind: faultHangAfterExecute, key: req.Key})
	start := time.Now()
	_, err := c.Capture(t.Context(), req)
	wantKind(t, err, providers.KindUnknown, providers.CodeProviderTimeout)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %s, want about the 300ms timeout", d)
	}
	got, err := c.Capture(t.Context(), req)
	if err != nil || got.Status != providers.StatusCaptured || got.CapturedMinor != 2500 {
		t.Fatalf("retried Capture: %+v, %v", got, err)
	}
	if n := e.executions(req.Key); n != 1 {
		t.Errorf("executed %d times, want 1", n)
	}
}

// TestLostConfirmAnswerIsSettledByOneRetrieve: the confirmation executed
// but its answer was lost while the caller still waits; one retrieve of
// the saved reference answers the authorization.
func TestLostConfirmAnswerIsSettledByOneRetrieve(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 300*time.Millisecond)
	req := authReq(2600)
	var ref string
	req.OnReference = func(_ context.Context, r string) error { ref = r; return nil }
	e.arm(&emuFault{kind: faultHangAfterExecute, key: req.Key + keyConfirm})
	h, err := c.Authorize(t.Context(), req)
	if err != nil || h.Status != providers.StatusAuthorized || h.Ref != ref || h.AmountMinor != 2600 {
		t.Fatalf("Authorize: %+v, %v (reference %q)", h, err, ref)
	}
	gets := 0
	for _, r := range e.recorded("") {
		if r.Method == http.MethodGet && r.Path == "/v1/payment_intents/"+ref {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d retrieves, want 1", gets)
	}
}

// TestConfirmServerErrorStaysUnknown: a 5xx on the confirmation with the
// PaymentIntent still unconfirmed is an unknown outcome, not a failure;
// the retry with the same key authorizes the one PaymentIntent.
func TestConfirmServerErrorStaysUnknown(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	req := authReq(1900)
	e.answerWith(req.Key+keyConfirm, "", 500, "api_error", "", "")
	_, err := c.Authorize(t.Context(), req)
	wantKind(t, err, providers.KindUnknown, providers.CodeProviderInternalError)
	h, err := c.Authorize(t.Context(), req)
	if err != nil || h.Status != providers.StatusAuthorized {
		t.Fatalf("retried Authorize: %+v, %v", h, err)
	}
	if n := e.executions(req.Key + keyCreate); n != 1 {
		t.Errorf("%d PaymentIntents created, want 1", n)
	}
}

// TestConnectionRefusedIsNotExecuted: nothing listens, nothing was sent.
func TestConnectionRefusedIsNotExecuted(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := New(Config{SecretKey: emuSecret, APIBase: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Authorize(t.Context(), authReq(100))
	wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
}

// TestCaptureAfterTheHoldLapsedIsHoldExpired: Stripe canceled the hold
// itself at capture_before; the capture is refused as hold_expired and the
// hold reads as expired.
func TestCaptureAfterTheHoldLapsedIsHoldExpired(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	h := mustAuthorize(t, c, 3000)
	if want := e.captureBefore(h.Ref); !h.CaptureBefore.Equal(want) {
		t.Errorf("CaptureBefore %s, want the charge's %s", h.CaptureBefore, want)
	}
	e.lapse(h.Ref)
	_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeHoldExpired)
	got, err := c.Lookup(t.Context(), h.Ref)
	if err != nil || got.Status != providers.StatusExpired || got.RefundedMinor != 0 || got.CapturedMinor != 0 {
		t.Fatalf("Lookup: %+v, %v", got, err)
	}
}

// TestWritesRefusedBeforeSending: a write that could act twice (no key)
// or that Stripe would refuse (key too long, bad amounts) sends nothing.
func TestWritesRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	long := strings.Repeat("k", 250)
	for name, call := range map[string]func() error{
		"AuthorizeWithoutKey": func() error { r := authReq(100); r.Key = ""; _, err := c.Authorize(t.Context(), r); return err },
		"AuthorizeKeyTooLong": func() error { r := authReq(100); r.Key = long; _, err := c.Authorize(t.Context(), r); return err },
		"AuthorizeZero":       func() error { _, err := c.Authorize(t.Context(), authReq(0)); return err },
		"AuthorizeNoMethod": func() error {
			r := authReq(100)
			r.PaymentMethod = ""
			_, err := c.Authorize(t.Context(), r)
			return err
		},
		"CaptureWithoutKey": func() error {
			_, err := c.Capture(t.Context(), providers.CaptureRequest{Ref: "pi_1"})
			return err
		},
		"CaptureWithoutRef": func() error {
			_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: "k"})
			return err
		},
		"CaptureNegative": func() error {
			_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: "k", Ref: "pi_1", AmountMinor: -1})
			return err
		},
		"CancelWithoutKey": func() error { _, err := c.Cancel(t.Context(), providers.CancelRequest{Ref: "pi_1"}); return err },
		"RefundWithoutKey": func() error { _, err := c.Refund(t.Context(), providers.RefundRequest{Ref: "pi_1"}); return err },
		"RefundNegative": func() error {
			_, err := c.Refund(t.Context(), providers.RefundRequest{Key: "k", Ref: "pi_1", AmountMinor: -5})
			return err
		},
		"LookupEmpty": func() error { _, err := c.Lookup(t.Context(), ""); return err },
	} {
		if err := call(); providers.KindOf(err) != providers.KindRejected || providers.CodeOf(err) != providers.CodeInvalidRequest {
			t.Errorf("%s: %v, want rejected invalid_request", name, err)
		}
	}
	if n := len(e.recorded("")); n != 0 {
		t.Errorf("%d requests reached Stripe, want none", n)
	}
}

// A hold asked with request_extended_authorization sends it, and its
// extension reads the PaymentIntent (Stripe has no extend call: nothing is
// written); any other hold's extension is not_supported, sent nowhere.
func TestExtendedAuthorization(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	req := authReq(900)
	req.ExtendedAuthorization = true
	h, err := c.Authorize(t.Context(), req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	if got := firstWrite(t, e, req.Key+":create").Form.Get("payment_method_options[card][request_extended_authorization]"); got != "if_available" {
		t.Fatalf("request_extended_authorization = %q", got)
	}
	before := len(e.recorded(""))
	ext, err := c.ExtendHold(t.Context(), providers.ExtendRequest{Key: fwdKey("extend"), Ref: h.Ref, ExtendedAuthorization: true})
	if err != nil || ext.Ref != h.Ref || ext.Status != providers.StatusAuthorized {
		t.Fatalf("ExtendHold: %+v %v", ext, err)
	}
	for _, r := range e.recorded("")[before:] {
		if r.Method != http.MethodGet {
			t.Fatalf("an extension sent %s %s", r.Method, r.Path)
		}
	}
	plain := mustAuthorize(t, c, 800)
	before = len(e.recorded(""))
	_, err = c.ExtendHold(t.Context(), providers.ExtendRequest{Key: fwdKey("extend"), Ref: plain.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeNotSupported)
	if n := len(e.recorded("")) - before; n != 0 {
		t.Fatalf("a refused extension sent %d requests", n)
	}
}
