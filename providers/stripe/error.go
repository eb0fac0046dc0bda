package stripe

import (
	"errors"
	"fmt"
	"net/http"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// classify turns a stripe-go failure into the seam's *providers.Error,
// once, here. sent reports whether a connection to Stripe was obtained for
// the request.
//
// Answers of Stripe (*stripe.Error):
//
//	402, or type card_error                 KindDeclined, decline_code (generic_decline → card_declined) or code
//	400 type idempotency_error              KindRejected idempotency_key_mismatch (see below)
//	409 idempotency_key_in_use              KindNotExecuted idempotency_key_in_use
//	409 other, 429 (rate limit, lock_timeout) KindNotExecuted provider_unavailable
//	401, 403 (key revoked, not permitted)   KindNotExecuted provider_unavailable
//	5xx, or type api_error                  KindUnknown provider_error
//	other 4xx invalid_request_error         KindRejected, code by rejectCode
//
// Failures without an answer are classified by providers.TransportError:
// nothing sent (no connection obtained) is KindNotExecuted
// (provider_unavailable, or timeout); anything after sending (timeout,
// reset, an answer that does not parse) is KindUnknown (timeout or
// provider_error), a refused connection after a connection was obtained
// too (transportError).
//
// Stripe's idempotency_error means the key was first used with other
// parameters: Stripe refused this request without executing it and the
// first request's outcome stands. It is final for this key (every retry
// gets the same 400), so it is KindRejected with CodeIdempotencyMismatch as
// the seam says, not an unknown outcome a resolver would retry forever.
func classify(op string, err error, sent bool) *providers.Error {
	var pe *providers.Error
	if errors.As(err, &pe) {
		return pe
	}
	var se *stripego.Error
	if errors.As(err, &se) {
		return apiError(op, se)
	}
	return transportError(op, err, sent)
}

// apiError classifies an answer of Stripe.
func apiError(op string, se *stripego.Error) *providers.Error {
	status := se.HTTPStatusCode
	kind, code := providers.KindUnknown, providers.CodeProviderInternalError
	switch {
	case status >= 500 || se.Type == stripego.ErrorTypeAPI:
		// Stripe may have executed it; the retry with the key replays.
	case status == http.StatusPaymentRequired || se.Type == stripego.ErrorTypeCard:
		kind, code = providers.KindDeclined, declineCode(se)
	case se.Type == stripego.ErrorTypeIdempotency:
		kind, code = providers.KindRejected, providers.CodeIdempotencyMismatch
	case status == http.StatusConflict && se.Code == stripego.ErrorCodeIdempotencyKeyInUse:
		kind, code = providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse
	case status == http.StatusConflict, status == http.StatusTooManyRequests,
		status == http.StatusUnauthorized, status == http.StatusForbidden:
		kind, code = providers.KindNotExecuted, providers.CodeProviderUnavailable
	case status >= 400:
		kind, code = providers.KindRejected, rejectCode(se)
	}
	msg := fmt.Sprintf("stripe %s: HTTP %d %s", op, status, se.Type)
	if se.Code != "" {
		msg += "/" + string(se.Code)
	}
	if se.DeclineCode != "" {
		msg += "/" + string(se.DeclineCode)
	}
	if se.Msg != "" {
		msg += ": " + se.Msg
	}
	if se.RequestID != "" {
		msg += " (request " + se.RequestID + ")"
	}
	return &providers.Error{Kind: kind, Code: code, Message: msg, Err: redact(se)}
}

// declineCode is the code a decline is stored with: the issuer's decline
// code when it says more than "generic_decline", else Stripe's error code;
// a failed authentication challenge (Stripe's
// payment_intent_authentication_failure, the last_payment_error of a
// PaymentIntent back in requires_payment_method) is authentication_failed.
// An issuer's authentication_required passes as it is, the seam's
// CodeAuthenticationRequired.
func declineCode(se *stripego.Error) string {
	switch {
	case se == nil:
		return providers.CodeCardDeclined
	case se.Code == stripego.ErrorCodePaymentIntentAuthenticationFailure:
		return providers.CodeAuthenticationFailed
	case se.DeclineCode != "" && se.DeclineCode != stripego.DeclineCodeGenericDecline:
		return string(se.DeclineCode)
	case se.Code != "":
		return string(se.Code)
	default:
		return providers.CodeCardDeclined
	}
}

// rejectCode maps the code of a refused request to the seam's codes:
//
//	resource_missing (or a 404)                           resource_missing
//	payment_intent_unexpected_state on a lapsed hold      hold_expired
//	charge_expired_for_capture, capture_charge_authorization_expired  hold_expired
//	payment_intent_unexpected_state, intent_invalid_state,
//	charge_already_captured, charge_already_refunded,
//	charge_not_refundable, charge_disputed, refund_disputed_payment   state_conflict
//	amount_too_large, or no code with param amount / amount_to_capture  amount_too_large
//	anything else                                         invalid_request
//
// Stripe answers a refund over what is left on the charge with param
// "amount" and no code; amounts are checked positive before sending, so a
// codeless refusal of the amount can only be "too large".
func rejectCode(se *stripego.Error) string {
	switch se.Code {
	case stripego.ErrorCodeResourceMissing:
		return providers.CodeNotFound
	case stripego.ErrorCodeChargeExpiredForCapture, stripego.ErrorCodeCaptureChargeAuthorizationExpired:
		return providers.CodeHoldExpired
	case stripego.ErrorCodePaymentIntentUnexpectedState, stripego.ErrorCodeIntentInvalidState,
		stripego.ErrorCodeChargeAlreadyCaptured, stripego.ErrorCodeChargeAlreadyRefunded,
		stripego.ErrorCodeChargeNotRefundable, stripego.ErrorCodeChargeDisputed, stripego.ErrorCodeRefundDisputedPayment:
		if lapsed(se.PaymentIntent) {
			return providers.CodeHoldExpired
		}
		return providers.CodeStateConflict
	case stripego.ErrorCodeAmountTooLarge:
		return providers.CodeAmountTooLarge
	case "":
		if se.Param == "amount" || se.Param == "amount_to_capture" {
			return providers.CodeAmountTooLarge
		}
		if se.HTTPStatusCode == http.StatusNotFound {
			return providers.CodeNotFound
		}
	}
	return providers.CodeInvalidRequest
}

// lapsed reports whether pi is a hold Stripe canceled itself because it
// was not captured in time.
func lapsed(pi *stripego.PaymentIntent) bool {
	return pi != nil && pi.Status == stripego.PaymentIntentStatusCanceled &&
		pi.CancellationReason == stripego.PaymentIntentCancellationReasonAutomatic
}

// redact copies se without what must not reach logs or history: the
// PaymentIntent's client secret, and the raw answer (which repeats it).
func redact(se *stripego.Error) *stripego.Error {
	c := *se
	c.APIResource = stripego.APIResource{}
	c.Err = nil
	if c.PaymentIntent != nil {
		pi := *c.PaymentIntent
		pi.ClientSecret = ""
		pi.APIResource = stripego.APIResource{}
		c.PaymentIntent = &pi
	}
	if c.SetupIntent != nil {
		si := *c.SetupIntent
		si.ClientSecret = ""
		si.APIResource = stripego.APIResource{}
		c.SetupIntent = &si
	}
	return &c
}

// transportError classifies a failure without an answer of Stripe as
// providers.TransportError does. A refused connection after a connection
// was obtained is KindUnknown there, and here too: Go's transport resends a
// request that carries an Idempotency-Key on a new connection when the
// first one died, and the first copy may have reached Stripe. Failover to
// another connector trusts KindNotExecuted, so it is given only when
// certain.
func transportError(op string, err error, sent bool) *providers.Error {
	return providers.TransportError("stripe", op, err, sent)
}
