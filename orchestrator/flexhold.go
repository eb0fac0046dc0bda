package orchestrator

// Flexible holds. An authorization may ask for incremental authorization
// (the hold raised later: POST /v1/payments/{id}/increment), multicapture
// (captured in several parts, capture with final_capture false) and
// overcapture (captured above its amount, up to the connector's maximum).
// The connector grants each per card; the payment says what was granted
// (incremental_authorization, multicapture, overcapture: requested while
// the payment is pending, then available or unavailable; null when not
// asked), and every limit is checked under the payment's row lock before
// any provider call.
//
// Routing sends a payment that asks for a feature only to connectors
// whose adapter can ask for it (providers.FlexibleHolds), and failover
// follows the route, so it keeps the rule.
//
// An increment is a money operation like a capture: recorded pending
// under the payment's lock with its deterministic id and forwarded key,
// sent with no transaction open, settled by one statement, resolved after
// a lost answer by a lookup (the hold already at the new total settles
// it without sending anything) or a retry under the same forwarded key,
// which the provider runs once. A payment has at most one increment,
// capture or cancel pending at a time (a later one waits its turn:
// waitTurn), so each is admitted against the hold as the one before left
// it.

import (
	"context"
	"errors"
	"time"

	"github.com/payorch/payorch/providers"
)

// Grant is what a connector granted of one flexible-hold feature.
type Grant string

// Grants. A payment that did not ask for a feature has none (null).
const (
	GrantRequested   Grant = "requested" // asked; the connector has not answered yet
	GrantAvailable   Grant = "available"
	GrantUnavailable Grant = "unavailable"
)

// EventAmountIncreased is the type of the event of a hold raised
// (migration 00025's trigger).
const EventAmountIncreased = "payment.amount_increased"

// OpIncrement is the route of an increment, which scopes its idempotency
// keys and forwarded keys.
const OpIncrement = "POST /v1/payments/{id}/increment"

// flexRequested is the grant a new payment starts with for a feature:
// requested when asked, none otherwise.
func flexRequested(asked bool) *Grant {
	if !asked {
		return nil
	}
	g := GrantRequested
	return &g
}

// asked reports whether a payment asked for a feature (whatever it was
// granted).
func asked(g *Grant) bool { return g != nil }

// granted reports whether the feature was granted.
func granted(g *Grant) bool { return g != nil && *g == GrantAvailable }

// grantOf is what hold says of a feature the payment asked for (nil when
// it did not ask).
func grantOf(askedFor *Grant, available bool) *Grant {
	if askedFor == nil {
		return nil
	}
	g := GrantUnavailable
	if available {
		g = GrantAvailable
	}
	return &g
}

// grantFlex sets on p, authorized, what its hold was granted of what it
// asked for, and the limits that come with it.
func (p *Payment) grantFlex(f providers.Flex) {
	p.IncrementalAuthorization = grantOf(p.IncrementalAuthorization, f.IncrementalAuthorization)
	p.Multicapture = grantOf(p.Multicapture, f.Multicapture)
	p.Overcapture = grantOf(p.Overcapture, f.Overcapture)
	p.MaxCapturableMinor, p.MaxAmountMinor = nil, nil
	if granted(p.Overcapture) && f.MaxCapturableMinor > 0 {
		p.MaxCapturableMinor = &f.MaxCapturableMinor
	}
	if granted(p.IncrementalAuthorization) && f.MaxAmountMinor > 0 {
		p.MaxAmountMinor = &f.MaxAmountMinor
	}
}

// checkFlexSupport refuses a request that asks for a feature connector
// cannot ask for (its adapter does not implement providers.FlexibleHolds,
// or says no). Errors: validation_failed naming the request's field.
func (s *Service) checkFlexSupport(connector string, in AuthorizeInput) error {
	if !in.RequestIncrementalAuthorization && !in.RequestMulticapture && !in.RequestOvercapture {
		return nil
	}
	var sup providers.FlexSupport
	if f, ok := s.providers[connector].(providers.FlexibleHolds); ok {
		sup = f.FlexibleHolds()
	}
	switch {
	case in.RequestIncrementalAuthorization && !sup.IncrementalAuthorization:
		return ParamError("request_incremental_authorization", "connector %q cannot increment a hold", connector)
	case in.RequestMulticapture && !sup.Multicapture:
		return ParamError("request_multicapture", "connector %q cannot capture a hold in parts", connector)
	case in.RequestOvercapture && !sup.Overcapture:
		return ParamError("request_overcapture", "connector %q cannot capture above a hold", connector)
	}
	return nil
}

// Increment raises an authorized payment's hold to in.AmountMinor in all
// (the new total, as Stripe's increment_authorization takes it).
// Refused before any provider call when the hold was not granted
// increments, is not authorized (or lapsed), is already at least that
// much, or would pass the connector's stated limit. A decline leaves the
// hold as it was (payment_declined; the decline is recorded on the
// operation). Errors: not_found, not_supported, payment_state_conflict,
// validation_failed, amount_exceeds_limit, payment_declined,
// provider_unavailable, internal.
//
// in.IncreaseMinor instead raises it by that much, on the hold as it is
// when the increment's turn comes (the new total is fixed then, and kept
// with the increment): concurrent increments by amounts all apply, one
// after the other, where concurrent new totals only apply while each is
// above the one before.
func (s *Service) Increment(ctx context.Context, c *Claim, in OperationInput) (Outcome, error) {
	switch {
	case (in.AmountMinor > 0) == (in.IncreaseMinor > 0):
		return Outcome{}, ParamError("amount_minor", "give amount_minor (the hold's new total) or increase_minor (by how much), one of them")
	case in.IncreaseMinor < 0 || in.IncreaseMinor > MaxAmountMinor:
		return Outcome{}, ParamError("increase_minor", "increase_minor must be a whole number from 1 to %d", int64(MaxAmountMinor))
	}
	return s.moveMoney(ctx, c, opIncrement, in)
}

// errChanging: another increment, capture or cancel of the payment is
// pending (recordOperation). The request waits its turn (waitTurn); this
// is its answer only when the turn never comes, and not a final one: the
// key is released for a retry.
var errChanging = Errorf(CodeConflict,
	"another increment, capture or cancel of this payment is still in flight; retry with the same Idempotency-Key")

// waitTurn runs record until it is not refused with errChanging, waiting
// between tries (10 ms, doubling to 200 ms) for at most the provider
// timeout: concurrent increments and captures of one payment are applied
// one after the other, each admitted against the hold the one before
// left. A pending one that does not end in time (an unknown outcome the
// resolver settles) leaves the others errChanging.
func (s *Service) waitTurn(ctx context.Context, record func() error) error {
	deadline := time.Now().Add(s.providerTimeout)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := record()
		if !errors.Is(err, errChanging) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// admitIncrement decides whether an increment to amount (the new total)
// may start on p.
func admitIncrement(p Payment, amount int64, now time.Time) (expire bool, err error) {
	switch {
	case p.Status == StatusAuthorized && p.CaptureBefore != nil && !now.Before(*p.CaptureBefore):
		return true, Errorf(CodePaymentStateConflict, "the hold expired at %s", p.CaptureBefore.Format(time.RFC3339))
	case p.Status != StatusAuthorized:
		return false, Errorf(CodePaymentStateConflict, "cannot increment a payment that is %s", p.Status)
	case !granted(p.IncrementalAuthorization):
		return false, Errorf(CodeNotSupported, "the connector did not grant this hold incremental authorization")
	case p.CapturedMinor > 0:
		return false, Errorf(CodePaymentStateConflict, "cannot increment a hold that was partly captured")
	case amount <= p.AmountMinor:
		return false, &Error{Code: CodeValidationFailed, Param: "amount_minor",
			Message: "amount_minor is the hold's new total: it must exceed the authorized amount"}
	case amount > MaxAmountMinor || p.MaxAmountMinor != nil && amount > *p.MaxAmountMinor:
		return false, &Error{Code: CodeAmountExceedsLimit, Param: "amount_minor",
			Message: "amount_minor exceeds what the connector allows this hold to be raised to"}
	}
	return false, nil
}

// settleIncrementByLookup settles pending increment op of p by a lookup
// when the hold is already at (or above) its new total: the earlier
// execution whose answer was lost raised it, and nothing is sent again.
// done is false when the lookup failed or the hold is not raised yet;
// then the increment is sent again under its forwarded key, which the
// provider runs at most once.
func (s *Service) settleIncrementByLookup(ctx context.Context, c *Claim, p Payment, op operation) (Outcome, bool, error) {
	hold, err := s.lookupHold(ctx, p)
	if err != nil || hold.Status != providers.StatusAuthorized || hold.AmountMinor < op.AmountMinor {
		return Outcome{}, false, nil
	}
	out, err := s.settleOperation(ctx, c, p, op, opSettled{hold: hold}, nil, nil)
	return out, true, err
}

// incrementRefusal is the answer to an increment the provider refused
// with code: a decline leaves the hold as it was (payment_declined).
func incrementRefusal(code string) error {
	switch code {
	case providers.CodeNotSupported:
		return Errorf(CodeNotSupported, "the provider refused to increment this hold")
	case providers.CodeAmountTooLarge:
		return &Error{Code: CodeAmountExceedsLimit, Param: "amount_minor",
			Message: "the provider refused to raise the hold that far"}
	case providers.CodeStateConflict, providers.CodeHoldExpired:
		return Errorf(CodePaymentStateConflict, "the provider refused to increment the hold (%s)", code)
	}
	return &Error{Code: CodePaymentDeclined, Message: "the increment was declined: " + code}
}

// capturable is the most that may still be captured of p: the hold (its
// maximum, with overcapture granted) less what its parts captured.
func capturable(p Payment) int64 {
	most := p.AmountMinor
	if granted(p.Overcapture) && p.MaxCapturableMinor != nil && *p.MaxCapturableMinor > most {
		most = *p.MaxCapturableMinor
	}
	return most - p.CapturedMinor
}

// admitCapture decides the amount of a new capture of p (0: all that
// remains of the hold, not above it) and whether it is a final one.
func admitCapture(p Payment, amount int64, notFinal bool) (int64, error) {
	if notFinal && !granted(p.Multicapture) {
		return 0, &Error{Code: CodeNotSupported, Param: "final_capture",
			Message: "the connector did not grant this hold multicapture: a capture is final"}
	}
	if amount == 0 {
		if notFinal {
			return 0, ParamError("amount_minor", "a capture that is not final needs its amount_minor")
		}
		amount = max(p.AmountMinor-p.CapturedMinor, 0)
		if amount == 0 {
			return 0, &Error{Code: CodePaymentStateConflict, Param: "amount_minor",
				Message: "nothing of the authorized amount is left to capture; capture an amount (overcapture) or let the hold lapse"}
		}
	}
	if amount > capturable(p) {
		if amount > p.AmountMinor-p.CapturedMinor && !granted(p.Overcapture) {
			return 0, &Error{Code: CodeAmountExceedsAuthorized, Param: "amount_minor",
				Message: "amount_minor exceeds the authorized amount"}
		}
		return 0, &Error{Code: CodeAmountExceedsLimit, Param: "amount_minor",
			Message: "amount_minor exceeds the most the connector allows to be captured"}
	}
	return amount, nil
}
