package fake

import (
	"math"
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
)

// Flexible holds: what a hold is granted of incremental authorization,
// multicapture and overcapture when it is authorized, the increments that
// raise it, and the parts (increments and captures) it records for the
// report. Captures themselves are in hold.go.

// flexRule is how a card's issuer treats the flexible-hold features,
// decided when the hold is created (a card's number is not kept).
type flexRule string

const (
	// flexGranted: every feature asked for is granted. Every payment
	// method and card without a row in the tables below.
	flexGranted flexRule = ""
	// flexUnavailable: the card approves but is granted none of them
	// (Stripe reports "unavailable" per card). pm_card_flexUnavailable,
	// TestCardFlexUnavailable.
	flexUnavailable flexRule = "unavailable"
	// flexIncrementDeclined: the card is granted what is asked, but its
	// issuer declines every increment with card_declined.
	// pm_card_incrementDeclined, TestCardIncrementDeclined.
	flexIncrementDeclined flexRule = "increment_declined"
)

// Card numbers of the fake's own for the flexible-hold features; like
// Stripe's, they pass the Luhn check and work with any future expiry and
// any CVC, and they approve.
const (
	// TestCardFlexUnavailable is granted none of the flexible-hold
	// features.
	TestCardFlexUnavailable = "4000009900000038"
	// TestCardIncrementDeclined is granted what is asked, and every
	// increment of its hold is declined with card_declined.
	TestCardIncrementDeclined = "4000009900000046"
)

// flexMethods and flexCards are the payment methods and card numbers
// whose issuer does not simply grant what is asked.
var (
	flexMethods = map[string]flexRule{
		"pm_card_flexUnavailable":   flexUnavailable,
		"pm_card_incrementDeclined": flexIncrementDeclined,
	}
	flexCards = map[string]flexRule{
		TestCardFlexUnavailable:   flexUnavailable,
		TestCardIncrementDeclined: flexIncrementDeclined,
	}
)

// flexAsk is what an authorization asks for (Stripe's
// payment_method_options.card.request_*=if_available), on the create or
// the confirmation; every field is part of its key's fingerprint.
type flexAsk struct {
	IncrementalAuthorization bool `json:"request_incremental_authorization,omitempty"`
	Multicapture             bool `json:"request_multicapture,omitempty"`
	Overcapture              bool `json:"request_overcapture,omitempty"`
}

// or is what a or b asks for.
func (a flexAsk) or(b flexAsk) flexAsk {
	return flexAsk{
		IncrementalAuthorization: a.IncrementalAuthorization || b.IncrementalAuthorization,
		Multicapture:             a.Multicapture || b.Multicapture,
		Overcapture:              a.Overcapture || b.Overcapture,
	}
}

// any reports whether a asks for anything.
func (a flexAsk) any() bool { return a.IncrementalAuthorization || a.Multicapture || a.Overcapture }

// grantLocked decides, when h is authorized, what it is granted of what
// it asked for, and the most an increment may raise it to (from its first
// amount). Called with s.mu held.
func (s *Server) grantLocked(h *hold) {
	if h.flexRule == flexUnavailable {
		h.granted = flexAsk{}
		return
	}
	h.granted = h.asked
	if h.granted.IncrementalAuthorization {
		h.maxAmount = plusPercent(h.amount, s.cfg.IncrementPercent)
	}
	if h.granted.Overcapture {
		h.overcapturePct = s.cfg.OvercapturePercent
	}
}

// plusPercent is amount raised by pct percent, rounded down, and at most
// math.MaxInt64. pct is at most maxFlexPercent (Config.validate).
func plusPercent(amount int64, pct int) int64 {
	f := int64(100 + pct)
	if amount > math.MaxInt64/f {
		return math.MaxInt64
	}
	return amount * f / 100
}

// flexDecided reports whether h was ever authorized, so that what it was
// granted is known: not while it awaits confirmation or its cardholder,
// nor when it was declined.
func (h *hold) flexDecided() bool {
	switch h.status {
	case providers.StatusRequiresConfirmation, providers.StatusRequiresAction, providers.StatusDeclined:
		return false
	}
	return true
}

// maxCapturable is, with overcapture, the most that may be captured of h
// in all: its current amount plus the Config.OvercapturePercent of when
// it was granted; 0 without.
func (h *hold) maxCapturable() int64 {
	if !h.granted.Overcapture {
		return 0
	}
	return plusPercent(h.amount, h.overcapturePct)
}

// capturable is the most that may be captured of h in all.
func (h *hold) capturable() int64 {
	if m := h.maxCapturable(); m > h.amount {
		return m
	}
	return h.amount
}

// settled is the status of h once nothing more can be captured of it:
// captured, or partially or wholly refunded.
func (h *hold) settled() providers.Status {
	switch {
	case h.refunded == 0:
		return providers.StatusCaptured
	case h.refunded >= h.captured:
		return providers.StatusRefunded
	}
	return providers.StatusPartiallyRefunded
}

// Availability of a flexible-hold feature on the wire, as Stripe reports
// it per card.
const (
	flexAvailable        = "available"
	flexNotAvailableWire = "unavailable"
)

// flexJSON is the wire form of what a hold was granted: shown once the
// hold was authorized, when it asked for any feature.
type flexJSON struct {
	IncrementalAuthorization string `json:"incremental_authorization"`
	Multicapture             string `json:"multicapture"`
	Overcapture              string `json:"overcapture"`
	// MaximumAmountCapturable is, with overcapture, the most that may be
	// captured in all, following the current amount.
	MaximumAmountCapturable int64 `json:"maximum_amount_capturable,omitempty"`
	// MaximumAmount is, with incremental authorization, the most the
	// hold may be raised to.
	MaximumAmount int64 `json:"maximum_amount,omitempty"`
}

// flexView is h's flexJSON, nil when it asked for nothing or was never
// authorized.
func (h *hold) flexView() *flexJSON {
	if !h.asked.any() || !h.flexDecided() {
		return nil
	}
	word := func(b bool) string {
		if b {
			return flexAvailable
		}
		return flexNotAvailableWire
	}
	f := &flexJSON{
		IncrementalAuthorization: word(h.granted.IncrementalAuthorization),
		Multicapture:             word(h.granted.Multicapture),
		Overcapture:              word(h.granted.Overcapture),
		MaximumAmountCapturable:  h.maxCapturable(),
	}
	if h.granted.IncrementalAuthorization {
		f.MaximumAmount = h.maxAmount
	}
	return f
}

// flex converts the wire form to the seam's type.
func (f *flexJSON) flex() providers.Flex {
	if f == nil {
		return providers.Flex{}
	}
	return providers.Flex{
		IncrementalAuthorization: f.IncrementalAuthorization == flexAvailable,
		Multicapture:             f.Multicapture == flexAvailable,
		Overcapture:              f.Overcapture == flexAvailable,
		MaxCapturableMinor:       f.MaximumAmountCapturable,
		MaxAmountMinor:           f.MaximumAmount,
	}
}

// Part is one increment or capture of a hold, as the report lists it:
// Kind is "increment" (AmountMinor the new total) or "capture"
// (AmountMinor the amount captured), with the idempotency key of the
// request that made it.
type Part struct {
	Kind           string    `json:"kind"`
	AmountMinor    int64     `json:"amount_minor"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// validPartKind reports whether k is a kind of Part.
func validPartKind(k string) bool { return k == providers.PartIncrement || k == providers.PartCapture }

// reportParts converts parts to the seam's type.
func reportParts(parts []Part) []providers.ReportPart {
	if parts == nil {
		return nil
	}
	out := make([]providers.ReportPart, len(parts))
	for i, p := range parts {
		out[i] = providers.ReportPart{Kind: p.Kind, AmountMinor: p.AmountMinor, IdempotencyKey: p.IdempotencyKey, CreatedAt: p.CreatedAt}
	}
	return out
}

// incrementParams is the body of POST /v1/holds/{ref}/increment.
type incrementParams struct {
	// AmountMinor is the new total of the hold, never the difference
	// (Stripe's increment_authorization amount).
	AmountMinor int64 `json:"amount_minor"`
}

func (p *incrementParams) validate() *apiError {
	if p.AmountMinor <= 0 {
		return invalid("amount_minor", "amount_minor must be a positive integer: the hold's new total")
	}
	return nil
}

func (s *Server) handleIncrement(w http.ResponseWriter, r *http.Request) {
	var p incrementParams
	ref, key := r.PathValue("ref"), r.Header.Get("Idempotency-Key")
	s.serveKeyed(w, r, OpIncrement, &p, func(now time.Time, plan faultPlan) outcome {
		return s.increment(now, ref, key, &p, plan.decline)
	})
}

// increment raises an authorized hold granted incremental authorization to
// p.AmountMinor in all, or declines (decline: a fault said so), leaving
// the hold as it was. capture_before stays: an increment does not renew
// the authorization's window. Called with s.mu held.
func (s *Server) increment(now time.Time, ref, key string, p *incrementParams, decline bool) outcome {
	h := s.holdLocked(ref)
	op := Operation{Ref: ref, AmountMinor: p.AmountMinor}
	if h == nil {
		return refused(op, notFound("hold", ref))
	}
	op.PaymentID = h.metadata[metaPaymentID]
	if h.status != providers.StatusAuthorized || h.lapsed(now) {
		return refused(op, rejected(providers.CodeStateConflict, "only an authorized hold can be incremented; this one is %s", h.view(now).Status))
	}
	if !h.granted.IncrementalAuthorization {
		return refused(op, rejected(providers.CodeNotSupported, "this hold was not granted incremental authorization"))
	}
	if p.AmountMinor <= h.amount {
		return refused(op, rejected(providers.CodeInvalidRequest, "amount_minor %d is not above the %d authorized (it is the new total, not the difference)", p.AmountMinor, h.amount))
	}
	if p.AmountMinor > h.maxAmount {
		return refused(op, rejected(providers.CodeAmountTooLarge, "amount_minor %d is more than the %d this hold may be raised to", p.AmountMinor, h.maxAmount))
	}
	if decline || h.flexRule == flexIncrementDeclined {
		v := h.view(now)
		op.Outcome = providers.CodeCardDeclined
		return outcome{err: declined(providers.CodeCardDeclined, &v), op: op}
	}
	h.amount = p.AmountMinor
	h.parts = append(h.parts, Part{Kind: providers.PartIncrement, AmountMinor: h.amount, IdempotencyKey: key, CreatedAt: now})
	h.touch(now)
	op.Outcome = OutcomeSucceeded
	return outcome{status: http.StatusOK, body: h.view(now), op: op}
}
