-- Settlement reconciliation (reconcile/settle.go): the money the provider
-- moved for us, held against the fee schedule and its payouts.
--
-- A run stages the provider's balance transactions and payouts it needs
-- in reconciliation_money_rows (unlogged, like reconciliation_provider_rows:
-- it lives only while the run works, and is cleared when the run finishes
-- or is found abandoned), one row per object, tagged by the stream it came
-- in: 'day' (the balance transactions created in the business day),
-- 'payout' (the payouts created in it) and 'item' (each one's items, with
-- payout_id the payout listed), 'late' (the balance transactions of the day
-- whose payouts are due by now, and the payouts created since). operation_key
-- is the forwarded key of the request that made a movement, when the
-- provider reports it (the fake does, Stripe does not). A payout's
-- amount is its gross_minor (and net_minor). Each row with a hold is linked
-- to our payment by it (matched_tenant_id, matched_payment_id).
--
-- The run's settlement summary is stored with it (settlement: per
-- currency, the day's charges, fees, refunds, disputes, adjustments, net
-- and what was paid out; NULL when the provider reports no money), and four
-- categories of discrepancy join the others: fee_mismatch,
-- payout_unexplained, payout_item_unknown, not_paid_out.
--
-- payment_operations_capture_created_idx finds a day's succeeded captures
-- (not_paid_out) without reading the operations of every day.

-- +goose Up
CREATE UNLOGGED TABLE reconciliation_money_rows (
    run_id             bigint      NOT NULL,
    seq                bigint      NOT NULL,
    stream             text        NOT NULL,
    object             text        NOT NULL,
    id                 text        NOT NULL,
    type               text        NOT NULL DEFAULT '',
    hold_ref           text        NOT NULL DEFAULT '',
    operation_key      text        NOT NULL DEFAULT '',
    gross_minor        bigint      NOT NULL,
    fee_minor          bigint      NOT NULL DEFAULT 0,
    net_minor          bigint      NOT NULL,
    currency           text        NOT NULL,
    payout_id          text        NOT NULL DEFAULT '',
    status             text        NOT NULL DEFAULT '',
    arrival_date       timestamptz,
    created_at         timestamptz NOT NULL,
    matched_tenant_id  bigint,
    matched_payment_id text,
    CONSTRAINT reconciliation_money_rows_pkey PRIMARY KEY (run_id, seq),
    CONSTRAINT reconciliation_money_rows_stream_check CHECK (stream IN ('day', 'payout', 'item', 'late')),
    CONSTRAINT reconciliation_money_rows_object_check CHECK (object IN ('balance_transaction', 'payout'))
);

ALTER TABLE reconciliation_runs ADD COLUMN settlement jsonb;

CREATE INDEX payment_operations_capture_created_idx ON payment_operations (created_at)
    WHERE kind = 'capture' AND status = 'succeeded';

ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_category_check
    CHECK (category IN ('missing_at_provider', 'missing_locally', 'amount_mismatch', 'currency_mismatch',
        'status_mismatch', 'duplicate_at_provider', 'stuck_pending', 'hold_expired_uncaptured', 'invalid_provider_row',
        'part_mismatch', 'fee_mismatch', 'payout_unexplained', 'payout_item_unknown', 'not_paid_out'));

-- +goose Down
DELETE FROM reconciliation_discrepancies
WHERE category IN ('fee_mismatch', 'payout_unexplained', 'payout_item_unknown', 'not_paid_out');
ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_category_check
    CHECK (category IN ('missing_at_provider', 'missing_locally', 'amount_mismatch', 'currency_mismatch',
        'status_mismatch', 'duplicate_at_provider', 'stuck_pending', 'hold_expired_uncaptured', 'invalid_provider_row',
        'part_mismatch'));

DROP INDEX payment_operations_capture_created_idx;
ALTER TABLE reconciliation_runs DROP COLUMN settlement;
DROP TABLE reconciliation_money_rows;
