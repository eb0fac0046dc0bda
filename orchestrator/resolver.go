package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// ResolveStats counts one resolver pass.
type ResolveStats struct {
	Examined int `json:"examined"`
	Settled  int `json:"settled"`
	Pending  int `json:"still_pending"`
	Errors   int `json:"errors"`
}

// ResolvePending settles pending payments and operations untouched for at
// least olderThan, up to limit of each: a payment whose provider reference
// is known is settled by one lookup; one without is retried with its
// forwarded key (the provider replays the first attempt if it ran). Nothing
// is ever failed for want of an answer: what cannot be settled stays
// pending, backs off, and is counted. Safe to run on several instances at
// once (items are picked with SKIP LOCKED and stamped with their next
// attempt time).
func (s *Service) ResolvePending(ctx context.Context, olderThan time.Duration, limit int) (ResolveStats, error) {
	var st ResolveStats
	payments, err := s.pickPendingPayments(ctx, olderThan, limit)
	if err != nil {
		return st, err
	}
	for _, p := range payments {
		st.Examined++
		out, err := s.resolvePayment(ctx, nil, p, false)
		switch {
		case err != nil && ErrorCode(err) == CodeInternal:
			st.Errors++
			s.logger.ErrorContext(ctx, "resolver: payment", "payment_id", p.ID, "error", err)
		case out.Payment.Status == StatusPending || ErrorCode(err) == CodeProviderUnavailable:
			st.Pending++
		default:
			st.Settled++
		}
	}
	ops, err := s.pickPendingOperations(ctx, olderThan, limit)
	if err != nil {
		return st, err
	}
	for _, op := range ops {
		st.Examined++
		out, err := s.resolveOperation(ctx, op)
		switch {
		case err != nil && ErrorCode(err) == CodeInternal:
			st.Errors++
			s.logger.ErrorContext(ctx, "resolver: operation", "operation_id", op.ID, "error", err)
		case out.Pending || ErrorCode(err) == CodeProviderUnavailable:
			st.Pending++
		default:
			st.Settled++
		}
	}
	return st, nil
}

// pickPendingPaymentsSQL takes up to @limit pending payments untouched
// since @older_than and due for an attempt, and stamps their next
// attempt, in one statement: rows another instance holds are skipped, and
// a picked row is not picked again before its backoff, 30 s doubling with
// each attempt up to an hour.
const pickPendingPaymentsSQL = `
	UPDATE payments t SET resolve_attempts = t.resolve_attempts + 1,
		next_resolve_at = @now::timestamptz + make_interval(secs => least(3600, 30 * power(2, least(resolve_attempts, 12))))
	FROM (
		SELECT tenant_id AS picked_tenant, id AS picked_id FROM payments
		WHERE status = 'pending' AND updated_at <= @older_than AND (next_resolve_at IS NULL OR next_resolve_at <= @now)
		ORDER BY next_resolve_at NULLS FIRST, updated_at
		LIMIT @limit
		FOR UPDATE SKIP LOCKED
	) picked
	WHERE t.tenant_id = picked.picked_tenant AND t.id = picked.picked_id
	RETURNING ` + paymentColumns

// pickPendingOperationsSQL is pickPendingPaymentsSQL for captures,
// cancels and refunds.
const pickPendingOperationsSQL = `
	UPDATE payment_operations t SET resolve_attempts = t.resolve_attempts + 1,
		next_resolve_at = @now::timestamptz + make_interval(secs => least(3600, 30 * power(2, least(resolve_attempts, 12))))
	FROM (
		SELECT tenant_id AS picked_tenant, id AS picked_id FROM payment_operations
		WHERE status = 'pending' AND updated_at <= @older_than AND (next_resolve_at IS NULL OR next_resolve_at <= @now)
		ORDER BY next_resolve_at NULLS FIRST, updated_at
		LIMIT @limit
		FOR UPDATE SKIP LOCKED
	) picked
	WHERE t.tenant_id = picked.picked_tenant AND t.id = picked.picked_id
	RETURNING tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
		provider_ref, failure_code, created_at, updated_at, final`

func (s *Service) pickPendingPayments(ctx context.Context, olderThan time.Duration, limit int) ([]Payment, error) {
	return pickPending(ctx, s, "payments", pickPendingPaymentsSQL, scanPayment, olderThan, limit)
}

func (s *Service) pickPendingOperations(ctx context.Context, olderThan time.Duration, limit int) ([]operation, error) {
	return pickPending(ctx, s, "payment_operations", pickPendingOperationsSQL, pgx.RowToStructByName[operation], olderThan, limit)
}

// pickPending runs a pickPending…SQL statement on table and reads the
// rows it picked.
func pickPending[T any](ctx context.Context, s *Service, table, sql string, scan pgx.RowToFunc[T], olderThan time.Duration, limit int) ([]T, error) {
	now := s.now()
	rows, _ := s.pool.Query(ctx, sql, NamedArgs{"older_than": now.Add(-olderThan), "now": now, "limit": limit})
	items, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, internalf("pick pending %s: %w", table, err)
	}
	return items, nil
}

// resolvePayment settles one pending payment: by lookup when its reference
// is known, else by retrying the authorization with its forwarded key. c is
// the claim of the request resuming it (nil: none is kept). byRequest is
// false for the resolver, which never fails over (authorizeAtProvider).
func (s *Service) resolvePayment(ctx context.Context, c *Claim, p Payment, byRequest bool) (Outcome, error) {
	ctx = WithLogAttrs(ctx, slog.String("payment_id", p.ID), slog.Int64("tenant_id", p.TenantID))
	prov := s.providers[p.Provider]
	if prov == nil {
		return Outcome{}, internalf("payment %s names unconfigured provider %q", p.ID, p.Provider)
	}
	fwd := attemptKey(p)
	if p.ProviderRef == nil {
		return s.authorizeAtProvider(ctx, c, p, false, byRequest, nil)
	}
	var hold providers.Hold
	err := s.callProvider(ctx, p, "lookup", fwd, func(ctx context.Context) error {
		var err error
		hold, err = prov.Lookup(ctx, *p.ProviderRef)
		return err
	})
	if err != nil {
		if providers.KindOf(err) == providers.KindRejected && providers.CodeOf(err) == providers.CodeNotFound {
			// The provider never finished creating it: the retry with the
			// same key creates it (once) or replays what it did.
			return s.authorizeAtProvider(ctx, c, p, false, byRequest, nil)
		}
		return Outcome{Payment: p, Pending: true}, nil
	}
	switch hold.Status {
	case providers.StatusAuthorized, providers.StatusDeclined, providers.StatusRequiresAction:
		// A challenge the lost answer issued is the request's answer too.
		// The lost call may have carried the CVC: erase it (cvcSent).
		return s.settleAuthorize(ctx, c, p, hold, nil, nil, true)
	case providers.StatusCaptured, providers.StatusCanceled, providers.StatusExpired,
		providers.StatusPartiallyRefunded, providers.StatusRefunded:
		// The hold went on without us: settle the authorization first;
		// reconciliation flags the rest as status_mismatch.
		hold.Status = providers.StatusAuthorized
		return s.settleAuthorize(ctx, c, p, hold, nil, nil, true)
	}
	// Not final at the provider yet (e.g. created, not confirmed): retry
	// the authorization with the same key.
	return s.authorizeAtProvider(ctx, c, p, false, byRequest, nil)
}

// resolveOperation retries a pending capture, cancel or refund with its
// forwarded key; the provider replays it if it already ran.
func (s *Service) resolveOperation(ctx context.Context, op operation) (Outcome, error) {
	ctx = WithLogAttrs(ctx, slog.String("payment_id", op.PaymentID), slog.Int64("tenant_id", op.TenantID))
	p, err := s.readPayment(ctx, op.TenantID, op.PaymentID)
	if err != nil {
		return Outcome{}, internalf("resolve operation %s: %w", op.ID, err)
	}
	if op.Kind == opIncrement {
		if out, done, err := s.settleIncrementByLookup(ctx, nil, p, op); done {
			return out, err
		}
	}
	return s.operationAtProvider(ctx, nil, p, op)
}

// PendingStats describes what is still pending, for metrics and alerts:
// payments and operations awaiting a provider's answer, and webhook
// deliveries awaiting their endpoint (an enabled one: a disabled
// endpoint's deliveries wait for it to be enabled again).
type PendingStats struct {
	Payments          int
	Operations        int
	OldestAge         time.Duration
	Deliveries        int
	OldestDeliveryAge time.Duration
}

// Pending counts pending payments, operations and webhook deliveries, and
// the age of the oldest.
func (s *Service) Pending(ctx context.Context) (PendingStats, error) {
	var st PendingStats
	var oldest, oldestDelivery *time.Time
	err := s.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM payments WHERE status = 'pending'),
		       (SELECT count(*) FROM payment_operations WHERE status = 'pending'),
		       least((SELECT min(created_at) FROM payments WHERE status = 'pending'),
		             (SELECT min(created_at) FROM payment_operations WHERE status = 'pending')),
		       d.n, d.oldest
		FROM (SELECT count(*) AS n, min(d.created_at) AS oldest
		      FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
		      WHERE d.status = 'pending' AND w.enabled AND w.deleted_at IS NULL) d`).
		Scan(&st.Payments, &st.Operations, &oldest, &st.Deliveries, &oldestDelivery)
	if err != nil {
		return st, internalf("pending stats: %w", err)
	}
	if oldest != nil {
		st.OldestAge = s.now().Sub(*oldest)
	}
	if oldestDelivery != nil {
		st.OldestDeliveryAge = s.now().Sub(*oldestDelivery)
	}
	return st, nil
}
