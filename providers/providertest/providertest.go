// Package providertest is the behaviour suite every providers.Provider
// passes: holds (charging payment methods and cards), captures, cancels,
// refunds, lookups and reports, the idempotency of forwarded keys (a card's
// retry without its CVC included), the classification of declines,
// refusals and unknown outcomes, and OnReference.
//
// A provider's own test calls Run with a Harness:
//
//	func TestProvider(t *testing.T) {
//		providertest.Run(t, providertest.Harness{New: ..., Executed: ...})
//	}
//
// Subtests run in parallel against the providers New returns and only rely
// on objects they create, so one shared provider account is fine.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// Op names a write, for the Harness hooks.
type Op string

// Writes a Harness hook can be asked about.
const (
	OpAuthorize Op = "authorize"
	OpCapture   Op = "capture"
	OpCancel    Op = "cancel"
	OpRefund    Op = "refund"
)

// Harness tells the suite how to reach one provider and what it can be made
// to do. Only New is required.
type Harness struct {
	// New returns the provider for one subtest. It may return the same
	// provider every time.
	New func(t *testing.T) providers.Provider

	// TimeoutAfterExecute, when set, arranges that the next call of op
	// carrying the forwarded key is executed by the provider but never
	// answered. Nil when the provider cannot be made to do that: the
	// timeout test is skipped.
	TimeoutAfterExecute func(t *testing.T, op Op, key string)

	// Executed, when set, returns how many writes carrying the forwarded
	// key the provider executed (replays and refusals of the key not
	// counted). Nil when the provider cannot tell: exactly-once counts are
	// not checked.
	Executed func(t *testing.T, key string) int

	// Currency of every hold; default "EUR".
	Currency string
	// Payment methods that approve, decline with card_declined and decline
	// with insufficient_funds; default Stripe's test payment methods.
	ApprovedMethod, DeclinedMethod, InsufficientFundsMethod string
	// Card numbers that approve, decline with card_declined, with
	// insufficient_funds, and with SoftDeclineCode (a soft decline);
	// default Stripe's test numbers (4242424242424242, 4000000000000002,
	// 4000000000009995, 4000000000000119 with processing_error).
	ApprovedCard, DeclinedCard, InsufficientFundsCard, SoftDeclineCard, SoftDeclineCode string
	// InvalidMethod is a payment method CheckPaymentMethod refuses;
	// default "visa".
	InvalidMethod string
	// UnknownRef is a reference no hold has; default
	// "fh_doesnotexist0000000000000".
	UnknownRef string
	// Timeout is how long the timeout test waits for an answer; default 1 s.
	Timeout time.Duration
}

func (h Harness) withDefaults() Harness {
	if h.Currency == "" {
		h.Currency = "EUR"
	}
	if h.ApprovedMethod == "" {
		h.ApprovedMethod = "pm_card_visa"
	}
	if h.DeclinedMethod == "" {
		h.DeclinedMethod = "pm_card_chargeDeclined"
	}
	if h.InsufficientFundsMethod == "" {
		h.InsufficientFundsMethod = "pm_card_chargeDeclinedInsufficientFunds"
	}
	if h.ApprovedCard == "" {
		h.ApprovedCard = "4242424242424242"
	}
	if h.DeclinedCard == "" {
		h.DeclinedCard = "4000000000000002"
	}
	if h.InsufficientFundsCard == "" {
		h.InsufficientFundsCard = "4000000000009995"
	}
	if h.SoftDeclineCard == "" {
		h.SoftDeclineCard, h.SoftDeclineCode = "4000000000000119", "processing_error"
	}
	if h.InvalidMethod == "" {
		h.InvalidMethod = "visa"
	}
	if h.UnknownRef == "" {
		h.UnknownRef = "fh_doesnotexist0000000000000"
	}
	if h.Timeout == 0 {
		h.Timeout = time.Second
	}
	return h
}

// Run runs the behaviour suite against the provider h describes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("providertest: Harness.New is required")
	}
	h = h.withDefaults()
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"CheckPaymentMethodAcceptsOnlyItsShape", testCheckPaymentMethodAcceptsOnlyItsShape},
		{"AuthorizeApprovesVisa", testAuthorizeApprovesVisa},
		{"DeclineIsKindDeclinedWithCode", testDeclineIsKindDeclinedWithCode},
		{"SameKeySameParamsReturnsSameHold", testSameKeySameParamsReturnsSameHold},
		{"SameKeyOtherParamsIsRejectedMismatch", testSameKeyOtherParamsIsRejectedMismatch},
		{"CaptureFull", testCaptureFull},
		{"CapturePartialReleasesRest", testCapturePartialReleasesRest},
		{"CaptureMoreThanAuthorizedIsRejected", testCaptureMoreThanAuthorizedIsRejected},
		{"CancelThenCaptureIsStateConflict", testCancelThenCaptureIsStateConflict},
		{"RefundsAddUpToCaptured", testRefundsAddUpToCaptured},
		{"RefundOverCapturedIsRejected", testRefundOverCapturedIsRejected},
		{"LookupUnknownRefIsRejectedNotFound", testLookupUnknownRefIsRejectedNotFound},
		{"LookupReflectsCapture", testLookupReflectsCapture},
		{"TimeoutAfterExecuteIsUnknownAndRetrySettles", testTimeoutAfterExecuteIsUnknownAndRetrySettles},
		{"ReportListsTheDaysHolds", testReportListsTheDaysHolds},
		{"OnReferenceCalledBeforeReturn", testOnReferenceCalledBeforeReturn},
		{"ForwardedKeysNeverCollideAcrossTenants", testForwardedKeysNeverCollideAcrossTenants},
		{"CardApproves", testCardApproves},
		{"CardDeclineIsKindDeclinedWithCode", testCardDeclineIsKindDeclinedWithCode},
		{"CardRetryReturnsSameHold", testCardRetryReturnsSameHold},
		{"CardRetryWithoutCVCReturnsSameHold", testCardRetryWithoutCVCReturnsSameHold},
		{"CardOtherCardSameKeyIsRejectedMismatch", testCardOtherCardSameKeyIsRejectedMismatch},
		{"CardDataThatCannotBeRightIsDeclined", testCardDataThatCannotBeRightIsDeclined},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newSuite(t, h))
		})
	}
}

// suite is one subtest's provider, tenant and context.
type suite struct {
	h      Harness
	p      providers.Provider
	tenant int64
	ctx    context.Context
}

func newSuite(t *testing.T, h Harness) *suite {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	n, err := rand.Int(rand.Reader, big.NewInt(1<<40))
	if err != nil {
		t.Fatal(err)
	}
	return &suite{h: h, p: h.New(t), tenant: n.Int64() + 1, ctx: ctx}
}

// randHex returns 16 random hex digits.
func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// key is a fresh forwarded key for op under the suite's tenant.
func (s *suite) key(op Op) string {
	return providers.ForwardedKey(s.tenant, string(op), "providertest-"+randHex())
}

// authorizeReq is a fresh approving authorization of amount.
func (s *suite) authorizeReq(amount int64) providers.AuthorizeRequest {
	return providers.AuthorizeRequest{
		Key:           s.key(OpAuthorize),
		PaymentID:     "pay_" + randHex(),
		TenantID:      s.tenant,
		AmountMinor:   amount,
		Currency:      s.h.Currency,
		PaymentMethod: s.h.ApprovedMethod,
		Description:   "providertest",
	}
}

// authorize places a hold of amount, failing the test if it is not
// authorized.
func (s *suite) authorize(t *testing.T, amount int64) providers.Hold {
	t.Helper()
	h, err := s.p.Authorize(s.ctx, s.authorizeReq(amount))
	if err != nil {
		t.Fatalf("Authorize(%d): %v", amount, err)
	}
	if h.Status != providers.StatusAuthorized {
		t.Fatalf("Authorize(%d): status %q, want authorized", amount, h.Status)
	}
	return h
}

// capture captures amount of h with a fresh key, failing the test on error.
func (s *suite) capture(t *testing.T, h providers.Hold, amount int64) providers.Hold {
	t.Helper()
	got, err := s.p.Capture(s.ctx, providers.CaptureRequest{Key: s.key(OpCapture), Ref: h.Ref, AmountMinor: amount})
	if err != nil {
		t.Fatalf("Capture(%s, %d): %v", h.Ref, amount, err)
	}
	return got
}

// lookup reads ref, failing the test on error.
func (s *suite) lookup(t *testing.T, ref string) providers.Hold {
	t.Helper()
	h, err := s.p.Lookup(s.ctx, ref)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", ref, err)
	}
	return h
}

// executed checks, when the harness can count, that the provider executed
// want writes carrying key.
func (s *suite) executed(t *testing.T, key string, want int) {
	t.Helper()
	if s.h.Executed == nil {
		return
	}
	if got := s.h.Executed(t, key); got != want {
		t.Errorf("provider executed %d operations with key %s, want %d", got, key, want)
	}
}

// wantError checks that err is a *providers.Error of kind and, unless codes
// is empty, one of codes.
func wantError(t *testing.T, err error, kind providers.Kind, codes ...string) {
	t.Helper()
	var pe *providers.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *providers.Error", err, err)
	}
	if pe.Kind != kind {
		t.Fatalf("error %v: kind %s, want %s", err, pe.Kind, kind)
	}
	if len(codes) == 0 {
		return
	}
	for _, c := range codes {
		if pe.Code == c {
			return
		}
	}
	t.Fatalf("error %v: code %q, want one of %q", err, pe.Code, codes)
}

// wantAmounts checks a hold's status and amounts.
func wantAmounts(t *testing.T, what string, h providers.Hold, status providers.Status, amount, captured, refunded int64) {
	t.Helper()
	if h.Status != status || h.AmountMinor != amount || h.CapturedMinor != captured || h.RefundedMinor != refunded {
		t.Errorf("%s: status %s amount %d captured %d refunded %d, want %s %d %d %d", what,
			h.Status, h.AmountMinor, h.CapturedMinor, h.RefundedMinor, status, amount, captured, refunded)
	}
}

// sameHold checks that two answers describe the same hold in the same state.
func sameHold(t *testing.T, a, b providers.Hold) {
	t.Helper()
	if a.Ref != b.Ref || a.PaymentID != b.PaymentID || a.Status != b.Status || a.AmountMinor != b.AmountMinor ||
		a.Currency != b.Currency || a.CapturedMinor != b.CapturedMinor || a.RefundedMinor != b.RefundedMinor ||
		a.DeclineCode != b.DeclineCode || !a.CreatedAt.Equal(b.CreatedAt) || !a.CaptureBefore.Equal(b.CaptureBefore) {
		t.Errorf("holds differ:\n first %+v\nsecond %+v", a, b)
	}
}
