// Package providers is the seam between the orchestrator and the payment
// providers that actually move money: the Provider interface, the shared
// request and result types, the classified errors every adapter returns, and
// the derivation of the idempotency keys forwarded to a provider.
//
// Two real implementations exist: providers/stripe (stripe-go v76) and
// providers/fake (an HTTP service of our own with fault injection). Both pass
// the behaviour suite in providers/providertest.
package providers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Provider places, captures, cancels and refunds authorized holds at one
// payment provider, looks them up, and streams the provider's record of a
// day for reconciliation.
//
// Every write carries a forwarded idempotency key (see ForwardedKey): the
// same key with the same parameters returns the first result and never acts
// twice; the same key with other parameters fails with KindRejected and code
// CodeIdempotencyMismatch. Every error a call to the provider returns is an
// *Error with a Kind, so the caller knows whether the money moved.
type Provider interface {
	// Name is the provider's stable name ("fake", "stripe"), stored with
	// every payment.
	Name() string

	// CheckPaymentMethod reports whether this provider accepts a payment
	// method of pm's shape, without calling the provider: nil when it
	// does, else an error whose message is safe to show a merchant as it
	// stands ("payment_method must look like pm_card_visa"). It is not an
	// *Error: nothing was sent. A method of the right shape may still be
	// refused by the provider (an unknown one).
	CheckPaymentMethod(pm string) error

	// Authorize places a hold. When the provider assigns its reference
	// before the outcome is final (Stripe: create, then confirm), it calls
	// req.OnReference with it first, so the caller can save it and settle a
	// lost answer later with one Lookup. A declined card is an *Error of
	// KindDeclined.
	Authorize(ctx context.Context, req AuthorizeRequest) (Hold, error)

	// Capture captures AmountMinor of the hold (all of it when zero); the
	// rest of the hold is released.
	Capture(ctx context.Context, req CaptureRequest) (Hold, error)

	// Cancel voids the hold.
	Cancel(ctx context.Context, req CancelRequest) (Hold, error)

	// Refund refunds AmountMinor of a captured hold.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)

	// Lookup reads the current state of a hold by its provider reference.
	// An unknown reference is an *Error of KindRejected with CodeNotFound.
	Lookup(ctx context.Context, ref string) (Hold, error)

	// Report streams every object the provider created or changed in
	// [From, To), one row at a time, to fn. It stops at fn's first error and
	// returns it.
	Report(ctx context.Context, req ReportRequest, fn func(ReportRow) error) error
}

// HoldExtender is implemented by a provider that can move an authorized
// hold's deadline later. An extension moves no money: the hold stays what
// it was, for longer.
type HoldExtender interface {
	// ExtendHold asks for a later capture_before of the authorized hold ref
	// and returns the hold as it now is. Key is a forwarded idempotency
	// key. An error is an *Error: KindRejected with CodeNotSupported when
	// this hold cannot be extended, CodeHoldExpired when it lapsed.
	ExtendHold(ctx context.Context, req ExtendRequest) (Hold, error)
}

// ExtendRequest asks for a later deadline of a hold.
type ExtendRequest struct {
	Key string
	Ref string
	// ExtendedAuthorization says the hold was placed with
	// AuthorizeRequest.ExtendedAuthorization.
	ExtendedAuthorization bool
}

// Status is a hold's state as the provider reports it.
type Status string

// Hold states as reported by a provider.
const (
	// StatusRequiresConfirmation: created, not yet confirmed; no money is
	// held (Stripe's requires_confirmation).
	StatusRequiresConfirmation Status = "requires_confirmation"
	// StatusRequiresAction: the issuer asked for the cardholder's
	// authentication (3-D Secure); no money is held until the cardholder
	// completes the challenge at Hold.NextActionURL (Stripe's
	// requires_action with next_action.redirect_to_url).
	StatusRequiresAction    Status = "requires_action"
	StatusAuthorized        Status = "authorized"
	StatusDeclined          Status = "declined"
	StatusCaptured          Status = "captured"
	StatusCanceled          Status = "canceled"
	StatusExpired           Status = "expired"
	StatusPartiallyRefunded Status = "partially_refunded"
	StatusRefunded          Status = "refunded"
)

// AuthorizeRequest asks for a hold of AmountMinor in Currency.
type AuthorizeRequest struct {
	// Key is the forwarded idempotency key (see ForwardedKey).
	Key string
	// PaymentID is our payment id, stored in the provider's metadata so a
	// provider record can be matched back to us without its reference.
	PaymentID string
	TenantID  int64
	// AmountMinor is in the currency's minor unit.
	AmountMinor int64
	// Currency is ISO 4217 alpha-3, upper case.
	Currency string
	// PaymentMethod is a provider payment method ("pm_card_visa"), or,
	// when Card is set, the id of the vaulted method the card comes from
	// (never to be sent to the provider: it knows nothing of it).
	PaymentMethod string
	// Card, when set, is the card to charge, in the clear: the adapter
	// sends it in place of PaymentMethod (every adapter takes cards) and
	// keeps it out of every log, span and error message it writes.
	Card        *Card
	Description string
	// ExtendedAuthorization asks for the provider's longest hold where it
	// has one (Stripe: payment_method_options.card.
	// request_extended_authorization=if_available); the hold's
	// CaptureBefore says what was granted.
	ExtendedAuthorization bool
	// ReturnURL is where the provider sends the cardholder back after an
	// authentication challenge. Empty: no cardholder is there to
	// authenticate, and a payment whose issuer insists on authentication
	// is declined with CodeAuthenticationRequired.
	ReturnURL string
	// RequestThreeDS asks the provider to authenticate the cardholder even
	// where it would not on its own (Stripe: payment_method_options.card.
	// request_three_d_secure=any). Set on the one retry after an
	// authentication_required decline; only with ReturnURL.
	RequestThreeDS bool
	// OnReference, when set, is called with the provider's reference as
	// soon as the provider assigns it, before the outcome is final. An error
	// from it aborts the authorization as KindNotExecuted or KindUnknown,
	// whichever is true at that point.
	OnReference func(ctx context.Context, ref string) error
}

// CaptureRequest captures a hold.
type CaptureRequest struct {
	Key string
	Ref string
	// AmountMinor to capture; zero captures the whole hold.
	AmountMinor int64
}

// CancelRequest voids a hold.
type CancelRequest struct {
	Key string
	Ref string
}

// RefundRequest refunds part or all of a captured hold.
type RefundRequest struct {
	Key         string
	Ref         string
	AmountMinor int64
}

// Hold is a provider's view of one authorized hold and what happened to it.
type Hold struct {
	Ref       string
	PaymentID string
	Status    Status
	// AmountMinor is the authorized amount.
	AmountMinor   int64
	Currency      string
	CapturedMinor int64
	RefundedMinor int64
	// CaptureBefore is when the hold lapses unless captured.
	CaptureBefore time.Time
	// DeclineCode is set when Status is StatusDeclined
	// (CodeAuthenticationFailed when the cardholder failed the challenge).
	DeclineCode string
	// NextActionURL is set when Status is StatusRequiresAction: the page
	// of the provider where the cardholder authenticates.
	NextActionURL string
	CreatedAt     time.Time
}

// Refund is one refund of a captured hold.
type Refund struct {
	Ref         string
	HoldRef     string
	AmountMinor int64
	Currency    string
	CreatedAt   time.Time
}

// ReportRequest selects the window of a daily report.
type ReportRequest struct {
	From, To time.Time
}

// ReportRow is one object in a provider's daily record.
type ReportRow struct {
	Ref           string
	PaymentID     string
	Status        Status
	AmountMinor   int64
	CapturedMinor int64
	RefundedMinor int64
	Currency      string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// ForwardedKey derives the idempotency key sent to a provider for one client
// request: deterministic in (tenant, operation, client key), so a retry of
// the request forwards the same key, and two tenants that share a provider
// account can never collide. The result is 67 characters, well under
// Stripe's 255.
func ForwardedKey(tenantID int64, operation, clientKey string) string {
	h := sha256.New()
	h.Write([]byte(strconv.FormatInt(tenantID, 10)))
	h.Write([]byte{0})
	h.Write([]byte(operation))
	h.Write([]byte{0})
	h.Write([]byte(clientKey))
	return "po_" + hex.EncodeToString(h.Sum(nil))
}
