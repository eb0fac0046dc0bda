package stripe

import (
	"context"
	"fmt"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// opIncrement names an incremental authorization in error messages.
const opIncrement = "increment authorization"

var (
	_ providers.Incrementer   = (*Client)(nil)
	_ providers.FlexibleHolds = (*Client)(nil)
)

// FlexibleHolds: Stripe can be asked for all three features on any card
// PaymentIntent (request_incremental_authorization, request_multicapture,
// request_overcapture=if_available); whether one hold gets them is the
// card's network's, merchant category's and account's say, which the
// charge reports (flexOf).
func (c *Client) FlexibleHolds() providers.FlexSupport {
	return providers.FlexSupport{IncrementalAuthorization: true, Multicapture: true, Overcapture: true}
}

// flexOf is what Stripe granted a hold, as its charge reports it
// (payment_method_details.card.incremental_authorization.status,
// multicapture.status, overcapture.status: "available" is granted;
// absent, as on a hold that asked for none, is not).
// MaxCapturableMinor is overcapture.maximum_amount_capturable. Stripe
// states no limit for increments (MaxAmountMinor 0): an increment the
// issuer will not take is declined.
func flexOf(card *stripego.ChargePaymentMethodDetailsCard) providers.Flex {
	var f providers.Flex
	if ia := card.IncrementalAuthorization; ia != nil {
		f.IncrementalAuthorization = ia.Status == stripego.ChargePaymentMethodDetailsCardIncrementalAuthorizationStatusAvailable
	}
	if mc := card.Multicapture; mc != nil {
		f.Multicapture = mc.Status == stripego.ChargePaymentMethodDetailsCardMulticaptureStatusAvailable
	}
	if oc := card.Overcapture; oc != nil && oc.Status == stripego.ChargePaymentMethodDetailsCardOvercaptureStatusAvailable {
		f.Overcapture, f.MaxCapturableMinor = true, oc.MaximumAmountCapturable
	}
	return f
}

// IncrementAuthorization raises the hold req.Ref to req.AmountMinor in all
// with POST /v1/payment_intents/{id}/increment_authorization (amount is
// the new total, as the seam's). It returns the hold as Stripe now has it
// (AmountMinor the new total, capture_before as the charge now says).
//
// An issuer's refusal is Stripe's 402 card_error: KindDeclined with its
// decline code, the hold unchanged (Stripe updates neither the
// PaymentIntent nor the charge). Other refusals are KindRejected:
// not_supported (the hold was not granted incremental authorization),
// state_conflict (not requires_capture: captured, canceled; hold_expired
// when it lapsed), invalid_request (not above the current amount, or past
// Stripe's 10 attempts per PaymentIntent), resource_missing,
// idempotency_key_mismatch; see refineRefusal. Transport failures are
// classified as every call's.
//
// It cannot raise the hold twice for one request: the forwarded key makes
// Stripe replay the first answer (or refuse other parameters) to a retry,
// stripe-go never resends on its own, and an unknown outcome is returned as
// KindUnknown for the orchestrator to settle by lookup, never resent here.
func (c *Client) IncrementAuthorization(ctx context.Context, req providers.IncrementRequest) (providers.Hold, error) {
	if err := checkWrite(opIncrement, req.Key, "", req.Ref, true); err != nil {
		return providers.Hold{}, err
	}
	if req.AmountMinor <= 0 {
		return providers.Hold{}, rejected(opIncrement, fmt.Sprintf("amount %d is not positive", req.AmountMinor))
	}
	p := &stripego.PaymentIntentIncrementAuthorizationParams{Amount: stripego.Int64(req.AmountMinor)}
	p.AddExpand(expandCharge)
	p.SetIdempotencyKey(req.Key)
	cl := newCall(ctx, opIncrement)
	p.Context = cl.ctx
	pi, err := c.intents.IncrementAuthorization(req.Ref, p)
	if err != nil {
		return providers.Hold{}, c.refineRefusal(ctx, req.Ref, cl.fail(err), incrementRefusal(req))
	}
	return holdOf(pi), nil
}

// refusalCode tells, from the PaymentIntent as it is after Stripe refused
// a request, the seam's code of the refusal; "" keeps the code classify
// gave.
type refusalCode func(pi *stripego.PaymentIntent, h providers.Hold) string

// refineRefusal gives a refused capture or increment the seam's code.
// Stripe does not document the codes of these refusals (a hold without
// the feature, final_capture=false without multicapture, an amount above
// what is capturable), so the PaymentIntent is read once and tell decides
// from what it shows. Only a refusal (KindRejected, other than a missing
// PaymentIntent or a key used with other parameters) is read after: Stripe
// executed nothing, and a read moves no money. A failed read keeps perr.
func (c *Client) refineRefusal(ctx context.Context, ref string, perr *providers.Error, tell refusalCode) *providers.Error {
	if perr.Kind != providers.KindRejected {
		return perr
	}
	switch perr.Code {
	case providers.CodeNotFound, providers.CodeIdempotencyMismatch, providers.CodeHoldExpired:
		return perr
	}
	pi, lerr := c.retrieve(ctx, ref)
	if lerr != nil {
		return perr
	}
	code := tell(pi, holdOf(pi))
	if code == "" || code == perr.Code {
		return perr
	}
	refined := *perr
	refined.Code = code
	return &refined
}

// notCapturable is the code of a request refused on a hold that is no
// longer requires_capture: hold_expired when it lapsed, else
// state_conflict; "" when it still is.
func notCapturable(pi *stripego.PaymentIntent) string {
	switch {
	case pi.Status == stripego.PaymentIntentStatusRequiresCapture:
		return ""
	case lapsed(pi):
		return providers.CodeHoldExpired
	}
	return providers.CodeStateConflict
}

// incrementRefusal tells a refused increment: the hold no longer
// authorized, not granted increments, or not raised (an amount not above
// the current one is a bad request, not "too large").
func incrementRefusal(req providers.IncrementRequest) refusalCode {
	return func(pi *stripego.PaymentIntent, h providers.Hold) string {
		switch {
		case notCapturable(pi) != "":
			return notCapturable(pi)
		case !h.Flex.IncrementalAuthorization:
			return providers.CodeNotSupported
		case req.AmountMinor <= pi.Amount:
			return providers.CodeInvalidRequest
		}
		return ""
	}
}

// captureRefusal tells a refused capture: the hold no longer capturable,
// final_capture=false on a hold without multicapture, or an amount above
// what the hold can still give (overcapture not granted, or past its
// maximum_amount_capturable).
func captureRefusal(req providers.CaptureRequest) refusalCode {
	return func(pi *stripego.PaymentIntent, h providers.Hold) string {
		switch {
		case notCapturable(pi) != "":
			return notCapturable(pi)
		case req.NotFinal && !h.Flex.Multicapture:
			return providers.CodeNotSupported
		case req.AmountMinor > pi.AmountCapturable &&
			(!h.Flex.Overcapture || req.AmountMinor > h.Flex.MaxCapturableMinor-h.CapturedMinor):
			return providers.CodeAmountTooLarge
		}
		return ""
	}
}
