package stripe

import (
	"context"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

var _ providers.MoneyReporter = (*Client)(nil)

// Operation names of the money reads, in error messages.
const (
	opBalance = "balance transactions"
	opPayouts = "payouts"
)

// windowOf is req's window as Stripe's created[gte]/created[lt] range, or
// a refusal of an empty one. Stripe's timestamps are whole seconds: [From,
// To) rounds out to the seconds it touches.
func windowOf(op string, req providers.ReportRequest) (*stripego.RangeQueryParams, error) {
	if !req.From.Before(req.To) {
		return nil, rejected(op, fmt.Sprintf("empty window [%s, %s)", req.From, req.To))
	}
	w := &stripego.RangeQueryParams{GreaterThanOrEqual: req.From.Unix(), LesserThan: req.To.Unix()}
	if req.To.Truncate(time.Second).Before(req.To) {
		w.LesserThan++
	}
	return w, nil
}

// BalanceTransactions streams the balance transactions created in [req.From,
// req.To) (GET /v1/balance_transactions, created range, source expanded,
// paginated automatically), mapped by balanceOf. They are reads only and
// move no money, so a repeated call is harmless.
//
// Stripe does not name the payout on a balance transaction; it lists a
// payout's transactions (GET /v1/balance_transactions?payout=po_…, for
// automatic payouts only). So PayoutID is filled first: the automatic
// payouts created since req.From (GET /v1/payouts, created[gte]: a
// transaction is never paid out before it exists) are listed, and for each
// the window's transactions it paid (payout and created filters together).
// The cost is one list of payouts plus one list per such payout (a page
// per 100 of the window's transactions it paid): about one request per
// day since the window for a daily payout schedule. The map of paid
// transactions to their payout holds the window's paid transactions only.
// Manual payouts cannot be listed by Stripe: their items keep PayoutID "".
//
// OperationKey is always "": Stripe keeps no request's idempotency key on
// the objects it creates. PaymentID is the charge's metadata payment_id
// (Stripe copies the PaymentIntent's metadata to its charge at
// confirmation); refunds, disputes and the rest carry "" and are matched
// by HoldRef. fn's first error is returned as is; a failed request is
// classified like any call (transactions already passed to fn stand).
func (c *Client) BalanceTransactions(ctx context.Context, req providers.ReportRequest, fn func(providers.BalanceTransaction) error) error {
	window, err := windowOf(opBalance, req)
	if err != nil {
		return err
	}
	paid, err := c.paidOut(ctx, window)
	if err != nil {
		return err
	}
	p := &stripego.BalanceTransactionListParams{CreatedRange: window}
	p.Limit = stripego.Int64(c.pageSize)
	p.AddExpand("data.source")
	cl := newCall(ctx, opBalance)
	p.Context = cl.ctx
	it := c.balance.List(p)
	for it.Next() {
		bt := balanceOf(it.BalanceTransaction())
		if bt.PayoutID == "" {
			bt.PayoutID = paid[bt.ID]
		}
		if err := fn(bt); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return cl.fail(err)
	}
	return nil
}

// PayoutItems streams the balance transactions the payout payoutID paid
// out (GET /v1/balance_transactions?payout=…, source expanded, paginated
// automatically), mapped by balanceOf with PayoutID payoutID: its own
// transaction (type payout) among them. Stripe lists these for automatic
// payouts only; a manual payout's list is refused (invalid_request) and
// comes back as that classified error. Reads only; errors as for
// BalanceTransactions.
func (c *Client) PayoutItems(ctx context.Context, payoutID string, fn func(providers.BalanceTransaction) error) error {
	if payoutID == "" {
		return rejected(opBalance, "no payout id")
	}
	p := &stripego.BalanceTransactionListParams{Payout: stripego.String(payoutID)}
	p.Limit = stripego.Int64(c.pageSize)
	p.AddExpand("data.source")
	cl := newCall(ctx, opBalance+" (payout "+payoutID+")")
	p.Context = cl.ctx
	it := c.balance.List(p)
	for it.Next() {
		bt := balanceOf(it.BalanceTransaction())
		bt.PayoutID = payoutID
		if err := fn(bt); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return cl.fail(err)
	}
	return nil
}

// paidOut maps each transaction created in window that an automatic
// payout created since the window's start paid out to that payout's id.
func (c *Client) paidOut(ctx context.Context, window *stripego.RangeQueryParams) (map[string]string, error) {
	var payouts []string
	err := c.listPayouts(ctx, &stripego.RangeQueryParams{GreaterThanOrEqual: window.GreaterThanOrEqual}, func(po *stripego.Payout) error {
		if po.Automatic {
			payouts = append(payouts, po.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	paid := map[string]string{}
	for _, id := range payouts {
		p := &stripego.BalanceTransactionListParams{CreatedRange: window, Payout: stripego.String(id)}
		p.Limit = stripego.Int64(c.pageSize)
		cl := newCall(ctx, opBalance+" (payout "+id+")")
		p.Context = cl.ctx
		it := c.balance.List(p)
		for it.Next() {
			if bt := it.BalanceTransaction(); paid[bt.ID] == "" {
				paid[bt.ID] = id
			}
		}
		if err := it.Err(); err != nil {
			return nil, cl.fail(err)
		}
	}
	return paid, nil
}

// Payouts streams the payouts created in [req.From, req.To) (GET
// /v1/payouts, created range, paginated automatically), mapped by
// payoutOf. Reads only; errors as for BalanceTransactions.
func (c *Client) Payouts(ctx context.Context, req providers.ReportRequest, fn func(providers.Payout) error) error {
	window, err := windowOf(opPayouts, req)
	if err != nil {
		return err
	}
	return c.listPayouts(ctx, window, func(po *stripego.Payout) error { return fn(payoutOf(po)) })
}

// listPayouts passes each payout created in window to fn.
func (c *Client) listPayouts(ctx context.Context, window *stripego.RangeQueryParams, fn func(*stripego.Payout) error) error {
	p := &stripego.PayoutListParams{CreatedRange: window}
	p.Limit = stripego.Int64(c.pageSize)
	cl := newCall(ctx, opPayouts)
	p.Context = cl.ctx
	it := c.payouts.List(p)
	for it.Next() {
		if err := fn(it.Payout()); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return cl.fail(err)
	}
	return nil
}

// balanceOf maps a Stripe balance transaction. Amounts keep Stripe's signs,
// which are the seam's: amount (Gross) is positive for money in and
// negative for money out, fee is positive when assessed, net = amount −
// fee. A payout's own transaction names it as PayoutID.
func balanceOf(bt *stripego.BalanceTransaction) providers.BalanceTransaction {
	out := providers.BalanceTransaction{
		ID:          bt.ID,
		Type:        balanceType(bt),
		HoldRef:     intentOf(bt),
		GrossMinor:  bt.Amount,
		FeeMinor:    bt.Fee,
		NetMinor:    bt.Net,
		Currency:    strings.ToUpper(string(bt.Currency)),
		CreatedAt:   unix(bt.Created),
		AvailableOn: unix(bt.AvailableOn),
	}
	if src := bt.Source; src != nil {
		out.Source = src.ID
		if ch := src.Charge; ch != nil {
			out.PaymentID = ch.Metadata[metaPaymentID]
		}
		if out.Type == providers.BalancePayout && src.Type == stripego.BalanceTransactionSourceTypePayout {
			out.PayoutID = src.ID
		}
	}
	return out
}

// balanceType maps a balance transaction to the seam's types by its
// reporting category, Stripe's own accounting classification:
//
//	charge                                 charge
//	refund, refund_failure (positive)      refund
//	dispute, dispute_reversal (positive)   dispute
//	payout                                 payout (the payout leaving the balance)
//	partial_capture_reversal               adjustment (the uncaptured rest of a partial
//	                                       capture released: Stripe books the charge at the
//	                                       authorized amount and this, negative, beside it)
//	payout_reversal (a failed or canceled  adjustment: the money comes back to the balance
//	  payout returning)                    and is an item of the next payout
//	fee, other_adjustment, tax, transfer,
//	  topup, charge_failure, anything else adjustment
//
// Without a category (never at API version 2023-10-16), the type decides:
// charge and payment are charge; refund, payment_refund, refund_failure and
// payment_failure_refund are refund; payout is payout; an adjustment whose
// source is a dispute is dispute; anything else is adjustment.
func balanceType(bt *stripego.BalanceTransaction) string {
	switch bt.ReportingCategory {
	case stripego.BalanceTransactionReportingCategoryCharge:
		return providers.BalanceCharge
	case stripego.BalanceTransactionReportingCategoryRefund, stripego.BalanceTransactionReportingCategoryRefundFailure:
		return providers.BalanceRefund
	case stripego.BalanceTransactionReportingCategoryDispute, stripego.BalanceTransactionReportingCategoryDisputeReversal:
		return providers.BalanceDispute
	case stripego.BalanceTransactionReportingCategoryPayout:
		return providers.BalancePayout
	case "":
	default:
		return providers.BalanceAdjustment
	}
	switch bt.Type {
	case stripego.BalanceTransactionTypeCharge, stripego.BalanceTransactionTypePayment:
		return providers.BalanceCharge
	case stripego.BalanceTransactionTypeRefund, stripego.BalanceTransactionTypePaymentRefund,
		stripego.BalanceTransactionTypeRefundFailure, stripego.BalanceTransactionTypePaymentFailureRefund:
		return providers.BalanceRefund
	case stripego.BalanceTransactionTypePayout:
		return providers.BalancePayout
	case stripego.BalanceTransactionTypeAdjustment:
		if bt.Source != nil && bt.Source.Type == stripego.BalanceTransactionSourceTypeDispute {
			return providers.BalanceDispute
		}
	}
	return providers.BalanceAdjustment
}

// payoutOf maps a Stripe payout: amount and currency, status as Stripe has
// it (pending, in_transit, paid, failed, canceled), arrival_date (a
// timestamp within the expected day) as that UTC date's midnight, and the
// statement descriptor as Reference (v76 has no trace id; "" when the
// payout has no descriptor of its own).
func payoutOf(po *stripego.Payout) providers.Payout {
	out := providers.Payout{
		ID:          po.ID,
		AmountMinor: po.Amount,
		Currency:    strings.ToUpper(string(po.Currency)),
		Status:      string(po.Status),
		Reference:   po.StatementDescriptor,
		CreatedAt:   unix(po.Created),
	}
	if po.ArrivalDate != 0 {
		out.ArrivalDate = unix(po.ArrivalDate).Truncate(24 * time.Hour)
	}
	return out
}
