package providers

import (
	"context"
	"time"
)

// MoneyReporter is implemented by a provider that reports the money it
// actually moved for us: its balance transactions (each charge, refund,
// dispute and adjustment with its gross, fee and net) and the payouts
// that paid the net to our bank account. Reconciliation of settlement
// (fees, payouts, the bank statement) reads them.
type MoneyReporter interface {
	// BalanceTransactions streams the balance transactions created in
	// [From, To), one at a time, to fn; it stops at fn's first error and
	// returns it.
	BalanceTransactions(ctx context.Context, req ReportRequest, fn func(BalanceTransaction) error) error
	// Payouts streams the payouts created in [From, To) to fn, likewise.
	// A payout's items are the balance transactions whose PayoutID is its
	// ID (a payout's own balance transaction, of type BalancePayout, is
	// one of them at Stripe; it is not an item).
	Payouts(ctx context.Context, req ReportRequest, fn func(Payout) error) error
	// PayoutItems streams the balance transactions the payout payoutID
	// paid out, whenever they were created, to fn, likewise: the list that
	// explains its amount. The payout's own movement (type BalancePayout)
	// may be among them; it is not an item.
	PayoutItems(ctx context.Context, payoutID string, fn func(BalanceTransaction) error) error
}

// The types of a BalanceTransaction.
const (
	BalanceCharge     = "charge"     // a capture: gross is what was captured
	BalanceRefund     = "refund"     // gross is negative
	BalanceDispute    = "dispute"    // a dispute's withdrawal (negative) or reversal
	BalanceAdjustment = "adjustment" // anything else the provider booked
	BalancePayout     = "payout"     // the payout itself leaving the balance (negative)
)

// BalanceTransaction is one movement of our balance at the provider.
// Amounts are in the currency's minor unit; Net = Gross − Fee.
type BalanceTransaction struct {
	ID string
	// Type is one of the Balance constants.
	Type string
	// Source is the provider's object the money moved for: the capture's
	// charge or hold, the refund, the dispute, the payout.
	Source string
	// HoldRef is the hold (a payment's provider_ref) the movement belongs
	// to, when it belongs to one; PaymentID is our payment id when the
	// provider knows it (its metadata).
	HoldRef   string
	PaymentID string
	// OperationKey is the forwarded idempotency key of the request that
	// made the movement (a capture's, a refund's), when the provider
	// reports it.
	OperationKey string
	GrossMinor   int64
	FeeMinor     int64
	NetMinor     int64
	Currency     string
	// PayoutID is the payout that paid it out ("" while none has).
	PayoutID    string
	CreatedAt   time.Time
	AvailableOn time.Time
}

// The statuses of a Payout (Stripe's).
const (
	PayoutPending   = "pending"
	PayoutInTransit = "in_transit"
	PayoutPaid      = "paid"
	PayoutFailed    = "failed"
	PayoutCanceled  = "canceled"
)

// Payout is one transfer of our balance to our bank account.
type Payout struct {
	ID          string
	AmountMinor int64
	Currency    string
	// Status is one of the Payout constants.
	Status string
	// ArrivalDate is the day the bank is expected to credit it (UTC
	// midnight of that date).
	ArrivalDate time.Time
	// Reference is what the bank statement shows of it (Stripe: the
	// payout's statement descriptor or trace id), for matching; "" when
	// the provider gives none.
	Reference string
	CreatedAt time.Time
}
