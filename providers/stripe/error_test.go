package stripe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// TestClassify is the error table: every answer of Stripe and every
// transport failure the adapter can meet, and what it means for the money.
func TestClassify(t *testing.T) {
	t.Parallel()
	se := func(status int, typ stripego.ErrorType, code stripego.ErrorCode, decline stripego.DeclineCode, param string) error {
		return &stripego.Error{HTTPStatusCode: status, Type: typ, Code: code, DeclineCode: decline, Param: param, Msg: "m"}
	}
	lapsedIntent := &stripego.Error{HTTPStatusCode: 400, Type: stripego.ErrorTypeInvalidRequest,
		Code:          stripego.ErrorCodePaymentIntentUnexpectedState,
		PaymentIntent: &stripego.PaymentIntent{ID: "pi_1", Status: stripego.PaymentIntentStatusCanceled, CancellationReason: stripego.PaymentIntentCancellationReasonAutomatic}}
	canceledIntent := &stripego.Error{HTTPStatusCode: 400, Type: stripego.ErrorTypeInvalidRequest,
		Code:          stripego.ErrorCodePaymentIntentUnexpectedState,
		PaymentIntent: &stripego.PaymentIntent{ID: "pi_1", Status: stripego.PaymentIntentStatusCanceled, CancellationReason: stripego.PaymentIntentCancellationReasonRequestedByCustomer}}
	urlErr := func(err error) error { return &url.Error{Op: "Post", URL: "https://api.stripe.com/v1/x", Err: err} }
	refused := urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	inv, card := stripego.ErrorTypeInvalidRequest, stripego.ErrorTypeCard

	for _, tc := range []struct {
		name string
		err  error
		sent bool
		kind providers.Kind
		code string
	}{
		// Declines: final.
		{"GenericDeclineIsCardDeclined", se(402, card, "card_declined", "generic_decline", ""), true, providers.KindDeclined, providers.CodeCardDeclined},
		{"DeclineCodeWins", se(402, card, "card_declined", "insufficient_funds", ""), true, providers.KindDeclined, providers.CodeInsufficientFunds},
		{"CodeWithoutDeclineCode", se(402, card, "expired_card", "", ""), true, providers.KindDeclined, "expired_card"},
		{"AuthenticationRequired", se(402, card, "authentication_required", "authentication_required", ""), true, providers.KindDeclined, "authentication_required"},
		{"CardErrorWithoutCode", se(402, card, "", "", ""), true, providers.KindDeclined, providers.CodeCardDeclined},
		// Nothing executed: retry with the same key.
		{"KeyInUse", se(409, inv, "idempotency_key_in_use", "", ""), true, providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse},
		{"OtherConflict", se(409, inv, "", "", ""), true, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"RateLimited", se(429, inv, "rate_limit", "", ""), true, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"LockTimeout", se(429, inv, "lock_timeout", "", ""), true, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"BadKey", se(401, inv, "", "", ""), true, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"NotPermitted", se(403, inv, "", "", ""), true, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"ConnectionRefused", refused, false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"DNSFailure", urlErr(&net.DNSError{Err: "no such host", Name: "api.stripe.test", IsNotFound: true}), false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"DeadlineBeforeConnecting", urlErr(context.DeadlineExceeded), false, providers.KindNotExecuted, providers.CodeProviderTimeout},
		{"CanceledBeforeConnecting", urlErr(context.Canceled), false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		// Unknown outcome: keep pending, settle with the same key. A
		// refused connection after one was obtained: the transport may
		// have resent the request, whose first copy may have executed.
		{"ConnectionRefusedAfterATrace", refused, true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"InternalError", se(500, stripego.ErrorTypeAPI, "", "", ""), true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"Unavailable", se(503, stripego.ErrorTypeAPI, "", "", ""), true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"APIErrorType", se(400, stripego.ErrorTypeAPI, "", "", ""), true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"DeadlineAfterSending", urlErr(context.DeadlineExceeded), true, providers.KindUnknown, providers.CodeProviderTimeout},
		{"ClientTimeoutAfterSending", urlErr(timeoutError{}), true, providers.KindUnknown, providers.CodeProviderTimeout},
		{"ResetAfterSending", urlErr(syscall.ECONNRESET), true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"CutAnswer", io.ErrUnexpectedEOF, true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"UnparsableAnswer", errors.New("Couldn't deserialize JSON (response status: 502, body sample: '<html>')"), true, providers.KindUnknown, providers.CodeProviderInternalError},
		// Refused: final, with a code.
		{"IdempotencyMismatch", se(400, stripego.ErrorTypeIdempotency, "", "", ""), true, providers.KindRejected, providers.CodeIdempotencyMismatch},
		{"ResourceMissing", se(404, inv, "resource_missing", "", "intent"), true, providers.KindRejected, providers.CodeNotFound},
		{"ResourceMissingParam", se(400, inv, "resource_missing", "", "payment_intent"), true, providers.KindRejected, providers.CodeNotFound},
		{"NotFoundWithoutCode", se(404, inv, "", "", ""), true, providers.KindRejected, providers.CodeNotFound},
		{"UnexpectedState", se(400, inv, "payment_intent_unexpected_state", "", ""), true, providers.KindRejected, providers.CodeStateConflict},
		{"UnexpectedStateOfCanceledHold", canceledIntent, true, providers.KindRejected, providers.CodeStateConflict},
		{"UnexpectedStateOfLapsedHold", lapsedIntent, true, providers.KindRejected, providers.CodeHoldExpired},
		{"ChargeExpiredForCapture", se(400, inv, "charge_expired_for_capture", "", ""), true, providers.KindRejected, providers.CodeHoldExpired},
		{"AuthorizationExpired", se(400, inv, "capture_charge_authorization_expired", "", ""), true, providers.KindRejected, providers.CodeHoldExpired},
		{"AlreadyRefunded", se(400, inv, "charge_already_refunded", "", ""), true, providers.KindRejected, providers.CodeStateConflict},
		{"AlreadyCaptured", se(400, inv, "charge_already_captured", "", ""), true, providers.KindRejected, providers.CodeStateConflict},
		{"NotRefundable", se(400, inv, "charge_not_refundable", "", ""), true, providers.KindRejected, providers.CodeStateConflict},
		{"AmountTooLarge", se(400, inv, "amount_too_large", "", "amount_to_capture"), true, providers.KindRejected, providers.CodeAmountTooLarge},
		{"RefundOverWhatIsLeft", se(400, inv, "", "", "amount"), true, providers.KindRejected, providers.CodeAmountTooLarge},
		{"CaptureOverWhatIsLeft", se(400, inv, "", "", "amount_to_capture"), true, providers.KindRejected, providers.CodeAmountTooLarge},
		{"UnknownParameter", se(400, inv, "parameter_unknown", "", "bogus"), true, providers.KindRejected, providers.CodeInvalidRequest},
		{"OtherRefusal", se(400, inv, "", "", "currency"), true, providers.KindRejected, providers.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := classify("op", tc.err, tc.sent)
			if got.Kind != tc.kind || got.Code != tc.code {
				t.Fatalf("classify(%v, sent %t) = %s %q, want %s %q", tc.err, tc.sent, got.Kind, got.Code, tc.kind, tc.code)
			}
			if !errors.Is(got, tc.err) && !errors.As(got, new(*stripego.Error)) {
				t.Errorf("classify(%v) does not wrap the cause", tc.err)
			}
			if got.Message == "" {
				t.Error("no message")
			}
		})
	}
}

// timeoutError is a net.Error that timed out (as http.Client's Timeout).
type timeoutError struct{}

func (timeoutError) Error() string   { return "Client.Timeout exceeded while awaiting headers" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestClassifyKeepsProviderErrors: an *providers.Error (OnReference's
// abort, a refusal before sending) passes through unchanged.
func TestClassifyKeepsProviderErrors(t *testing.T) {
	t.Parallel()
	in := &providers.Error{Kind: providers.KindRejected, Code: providers.CodeInvalidRequest, Message: "m"}
	if got := classify("op", fmt.Errorf("wrapped: %w", in), true); got != in {
		t.Fatalf("classify = %v, want %v", got, in)
	}
}

// TestErrorsCarryNoClientSecret: the PaymentIntent's client secret, which
// Stripe repeats in error answers, reaches neither the message nor the
// wrapped cause.
func TestErrorsCarryNoClientSecret(t *testing.T) {
	t.Parallel()
	const secret = "pi_1_secret_DoNotLogMe"
	raw := &stripego.Error{HTTPStatusCode: 402, Type: stripego.ErrorTypeCard, Code: "card_declined", Msg: "declined",
		PaymentIntent: &stripego.PaymentIntent{ID: "pi_1", ClientSecret: secret}}
	raw.LastResponse = &stripego.APIResponse{RawJSON: []byte(`{"client_secret":"` + secret + `"}`)}
	got := classify("op", raw, true)
	var inner *stripego.Error
	if !errors.As(got, &inner) {
		t.Fatal("the cause is not a *stripe.Error")
	}
	for _, s := range []string{got.Error(), inner.Error(), fmt.Sprintf("%+v", inner)} {
		if strings.Contains(s, secret) {
			t.Errorf("client secret leaked: %s", s)
		}
	}
	if raw.PaymentIntent.ClientSecret != secret {
		t.Error("redact changed stripe-go's error in place")
	}
}
