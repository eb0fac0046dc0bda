package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// A payment that failed over left its earlier attempts on other connectors
// (orchestrator/failover.go): on each, the connector may hold an object for
// the payment, declined or never confirmed. Reconciling that connector,
// such an object is matched to the earlier attempt, not reported as
// missing locally: it is expected, as long as it holds no money. One that
// does (authorized, captured, refunded) is a second provider object for
// one payment, duplicate_at_provider, and needs finance: failover is built
// so that it cannot happen.

// linkByAttemptSQL matches the staged rows still unmatched, by our payment
// id in the provider's metadata, to an earlier attempt of that payment on
// this connector (the payment now held by a later attempt).
const linkByAttemptSQL = `
	UPDATE reconciliation_provider_rows s SET matched_tenant_id = p.tenant_id, matched_payment_id = p.id,
		abandoned_attempt = a.attempt
	FROM payments p
	JOIN payment_attempts a ON a.tenant_id = p.tenant_id AND a.payment_id = p.id AND a.attempt < p.attempt
	WHERE s.run_id = $1 AND s.matched_payment_id IS NULL AND s.payment_id <> '' AND p.id = s.payment_id
		AND a.connector = $2`

// abandonedRowsSQL reads the staged rows matched to earlier attempts, with
// the connector holding their payment now.
const abandonedRowsSQL = `
	SELECT s.ref, s.payment_id, s.status, s.currency, s.amount_minor, s.captured_minor, s.refunded_minor,
		s.created_at, s.updated_at, s.matched_tenant_id, s.abandoned_attempt, p.provider
	FROM reconciliation_provider_rows s
	JOIN payments p ON p.tenant_id = s.matched_tenant_id AND p.id = s.matched_payment_id
	WHERE s.run_id = $1 AND s.abandoned_attempt IS NOT NULL
	ORDER BY s.seq`

// noMoney are the states of a provider object that hold no money.
var noMoney = map[providers.Status]bool{
	providers.StatusDeclined: true, providers.StatusRequiresConfirmation: true, providers.StatusRequiresAction: true,
	providers.StatusCanceled: true, providers.StatusExpired: true,
}

// judgeAbandoned judges the day's rows matched to earlier attempts: each
// counts as a provider object, matched; one that holds money is
// duplicate_at_provider.
func judgeAbandoned(ctx context.Context, tx pgx.Tx, run Run, st *stats, w *findingWriter) error {
	rows, _ := tx.Query(ctx, abandonedRowsSQL, run.ID)
	type row struct {
		rm       remote
		tenantID int64
		attempt  int16
		heldBy   string
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.rm.Ref, &x.rm.PaymentID, &x.rm.Status, &x.rm.Currency, &x.rm.Amount, &x.rm.Captured,
			&x.rm.Refunded, &x.rm.CreatedAt, &x.rm.UpdatedAt, &x.tenantID, &x.attempt, &x.heldBy)
		return x, err
	})
	if err != nil {
		return fmt.Errorf("earlier attempts: %w", err)
	}
	for _, x := range found {
		if !inWindow(x.rm.CreatedAt, st.from, st.to) && !inWindow(x.rm.UpdatedAt, st.from, st.to) {
			continue
		}
		st.providerCount++
		st.matched++
		st.add("provider", x.rm.Currency, x.rm.Amount, x.rm.Captured, x.rm.Refunded)
		if noMoney[providers.Status(x.rm.Status)] {
			continue
		}
		tenant, id, ref := x.tenantID, x.rm.PaymentID, x.rm.Ref
		f := finding{Category: DuplicateAtProvider, TenantID: &tenant, PaymentID: &id, Ref: &ref, Field: "attempt",
			Expected: "no money held", Actual: x.rm.Status, Currency: x.rm.Currency,
			Detail: map[string]any{"attempt": x.attempt, "connector": run.Provider, "held_by": x.heldBy,
				"provider_amount_minor": x.rm.Amount, "seen_at": x.rm.UpdatedAt.UTC().Format(time.RFC3339)}}
		if err := w.add(ctx, f); err != nil {
			return err
		}
	}
	return nil
}
