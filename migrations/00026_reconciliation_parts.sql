-- Reconciliation of flexible holds, part by part (reconcile/parts.go).
--
-- A provider row keeps the hold's increments and captures as the provider
-- reports them, one by one (parts: a JSON array of {kind, amount_minor,
-- key, created_at}, key the forwarded key of the request that made it);
-- NULL when the provider reports only totals (Stripe), which are then all
-- that is compared. A part that differs from our succeeded increments and
-- captures is a discrepancy of its own category, part_mismatch.

-- +goose Up
ALTER TABLE reconciliation_provider_rows ADD COLUMN parts jsonb;

ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_category_check
    CHECK (category IN ('missing_at_provider', 'missing_locally', 'amount_mismatch', 'currency_mismatch',
        'status_mismatch', 'duplicate_at_provider', 'stuck_pending', 'hold_expired_uncaptured', 'invalid_provider_row',
        'part_mismatch'));

-- +goose Down
DELETE FROM reconciliation_discrepancies WHERE category = 'part_mismatch';
ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_category_check
    CHECK (category IN ('missing_at_provider', 'missing_locally', 'amount_mismatch', 'currency_mismatch',
        'status_mismatch', 'duplicate_at_provider', 'stuck_pending', 'hold_expired_uncaptured', 'invalid_provider_row'));

ALTER TABLE reconciliation_provider_rows DROP COLUMN parts;
