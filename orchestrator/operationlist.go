package orchestrator

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// PaymentOperation is one money movement of a payment: a capture (a part
// of a multicapture hold or the final one), an increment, a cancel or a
// refund, as GET /v1/payments/{id}/operations lists it.
type PaymentOperation struct {
	Operation
	// FinalCapture says of a capture whether it ended the hold (the rest
	// released) or was a part that left the rest capturable
	// (final_capture false); nil for the other kinds.
	FinalCapture *bool `json:"final_capture"`
	// AmountBeforeMinor is, for an increment that succeeded, the hold's
	// amount just before it, read from the payment's outbox events; nil
	// for the other operations, and when those events are past their
	// retention. Not in the API: what a GET answers does not depend on
	// the outbox's retention.
	AmountBeforeMinor *int64 `json:"-"`
}

// PaymentOperations returns a payment's operations, oldest first.
// Errors: not_found (also for a payment outside sc).
func (s *Service) PaymentOperations(ctx context.Context, sc Scope, id string) ([]PaymentOperation, error) {
	p, err := s.GetPayment(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	const q = `
		SELECT tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
			provider_ref, failure_code, created_at, updated_at, final
		FROM payment_operations
		WHERE tenant_id = @tenant_id AND payment_id = @payment_id
		ORDER BY created_at, id`
	rows, _ := s.pool.Query(ctx, q, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID})
	stored, err := pgx.CollectRows(rows, pgx.RowToStructByName[operation])
	if err != nil {
		return nil, internalf("read operations of %s: %w", id, err)
	}
	ops := make([]PaymentOperation, len(stored))
	increments := 0
	for i, op := range stored {
		ops[i].Operation = op.object(p.Currency)
		if op.Kind == opCapture {
			final := op.Final
			ops[i].FinalCapture = &final
		}
		if op.Kind == opIncrement && op.Status == "succeeded" {
			increments++
		}
	}
	if increments == 0 {
		return ops, nil
	}
	before, err := s.amountsBeforeIncreases(ctx, p)
	if err != nil {
		return nil, err
	}
	// Only a succeeded increment raises a payment's amount, and each
	// writes one payment.amount_increased: the k-th last increment is the
	// k-th last raise. (From the end: retention drops the oldest events
	// first.) One increment runs at a time, so creation order is the
	// order they settled in.
	for i := len(ops) - 1; i >= 0 && len(before) > 0; i-- {
		if ops[i].Object == string(opIncrement) && ops[i].Status == "succeeded" {
			ops[i].AmountBeforeMinor = before[len(before)-1]
			before = before[:len(before)-1]
		}
	}
	return ops, nil
}

// amountsBeforeIncreases returns, for each payment.amount_increased event
// of p in order, p's amount before it (the amount of the payment event
// before; nil when that one is gone). The operations' and disputes'
// events have amounts of their own and are left out. The bound on the id keeps the search to the
// partitions from p's creation on, a day wider for clocks that disagree
// (as payments_outbox does).
func (s *Service) amountsBeforeIncreases(ctx context.Context, p Payment) ([]*int64, error) {
	const q = `
		SELECT before FROM (
			SELECT type, sequence, lag((object->>'amount_minor')::bigint) OVER (ORDER BY sequence) AS before
			FROM events
			WHERE tenant_id = @tenant_id AND payment_id = @payment_id
				AND id >= event_id_floor(@created_at::timestamptz - interval '1 day')
				AND object->>'object' = 'payment'
		) e
		WHERE type = @type
		ORDER BY sequence`
	rows, _ := s.pool.Query(ctx, q, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "created_at": p.CreatedAt,
		"type": EventAmountIncreased})
	before, err := pgx.CollectRows(rows, pgx.RowTo[*int64])
	if err != nil {
		return nil, internalf("read the amounts of %s: %w", p.ID, err)
	}
	return before, nil
}
