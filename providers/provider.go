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

// Incrementer is implemented by a provider that can raise an authorized
// hold (incremental authorization): the hold must have been granted it
// (Hold.Flex.IncrementalAuthorization).
type Incrementer interface {
	// IncrementAuthorization raises the authorized hold Ref to AmountMinor
	// in all: the new total, as Stripe's amount, never the difference. Key
	// is a forwarded idempotency key: the same key with the same amount
	// replays the first answer and never raises twice. It returns the hold
	// as it now is (AmountMinor the new total, CaptureBefore as the
	// provider now reports it). A decline is an *Error of KindDeclined and
	// leaves the hold as it was; KindRejected with CodeNotSupported when
	// the hold was not granted increments, CodeAmountTooLarge past
	// Flex.MaxAmountMinor, CodeStateConflict when it is not authorized.
	IncrementAuthorization(ctx context.Context, req IncrementRequest) (Hold, error)
}

// IncrementRequest raises a hold to AmountMinor in all.
type IncrementRequest struct {
	Key         string
	Ref         string
	AmountMinor int64
}

// FlexibleHolds is implemented by a provider whose holds can be asked for
// flexible-hold features: it says which it can ask for at all (routing
// sends a payment that asks for one only to such connectors); each hold
// says what its card was granted (Hold.Flex).
type FlexibleHolds interface {
	FlexibleHolds() FlexSupport
}

// FlexSupport is which flexible-hold features a provider can ask for.
type FlexSupport struct {
	IncrementalAuthorization, Multicapture, Overcapture bool
}

// Flex is what a provider granted one hold of the flexible-hold features
// (Stripe reports it per card: payment_method_details.card.
// incremental_authorization.status, multicapture.status,
// overcapture.status and maximum_amount_capturable).
type Flex struct {
	IncrementalAuthorization bool
	Multicapture             bool
	Overcapture              bool
	// MaxCapturableMinor is, with Overcapture, the most that may be
	// captured in all (above AmountMinor); 0 otherwise.
	MaxCapturableMinor int64
	// MaxAmountMinor is, with IncrementalAuthorization, the most the hold
	// may be raised to, when the provider states a limit; 0 when it states
	// none (the provider may still decline an increment).
	MaxAmountMinor int64
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
	// RequestIncrementalAuthorization, RequestMulticapture and
	// RequestOvercapture ask for a hold that can be raised, captured in
	// parts, or captured above its amount, where the card allows it
	// (Stripe: payment_method_options.card.request_*=if_available);
	// Hold.Flex says what was granted.
	RequestIncrementalAuthorization bool
	RequestMulticapture             bool
	RequestOvercapture              bool
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
	// AmountMinor to capture; zero captures the whole hold (what remains
	// of it). With overcapture granted it may exceed the hold, up to
	// Flex.MaxCapturableMinor in all.
	AmountMinor int64
	// NotFinal, for a hold granted multicapture, leaves the rest of the
	// hold capturable (Stripe: final_capture=false): the hold stays
	// authorized, CapturedMinor the sum so far. Otherwise a capture is the
	// last one and releases the rest.
	NotFinal bool
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
	// Flex is what the hold was granted of the flexible-hold features.
	// With multicapture, an authorized hold may already have
	// CapturedMinor > 0 (its captures so far).
	Flex      Flex
	CreatedAt time.Time
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
	// Parts are the hold's increments and captures, in order, when the
	// provider reports them one by one (nil when it reports only the
	// totals above): reconciliation compares each with ours.
	Parts []ReportPart
}

// ReportPart is one increment or capture of a hold in a provider's record.
type ReportPart struct {
	// Kind is PartIncrement or PartCapture.
	Kind string
	// AmountMinor is the new total of an increment, or the amount of a
	// capture.
	AmountMinor int64
	// IdempotencyKey is the forwarded key of the request that made it,
	// when the provider reports it ("" otherwise).
	IdempotencyKey string
	CreatedAt      time.Time
}

// The kinds of a ReportPart.
const (
	PartIncrement = "increment"
	PartCapture   = "capture"
)

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
