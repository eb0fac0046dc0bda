package stripe

import (
	"context"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// flexAuth authorizes amount with pm asking for every flexible-hold
// feature.
func flexAuth(t *testing.T, c *Client, amount int64, pm string) (providers.AuthorizeRequest, providers.Hold) {
	t.Helper()
	req := authReq(amount)
	req.PaymentMethod = pm
	req.RequestIncrementalAuthorization, req.RequestMulticapture, req.RequestOvercapture = true, true, true
	h, err := c.Authorize(t.Context(), req)
	if err != nil || h.Status != providers.StatusAuthorized {
		t.Fatalf("Authorize(%d, %s): %+v, %v", amount, pm, h, err)
	}
	return req, h
}

// wantHold checks a hold's status and amounts, and that a lookup reads the
// same.
func wantHold(t *testing.T, c *Client, h providers.Hold, status providers.Status, amount, captured, refunded int64) {
	t.Helper()
	check := func(what string, h providers.Hold) {
		t.Helper()
		if h.Status != status || h.AmountMinor != amount || h.CapturedMinor != captured || h.RefundedMinor != refunded {
			t.Errorf("%s: status %s amount %d captured %d refunded %d, want %s %d %d %d", what,
				h.Status, h.AmountMinor, h.CapturedMinor, h.RefundedMinor, status, amount, captured, refunded)
		}
	}
	check("answer", h)
	looked, err := c.Lookup(t.Context(), h.Ref)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	check("lookup", looked)
	if looked.Flex != h.Flex {
		t.Errorf("lookup Flex %+v, answer %+v", looked.Flex, h.Flex)
	}
}

func TestFlexibleHoldsSupportsAll(t *testing.T) {
	t.Parallel()
	c := newEmulator(t).client(t, 5*time.Second)
	want := providers.FlexSupport{IncrementalAuthorization: true, Multicapture: true, Overcapture: true}
	if got := c.FlexibleHolds(); got != want {
		t.Errorf("FlexibleHolds() = %+v, want %+v", got, want)
	}
}

// TestFlexGrantsMapped: the three requests go with the creation as
// if_available (only those asked), and the hold's Flex is what the
// charge reports per card.
func TestFlexGrantsMapped(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)

	req, h := flexAuth(t, c, 5000, "pm_card_visa")
	want := providers.Flex{IncrementalAuthorization: true, Multicapture: true, Overcapture: true, MaxCapturableMinor: 6000}
	if h.Flex != want {
		t.Errorf("visa: Flex %+v, want %+v", h.Flex, want)
	}
	create := firstWrite(t, e, req.Key+keyCreate)
	for _, opt := range []string{"request_incremental_authorization", "request_multicapture", "request_overcapture"} {
		if got := create.Form.Get("payment_method_options[card][" + opt + "]"); got != "if_available" {
			t.Errorf("creation: %s = %q, want if_available", opt, got)
		}
	}
	wantHold(t, c, h, providers.StatusAuthorized, 5000, 0, 0)

	_, h = flexAuth(t, c, 5000, "pm_card_mastercard")
	if want := (providers.Flex{IncrementalAuthorization: true, Multicapture: true}); h.Flex != want {
		t.Errorf("mastercard: Flex %+v, want %+v", h.Flex, want)
	}
	_, h = flexAuth(t, c, 5000, "pm_card_amex")
	if h.Flex != (providers.Flex{}) {
		t.Errorf("amex: Flex %+v, want nothing granted", h.Flex)
	}

	only := authReq(5000)
	only.RequestMulticapture = true
	h, err := c.Authorize(t.Context(), only)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	if want := (providers.Flex{Multicapture: true}); h.Flex != want {
		t.Errorf("multicapture only: Flex %+v, want %+v", h.Flex, want)
	}
	wantWrite(t, firstWrite(t, e, only.Key+keyCreate), "/v1/payment_intents", only.Key+keyCreate, map[string]string{
		"amount": "5000", "currency": "eur", "capture_method": "manual", "payment_method": "pm_card_visa",
		"payment_method_types[0]": "card", "description": "order 17",
		"metadata[payment_id]": only.PaymentID, "metadata[tenant_id]": "42",
		"payment_method_options[card][request_multicapture]": "if_available",
	})

	// A card's grants also reach a vaulted card sent with the confirmation.
	card := cardAuthReq(5000, "4242424242424242")
	card.RequestIncrementalAuthorization, card.RequestOvercapture = true, true
	h, err = c.Authorize(t.Context(), card)
	if err != nil {
		t.Fatalf("Authorize card: %v", err)
	}
	if want := (providers.Flex{IncrementalAuthorization: true, Overcapture: true, MaxCapturableMinor: 6000}); h.Flex != want {
		t.Errorf("vaulted visa: Flex %+v, want %+v", h.Flex, want)
	}
}

// TestIncrementAuthorization: the new total under the forwarded key, the
// hold as Stripe now has it; the same key replays without raising again.
func TestIncrementAuthorization(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 5000, "pm_card_visa")

	key := fwdKey("increment")
	inc := providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 7000}
	got, err := c.IncrementAuthorization(t.Context(), inc)
	if err != nil {
		t.Fatalf("IncrementAuthorization: %v", err)
	}
	wantWrite(t, firstWrite(t, e, key), "/v1/payment_intents/"+h.Ref+"/increment_authorization", key, map[string]string{
		"amount": "7000", "expand[0]": "latest_charge",
	})
	if got.CaptureBefore.IsZero() || got.Flex.MaxCapturableMinor != 8400 || !got.Flex.IncrementalAuthorization {
		t.Errorf("incremented hold: capture_before %v, Flex %+v; want the charge's deadline and overcapture to 8400", got.CaptureBefore, got.Flex)
	}
	wantHold(t, c, got, providers.StatusAuthorized, 7000, 0, 0)

	again, err := c.IncrementAuthorization(t.Context(), inc)
	if err != nil || again.AmountMinor != 7000 {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	if n := e.executions(key); n != 1 {
		t.Errorf("the increment executed %d times under one key, want 1", n)
	}
	_, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 9000})
	wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)

	// A second increment under its own key raises again; captures then take
	// the new total.
	got, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: fwdKey("increment"), Ref: h.Ref, AmountMinor: 9000})
	if err != nil {
		t.Fatalf("second increment: %v", err)
	}
	wantHold(t, c, got, providers.StatusAuthorized, 9000, 0, 0)
	captured, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	wantHold(t, c, captured, providers.StatusCaptured, 9000, 9000, 0)
}

// TestIncrementDeclined: the issuer's refusal is a decline with its code,
// and the hold stays as it was.
func TestIncrementDeclined(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 5000, "pm_card_visa")
	key := fwdKey("increment")
	_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 15001})
	wantKind(t, err, providers.KindDeclined, "insufficient_funds")
	wantHold(t, c, h, providers.StatusAuthorized, 5000, 0, 0)
	// The decline is the key's answer: a retry is declined again, once.
	_, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 15001})
	wantKind(t, err, providers.KindDeclined, "insufficient_funds")
	if n := e.executions(key); n != 1 {
		t.Errorf("the declined increment executed %d times, want 1", n)
	}
}

// TestIncrementRefused: refusals get the seam's codes, whatever code
// Stripe gives them, and raise nothing.
func TestIncrementRefused(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	inc := func(ref string, amount int64) error {
		_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: fwdKey("increment"), Ref: ref, AmountMinor: amount})
		return err
	}

	_, amex := flexAuth(t, c, 5000, "pm_card_amex")
	wantKind(t, inc(amex.Ref, 6000), providers.KindRejected, providers.CodeNotSupported)
	plain := mustAuthorize(t, c, 5000) // asked for nothing
	wantKind(t, inc(plain.Ref, 6000), providers.KindRejected, providers.CodeNotSupported)
	wantHold(t, c, plain, providers.StatusAuthorized, 5000, 0, 0)

	_, h := flexAuth(t, c, 5000, "pm_card_visa")
	wantKind(t, inc(h.Ref, 5000), providers.KindRejected, providers.CodeInvalidRequest)
	wantKind(t, inc(h.Ref, 4000), providers.KindRejected, providers.CodeInvalidRequest)
	wantKind(t, inc(h.Ref, 0), providers.KindRejected, providers.CodeInvalidRequest)

	_, captured := flexAuth(t, c, 5000, "pm_card_visa")
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: captured.Ref}); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	wantKind(t, inc(captured.Ref, 6000), providers.KindRejected, providers.CodeStateConflict)

	_, canceled := flexAuth(t, c, 5000, "pm_card_visa")
	if _, err := c.Cancel(t.Context(), providers.CancelRequest{Key: fwdKey("cancel"), Ref: canceled.Ref}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	wantKind(t, inc(canceled.Ref, 6000), providers.KindRejected, providers.CodeStateConflict)

	_, expired := flexAuth(t, c, 5000, "pm_card_visa")
	e.lapse(expired.Ref)
	wantKind(t, inc(expired.Ref, 6000), providers.KindRejected, providers.CodeHoldExpired)

	wantKind(t, inc("pi_doesnotexist00000000000000", 6000), providers.KindRejected, providers.CodeNotFound)
	wantKind(t, func() error {
		_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Ref: h.Ref, AmountMinor: 6000})
		return err
	}(), providers.KindRejected, providers.CodeInvalidRequest)
	wantHold(t, c, h, providers.StatusAuthorized, 5000, 0, 0)
}

// TestMulticapture: captures with final_capture=false leave the hold
// authorized with their sum captured; the final capture releases the
// rest; refunds work against the captured total.
func TestMulticapture(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 10000, "pm_card_mastercard")

	first := fwdKey("capture")
	got, err := c.Capture(t.Context(), providers.CaptureRequest{Key: first, Ref: h.Ref, AmountMinor: 3000, NotFinal: true})
	if err != nil {
		t.Fatalf("first part: %v", err)
	}
	wantWrite(t, firstWrite(t, e, first), "/v1/payment_intents/"+h.Ref+"/capture", first, map[string]string{
		"amount_to_capture": "3000", "final_capture": "false", "expand[0]": "latest_charge",
	})
	wantHold(t, c, got, providers.StatusAuthorized, 10000, 3000, 0)
	again, err := c.Capture(t.Context(), providers.CaptureRequest{Key: first, Ref: h.Ref, AmountMinor: 3000, NotFinal: true})
	if err != nil || again.CapturedMinor != 3000 || e.executions(first) != 1 {
		t.Fatalf("replay of the first part: %+v, %v, executed %d times", again, err, e.executions(first))
	}

	got, err = c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 2000, NotFinal: true})
	if err != nil {
		t.Fatalf("second part: %v", err)
	}
	wantHold(t, c, got, providers.StatusAuthorized, 10000, 5000, 0)

	// More than is left is refused before anything is captured.
	_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 5001, NotFinal: true})
	wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)

	// A part may be refunded before the final capture.
	if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: fwdKey("refund"), Ref: h.Ref, AmountMinor: 500}); err != nil {
		t.Fatalf("Refund of a part: %v", err)
	}
	looked, _ := c.Lookup(t.Context(), h.Ref)
	if looked.RefundedMinor != 500 || looked.Status != providers.StatusAuthorized {
		t.Errorf("after refunding a part: %+v", looked)
	}

	got, err = c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 1000})
	if err != nil {
		t.Fatalf("final capture: %v", err)
	}
	// The released 4000 is no refund; the 500 is.
	wantHold(t, c, got, providers.StatusPartiallyRefunded, 10000, 6000, 500)
	_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 1000, NotFinal: true})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: fwdKey("refund"), Ref: h.Ref}); err != nil {
		t.Fatalf("Refund of the rest: %v", err)
	}
	looked, _ = c.Lookup(t.Context(), h.Ref)
	if looked.Status != providers.StatusRefunded || looked.RefundedMinor != 6000 {
		t.Errorf("after refunding the rest: %+v", looked)
	}
}

// TestMulticaptureToTheEnd: non-final parts that use the whole hold end
// it; a cancel after parts releases the rest and keeps the captures.
func TestMulticaptureToTheEnd(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 4000, "pm_card_visa")
	for _, part := range []int64{1500, 2500} {
		if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: part, NotFinal: true}); err != nil {
			t.Fatalf("part %d: %v", part, err)
		}
	}
	looked, _ := c.Lookup(t.Context(), h.Ref)
	wantHold(t, c, looked, providers.StatusCaptured, 4000, 4000, 0)

	_, h = flexAuth(t, c, 4000, "pm_card_visa")
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 1500, NotFinal: true}); err != nil {
		t.Fatalf("part: %v", err)
	}
	got, err := c.Cancel(t.Context(), providers.CancelRequest{Key: fwdKey("cancel"), Ref: h.Ref})
	if err != nil {
		t.Fatalf("Cancel after a part: %v", err)
	}
	wantHold(t, c, got, providers.StatusCaptured, 4000, 1500, 0)
}

// TestNotFinalWithoutMulticapture: final_capture=false on a hold not
// granted multicapture is refused not_supported, and captures nothing.
func TestNotFinalWithoutMulticapture(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	for _, h := range []providers.Hold{mustAuthorize(t, c, 5000), func() providers.Hold { _, h := flexAuth(t, c, 5000, "pm_card_amex"); return h }()} {
		_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 1000, NotFinal: true})
		wantKind(t, err, providers.KindRejected, providers.CodeNotSupported)
		wantHold(t, c, h, providers.StatusAuthorized, 5000, 0, 0)
	}
}

// TestOvercapture: a capture above the hold passes up to the reported
// maximum and is no refund; above it, or without the grant, it is refused
// amount_too_large and captures nothing.
func TestOvercapture(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)

	_, h := flexAuth(t, c, 5000, "pm_card_visa")
	_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 6001})
	wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
	wantHold(t, c, h, providers.StatusAuthorized, 5000, 0, 0)
	key := fwdKey("capture")
	got, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: h.Ref, AmountMinor: 5800})
	if err != nil {
		t.Fatalf("overcapture within the maximum: %v", err)
	}
	if got := firstWrite(t, e, key).Form.Get("amount_to_capture"); got != "5800" {
		t.Errorf("amount_to_capture = %q, want 5800 passed as it is", got)
	}
	wantHold(t, c, got, providers.StatusCaptured, 5000, 5800, 0)
	if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: fwdKey("refund"), Ref: h.Ref, AmountMinor: 800}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	looked, _ := c.Lookup(t.Context(), h.Ref)
	if looked.Status != providers.StatusPartiallyRefunded || looked.RefundedMinor != 800 {
		t.Errorf("after refunding 800 of 5800: %+v", looked)
	}

	_, at := flexAuth(t, c, 5000, "pm_card_visa")
	got, err = c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: at.Ref, AmountMinor: 6000})
	if err != nil {
		t.Fatalf("overcapture at the maximum: %v", err)
	}
	wantHold(t, c, got, providers.StatusCaptured, 5000, 6000, 0)

	for _, pm := range []string{"pm_card_mastercard", "pm_card_amex"} {
		_, h := flexAuth(t, c, 5000, pm)
		_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 5001})
		wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
		wantHold(t, c, h, providers.StatusAuthorized, 5000, 0, 0)
	}
}

// TestFlexReport: a multicapture hold between its parts reads authorized
// with its captures in the day's report; Stripe lists no increments or
// parts, so Parts stays nil.
func TestFlexReport(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 8000, "pm_card_visa")
	if _, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: fwdKey("increment"), Ref: h.Ref, AmountMinor: 9000}); err != nil {
		t.Fatalf("increment: %v", err)
	}
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: 2500, NotFinal: true}); err != nil {
		t.Fatalf("part: %v", err)
	}
	now := time.Now()
	var found bool
	err := c.Report(t.Context(), providers.ReportRequest{From: now.Add(-time.Hour), To: now.Add(time.Hour)}, func(r providers.ReportRow) error {
		if r.Ref != h.Ref {
			return nil
		}
		found = true
		if r.Status != providers.StatusAuthorized || r.AmountMinor != 9000 || r.CapturedMinor != 2500 || r.RefundedMinor != 0 || r.Parts != nil {
			t.Errorf("row %+v, want authorized 9000 with 2500 captured, no parts", r)
		}
		return nil
	})
	if err != nil || !found {
		t.Fatalf("Report: %v, row found %v", err, found)
	}
}

// TestIncrementAnswerLost: an increment executed whose answer never comes
// is an unknown outcome, not resent; the retry under the same key replays
// Stripe's stored answer and raises nothing more.
func TestIncrementAnswerLost(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 5000, "pm_card_visa")
	key := fwdKey("increment")
	e.arm(&emuFault{kind: faultHangAfterExecute, key: key})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := c.IncrementAuthorization(ctx, providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 7000})
	if providers.KindOf(err) != providers.KindUnknown {
		t.Fatalf("lost answer: %v (kind %s), want KindUnknown", err, providers.KindOf(err))
	}
	if n := len(e.recorded(key)); n != 1 {
		t.Errorf("the increment was sent %d times, want once", n)
	}
	got, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 7000})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	wantHold(t, c, got, providers.StatusAuthorized, 7000, 0, 0)
	if n := e.executions(key); n != 1 {
		t.Errorf("the increment executed %d times, want 1", n)
	}
}

// TestIncrementAttemptsUsedUp: Stripe's 10 attempts per PaymentIntent,
// declines included; the eleventh is refused invalid_request, the hold
// unchanged.
func TestIncrementAttemptsUsedUp(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	_, h := flexAuth(t, c, 1000, "pm_card_visa")
	for i := range 10 {
		_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: fwdKey("increment"), Ref: h.Ref, AmountMinor: 5000 + int64(i)})
		wantKind(t, err, providers.KindDeclined, "insufficient_funds")
	}
	_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: fwdKey("increment"), Ref: h.Ref, AmountMinor: 2000})
	wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
	wantHold(t, c, h, providers.StatusAuthorized, 1000, 0, 0)
}
