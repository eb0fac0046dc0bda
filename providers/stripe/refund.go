package stripe

import (
	"context"
	"fmt"
	"strings"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// Refund refunds req.AmountMinor (what is left when zero) of a captured
// PaymentIntent with POST /v1/refunds. Refusals are KindRejected:
// resource_missing, state_conflict (not captured, or fully refunded:
// charge_already_refunded), amount_too_large (more than is left),
// idempotency_key_mismatch.
func (c *Client) Refund(ctx context.Context, req providers.RefundRequest) (providers.Refund, error) {
	if err := checkWrite(opRefund, req.Key, "", req.Ref, true); err != nil {
		return providers.Refund{}, err
	}
	if req.AmountMinor < 0 {
		return providers.Refund{}, rejected(opRefund, fmt.Sprintf("amount %d is negative", req.AmountMinor))
	}
	p := &stripego.RefundParams{PaymentIntent: stripego.String(req.Ref)}
	if req.AmountMinor > 0 {
		p.Amount = stripego.Int64(req.AmountMinor)
	}
	p.SetIdempotencyKey(req.Key)
	cl := newCall(ctx, opRefund)
	p.Context = cl.ctx
	r, err := c.refunds.New(p)
	if err != nil {
		return providers.Refund{}, cl.fail(err)
	}
	holdRef := req.Ref
	if r.PaymentIntent != nil && r.PaymentIntent.ID != "" {
		holdRef = r.PaymentIntent.ID
	}
	return providers.Refund{
		Ref:         r.ID,
		HoldRef:     holdRef,
		AmountMinor: r.Amount,
		Currency:    strings.ToUpper(string(r.Currency)),
		CreatedAt:   unix(r.Created),
	}, nil
}
