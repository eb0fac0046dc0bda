package fake

import (
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
)

// refund is one refund of a captured hold.
type refund struct {
	ref     string
	holdRef string
	amount  int64
	created time.Time
}

// refundJSON is the wire form of a refund.
type refundJSON struct {
	Object      string    `json:"object"`
	Ref         string    `json:"ref"`
	HoldRef     string    `json:"hold_ref"`
	AmountMinor int64     `json:"amount_minor"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
}

// refund converts the wire form to the seam's type.
func (v refundJSON) refund() providers.Refund {
	return providers.Refund{
		Ref:         v.Ref,
		HoldRef:     v.HoldRef,
		AmountMinor: v.AmountMinor,
		Currency:    v.Currency,
		CreatedAt:   v.CreatedAt,
	}
}

// refundParams is the body of POST /v1/holds/{ref}/refunds.
type refundParams struct {
	AmountMinor int64 `json:"amount_minor,omitempty"`
}

func (p *refundParams) validate() *apiError {
	if p.AmountMinor < 0 {
		return invalid("amount_minor", "amount_minor must not be negative")
	}
	return nil
}

func (s *Server) handleRefund(w http.ResponseWriter, r *http.Request) {
	var p refundParams
	ref, key := r.PathValue("ref"), r.Header.Get("Idempotency-Key")
	s.serveWrite(w, r, OpRefund, &p, func(now time.Time) outcome { return s.refund(now, ref, key, &p) })
}

// refund refunds part or the rest of a captured hold, or of the captures
// so far of a hold still authorized (multicapture: it stays authorized,
// its rest capturable); refunds add up to at most the captured amount.
// Each is a refund of the balance (money.go) carrying key, its request's
// idempotency key. Called with s.mu held.
func (s *Server) refund(now time.Time, ref, key string, p *refundParams) outcome {
	h := s.holdLocked(ref)
	op := Operation{Ref: ref, AmountMinor: p.AmountMinor}
	if h == nil {
		return refused(op, notFound("hold", ref))
	}
	op.PaymentID = h.metadata[metaPaymentID]
	partly := h.status == providers.StatusAuthorized && h.captured > 0
	if h.status != providers.StatusCaptured && h.status != providers.StatusPartiallyRefunded && !partly {
		return refused(op, rejected(providers.CodeStateConflict, "only a captured hold can be refunded; this one is %s", h.view(now).Status))
	}
	left := h.captured - h.refunded
	amount := p.AmountMinor
	if amount == 0 {
		amount = left
	}
	if amount > left {
		return refused(op, rejected(providers.CodeAmountTooLarge, "amount_minor %d is more than the %d left to refund", amount, left))
	}
	h.refunded += amount
	if !partly {
		h.status = h.settled()
	}
	h.touch(now)
	rf := refund{ref: newID("fr_"), holdRef: h.ref, amount: amount, created: now}
	h.refunds = append(h.refunds, rf)
	if amount > 0 {
		s.bookLocked(now, providers.BalanceRefund, h, rf.ref, key, -amount)
	}
	op.AmountMinor, op.RefundRef, op.Outcome = amount, rf.ref, OutcomeSucceeded
	return outcome{status: http.StatusOK, op: op, body: refundJSON{
		Object: "refund", Ref: rf.ref, HoldRef: h.ref, AmountMinor: amount,
		Currency: h.currency, Status: "succeeded", CreatedAt: now,
	}}
}
