package stripe

import (
	"context"
	"maps"
	"slices"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// Balance transaction types and reporting categories Report follows back to
// a PaymentIntent. v76 has no constant for partial_capture_reversal: it is
// the release of a partial capture's uncaptured rest, which Stripe books as
// a refund of the charge but which is no refund to the customer.
const (
	categoryPartialCaptureReversal = "partial_capture_reversal"
	eventIntentCanceled            = "payment_intent.canceled"
)

// Report streams to fn one row per PaymentIntent that Stripe created or
// changed in [req.From, req.To), each in its state now:
//
//  1. PaymentIntents created in the window (GET /v1/payment_intents): holds,
//     declines and cancels never show in the balance;
//  2. PaymentIntents behind the window's balance transactions (GET
//     /v1/balance_transactions, source expanded): captures (charge, and the
//     partial_capture_reversal of a partial capture's released rest) and
//     refunds of holds created earlier; fee and payout transactions name no
//     PaymentIntent and are skipped (fees are not part of a ReportRow);
//  3. PaymentIntents canceled in the window (GET /v1/events,
//     payment_intent.canceled: cancels and lapsed holds of earlier days;
//     Stripe keeps events 30 days).
//
// A PaymentIntent is listed once; those found by 2 and 3 are retrieved one
// by one. Lists are paginated automatically. Rows carry amounts in minor
// units (AmountMinor = amount, CapturedMinor = amount_received,
// RefundedMinor = customer refunds, see refundedOf), the upper-case
// currency, payment_id from the metadata, and as UpdatedAt the latest of
// creation, cancellation, the charge and the window's transactions and
// events. Report returns fn's first error as is; a failed request is
// classified like any call (rows already passed to fn stand).
func (c *Client) Report(ctx context.Context, req providers.ReportRequest, fn func(providers.ReportRow) error) error {
	window, err := windowOf(opReport, req)
	if err != nil {
		return err
	}
	r := &reporter{c: c, ctx: ctx, fn: fn, seen: map[string]bool{}}
	if err := r.intents(window); err != nil {
		return err
	}
	later := map[string]int64{} // PaymentIntents of earlier days, by last touch
	if err := r.balance(window, later); err != nil {
		return err
	}
	if err := r.canceled(window, later); err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(later)) {
		if err := r.retrieve(id, later[id]); err != nil {
			return err
		}
	}
	return nil
}

// reporter is one Report run.
type reporter struct {
	c    *Client
	ctx  context.Context
	fn   func(providers.ReportRow) error
	seen map[string]bool
}

// emit passes pi's row to fn unless it was passed already.
func (r *reporter) emit(pi *stripego.PaymentIntent, touched int64) error {
	if r.seen[pi.ID] {
		return nil
	}
	r.seen[pi.ID] = true
	return r.fn(rowOf(pi, touched))
}

// intents lists the PaymentIntents created in the window.
func (r *reporter) intents(window *stripego.RangeQueryParams) error {
	p := &stripego.PaymentIntentListParams{CreatedRange: window}
	p.Limit = stripego.Int64(r.c.pageSize)
	p.AddExpand("data." + expandCharge)
	cl := newCall(r.ctx, opReport+" (payment intents)")
	p.Context = cl.ctx
	it := r.c.intents.List(p)
	for it.Next() {
		if err := r.emit(it.PaymentIntent(), 0); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return cl.fail(err)
	}
	return nil
}

// balance notes the PaymentIntents behind the window's balance
// transactions that were not listed yet.
func (r *reporter) balance(window *stripego.RangeQueryParams, later map[string]int64) error {
	p := &stripego.BalanceTransactionListParams{CreatedRange: window}
	p.Limit = stripego.Int64(r.c.pageSize)
	p.AddExpand("data.source")
	cl := newCall(r.ctx, opReport+" (balance transactions)")
	p.Context = cl.ctx
	it := r.c.balance.List(p)
	for it.Next() {
		bt := it.BalanceTransaction()
		if id := intentOf(bt); id != "" && !r.seen[id] {
			later[id] = max(later[id], bt.Created)
		}
	}
	if err := it.Err(); err != nil {
		return cl.fail(err)
	}
	return nil
}

// intentOf is the PaymentIntent a balance transaction moved money for, or
// "": a charge (a capture; its full authorized amount), a refund (a
// customer refund, or with reporting category partial_capture_reversal
// the release of a partial capture's uncaptured rest), or anything else
// naming a charge (disputes, failed refunds).
func intentOf(bt *stripego.BalanceTransaction) string {
	src := bt.Source
	if src == nil {
		return ""
	}
	switch {
	case src.Charge != nil:
		return idOf(src.Charge.PaymentIntent)
	case src.Refund != nil:
		if id := idOf(src.Refund.PaymentIntent); id != "" {
			return id
		}
		if ch := src.Refund.Charge; ch != nil {
			return idOf(ch.PaymentIntent)
		}
	case src.Dispute != nil:
		if id := idOf(src.Dispute.PaymentIntent); id != "" {
			return id
		}
		if ch := src.Dispute.Charge; ch != nil {
			return idOf(ch.PaymentIntent)
		}
	}
	return ""
}

func idOf(pi *stripego.PaymentIntent) string {
	if pi == nil {
		return ""
	}
	return pi.ID
}

// canceled notes the PaymentIntents canceled in the window that were not
// listed yet.
func (r *reporter) canceled(window *stripego.RangeQueryParams, later map[string]int64) error {
	p := &stripego.EventListParams{CreatedRange: window, Type: stripego.String(eventIntentCanceled)}
	p.Limit = stripego.Int64(r.c.pageSize)
	cl := newCall(r.ctx, opReport+" (events)")
	p.Context = cl.ctx
	it := r.c.events.List(p)
	for it.Next() {
		ev := it.Event()
		if ev.GetObjectValue("object") != "payment_intent" {
			continue
		}
		if id := ev.GetObjectValue("id"); id != "" && !r.seen[id] {
			later[id] = max(later[id], ev.Created)
		}
	}
	if err := it.Err(); err != nil {
		return cl.fail(err)
	}
	return nil
}

// retrieve passes the row of PaymentIntent id, read now.
func (r *reporter) retrieve(id string, touched int64) error {
	p := &stripego.PaymentIntentParams{}
	p.AddExpand(expandCharge)
	cl := newCall(r.ctx, opReport+" (payment intent)")
	p.Context = cl.ctx
	pi, err := r.c.intents.Get(id, p)
	if err != nil {
		return cl.fail(err)
	}
	return r.emit(pi, touched)
}

// rowOf is pi's report row; touched is the latest time (Unix seconds) the
// window's records name it, 0 if none.
func rowOf(pi *stripego.PaymentIntent, touched int64) providers.ReportRow {
	h := holdOf(pi)
	updated := max(pi.Created, pi.CanceledAt, touched)
	if ch := pi.LatestCharge; ch != nil {
		updated = max(updated, ch.Created)
	}
	return providers.ReportRow{
		Ref:           h.Ref,
		PaymentID:     h.PaymentID,
		Status:        h.Status,
		AmountMinor:   h.AmountMinor,
		CapturedMinor: h.CapturedMinor,
		RefundedMinor: h.RefundedMinor,
		Currency:      h.Currency,
		CreatedAt:     h.CreatedAt,
		UpdatedAt:     unix(updated),
	}
}
