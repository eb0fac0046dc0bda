package fake_test

import (
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

func TestHoldExpiresAtCaptureBefore(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clk := testkit.NewClock(t0)
	_, c := start(t, fake.Config{HoldLifetime: time.Hour, Clock: clk.Now})

	early, late := authorize(t, c, 1000), authorize(t, c, 2000)
	if !late.CaptureBefore.Equal(t0.Add(time.Hour)) {
		t.Fatalf("CaptureBefore %s, want created + HoldLifetime = %s", late.CaptureBefore, t0.Add(time.Hour))
	}
	clk.Add(59 * time.Minute)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: early.Ref}); err != nil {
		t.Fatalf("capture a minute before capture_before: %v", err)
	}

	clk.Add(time.Minute) // exactly capture_before
	got, err := c.Lookup(t.Context(), late.Ref)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if got.Status != providers.StatusExpired {
		t.Errorf("hold past capture_before reads %s, want expired", got.Status)
	}
	captureKey := newKey(t)
	_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: captureKey, Ref: late.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeHoldExpired)
	if ops := operations(t, c, captureKey); len(ops) != 1 || ops[0].Outcome != providers.CodeHoldExpired {
		t.Errorf("log %+v, want one capture refused with hold_expired", ops)
	}
	_, err = c.Cancel(t.Context(), providers.CancelRequest{Key: newKey(t), Ref: late.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	if got, _ := c.Lookup(t.Context(), early.Ref); got.Status != providers.StatusCaptured {
		t.Errorf("the captured hold reads %s after capture_before, want captured", got.Status)
	}

	// The lapse is a change of the hour it happened in.
	rows := report(t, c, t0.Add(30*time.Minute), t0.Add(2*time.Hour))
	if len(rows) != 2 {
		t.Fatalf("report lists %d holds, want the captured and the expired one: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.Ref == late.Ref && (r.Status != providers.StatusExpired || !r.UpdatedAt.Equal(t0.Add(time.Hour))) {
			t.Errorf("expired hold's row %+v, want status expired updated at capture_before", r)
		}
	}
}

func TestUnknownRefIsNotFound(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	const ref = "fh_000000000000000000000000"
	for name, call := range map[string]func() error{
		"Capture": func() error {
			_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: ref})
			return err
		},
		"Cancel": func() error {
			_, err := c.Cancel(t.Context(), providers.CancelRequest{Key: newKey(t), Ref: ref})
			return err
		},
		"Refund": func() error {
			_, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: ref, AmountMinor: 1})
			return err
		},
		"Lookup": func() error { _, err := c.Lookup(t.Context(), ref); return err },
	} {
		t.Run(name, func(t *testing.T) {
			wantKind(t, call(), providers.KindRejected, providers.CodeNotFound)
		})
	}
}

func TestEmptyRefIsRefusedWithoutSending(t *testing.T) {
	t.Parallel()
	// Nothing listens here: a request sent would fail as not executed.
	c := fake.NewClient("http://127.0.0.1:1", nil)
	_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: "k"})
	wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
	_, err = c.Lookup(t.Context(), "")
	wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
}

func TestCancelReleasesAndRefundsNeedACapture(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	h := authorize(t, c, 1000)
	_, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 100})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	key := newKey(t)
	got, err := c.Cancel(t.Context(), providers.CancelRequest{Key: key, Ref: h.Ref})
	if err != nil || got.Status != providers.StatusCanceled {
		t.Fatalf("Cancel: %v, %s", err, got.Status)
	}
	_, err = c.Cancel(t.Context(), providers.CancelRequest{Key: newKey(t), Ref: h.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	if ops := operations(t, c, key); len(ops) != 1 || ops[0].AmountMinor != 1000 || ops[0].Outcome != fake.OutcomeSucceeded {
		t.Errorf("log %+v, want one cancel releasing 1000", ops)
	}
}

func TestRefundWithoutAmountRefundsTheRest(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	h := authorize(t, c, 1000)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 800}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 300}); err != nil {
		t.Fatal(err)
	}
	rf, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref})
	if err != nil || rf.AmountMinor != 500 {
		t.Fatalf("Refund of the rest: %+v, %v; want 500", rf, err)
	}
	got, _ := c.Lookup(t.Context(), h.Ref)
	if got.Status != providers.StatusRefunded || got.RefundedMinor != 800 {
		t.Errorf("hold %s refunded %d, want refunded 800", got.Status, got.RefundedMinor)
	}
}

// TestPaymentMethodsDeclineWithTheirCode: each of Stripe's test payment
// methods the fake knows declines with its code, soft declines included
// (the codes payorch fails over on): a 402 classified as KindDeclined with
// the code, a declined hold that keeps it, and one operation logged with
// it as its outcome.
func TestPaymentMethodsDeclineWithTheirCode(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	for pm, code := range map[string]string{
		"pm_card_chargeDeclined":                  providers.CodeCardDeclined,
		"pm_card_chargeDeclinedInsufficientFunds": providers.CodeInsufficientFunds,
		"pm_card_chargeDeclinedProcessingError":   "processing_error",
		"pm_card_issuerUnavailable":               "issuer_not_available",
		"pm_card_tryAgainLater":                   "try_again_later",
	} {
		t.Run(pm, func(t *testing.T) {
			t.Parallel()
			req := authReq(t, 1500)
			req.PaymentMethod = pm
			h, err := c.Authorize(t.Context(), req)
			wantKind(t, err, providers.KindDeclined, code)
			if h.Status != providers.StatusDeclined || h.DeclineCode != code || h.Ref == "" {
				t.Fatalf("declined hold %+v, want status declined with decline code %s", h, code)
			}
			got, err := c.Lookup(t.Context(), h.Ref)
			if err != nil || got.Status != providers.StatusDeclined || got.DeclineCode != code {
				t.Fatalf("lookup %+v (%v), want declined with %s", got, err, code)
			}
			if ops := operations(t, c, req.Key); len(ops) != 1 || ops[0].Outcome != code {
				t.Fatalf("log %+v, want one authorize with outcome %s", ops, code)
			}
		})
	}
}
