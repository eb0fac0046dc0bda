-- A provider report row that cannot be stored or compared (text with a NUL
-- byte or not UTF-8, a negative amount, no currency code, an impossible
-- time) is a discrepancy of its own, invalid_provider_row, instead of the
-- failure of the whole day's run.

-- +goose Up
ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_category_check
    CHECK (category IN ('missing_at_provider', 'missing_locally', 'amount_mismatch', 'currency_mismatch',
        'status_mismatch', 'duplicate_at_provider', 'stuck_pending', 'hold_expired_uncaptured', 'invalid_provider_row'));

-- +goose Down
DELETE FROM reconciliation_discrepancies WHERE category = 'invalid_provider_row';
ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_category_check
    CHECK (category IN ('missing_at_provider', 'missing_locally', 'amount_mismatch', 'currency_mismatch',
        'status_mismatch', 'duplicate_at_provider', 'stuck_pending', 'hold_expired_uncaptured'));
