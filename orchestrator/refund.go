package orchestrator

import (
	"context"
)

// Refund refunds part or all of what is left of a captured payment;
// refunds add up to at most the captured amount. Errors: not_found,
// payment_state_conflict, amount_exceeds_authorized (more than is left to
// refund), provider_unavailable, internal.
func (s *Service) Refund(ctx context.Context, c *Claim, in OperationInput) (Outcome, error) {
	return s.moveMoney(ctx, c, opRefund, in)
}

// refundAmount is the amount of a new refund of p for amount (0: all
// that is left), when the refunds of p that did not fail reserve
// reserved of what was captured. Refusals: payment_state_conflict
// (nothing is left), amount_exceeds_authorized (more than is left).
func refundAmount(p Payment, reserved, amount int64) (int64, error) {
	left := p.CapturedMinor - reserved
	switch {
	case left <= 0:
		return amount, Errorf(CodePaymentStateConflict, "the payment is fully refunded (or refunds in flight cover it)")
	case amount == 0:
		return left, nil
	case amount > left:
		return amount, &Error{Code: CodeAmountExceedsAuthorized, Param: "amount_minor",
			Message: "amount_minor exceeds what is left to refund"}
	}
	return amount, nil
}
