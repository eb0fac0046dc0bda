package providers

import (
	"errors"
	"fmt"
)

// Kind classifies a provider failure by what it means for the money.
type Kind int

const (
	// KindUnknown: the request may have been executed (a timeout after
	// sending, a 5xx, a dropped connection). The operation stays pending and
	// is settled by a Lookup or a retry with the same forwarded key, never by
	// a new operation. The zero Kind, so an unclassified error is treated as
	// the dangerous case.
	KindUnknown Kind = iota
	// KindNotExecuted: the provider did nothing (connection refused, 409
	// key in use, 429, a 5xx the provider guarantees ran nothing). Safe to
	// retry with the same key.
	KindNotExecuted
	// KindDeclined: the card was declined. Final.
	KindDeclined
	// KindRejected: the provider refused the request as invalid (unknown
	// reference, wrong state, amount too large, idempotency key reused with
	// other parameters). Final; Code says why.
	KindRejected
)

func (k Kind) String() string {
	switch k {
	case KindNotExecuted:
		return "not_executed"
	case KindDeclined:
		return "declined"
	case KindRejected:
		return "rejected"
	default:
		return "unknown"
	}
}

// Codes carried by an *Error of KindRejected or KindDeclined.
const (
	CodeNotFound              = "resource_missing"
	CodeStateConflict         = "state_conflict"
	CodeAmountTooLarge        = "amount_too_large"
	CodeHoldExpired           = "hold_expired"
	CodeIdempotencyMismatch   = "idempotency_key_mismatch"
	CodeCardDeclined          = "card_declined"
	CodeInsufficientFunds     = "insufficient_funds"
	CodeInvalidRequest        = "invalid_request"
	CodeIdempotencyKeyInUse   = "idempotency_key_in_use"
	CodeProviderUnavailable   = "provider_unavailable"
	CodeProviderTimeout       = "timeout"
	CodeProviderInternalError = "provider_error"
	// CodeAuthenticationRequired: a decline by an issuer that insists on
	// the cardholder's authentication for a payment sent without it
	// (Stripe's authentication_required).
	CodeAuthenticationRequired = "authentication_required"
	// CodeAuthenticationFailed: the cardholder failed (or refused) the
	// authentication challenge (Stripe's
	// payment_intent_authentication_failure); a decline.
	CodeAuthenticationFailed = "authentication_failed"
	// CodeNotSupported: the provider cannot do this to this object (an
	// extension of a hold it cannot extend).
	CodeNotSupported = "not_supported"
)

// Error is the one error type a Provider returns.
type Error struct {
	Kind Kind
	// Code is a stable machine string (see the Code constants); for
	// declines the provider's decline code.
	Code string
	// Message is for logs and the payment's history; it never carries
	// secrets.
	Message string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("provider %s (%s): %s", e.Kind, e.Code, e.Message)
	}
	return fmt.Sprintf("provider %s (%s)", e.Kind, e.Code)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err: the Kind of the first *Error in its chain,
// KindUnknown for anything else (an unclassified failure might have moved
// money).
func KindOf(err error) Kind {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return KindUnknown
}

// CodeOf returns the Code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
