-- Daily reconciliation: versioned runs per (provider, business date), the
-- discrepancies each run found, and a staging area for the provider's rows.

-- +goose Up

-- Staff requests (finance starting a run, resolving a discrepancy) are keyed
-- too; they are scoped to tenant 0, which is no tenant.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_tenant_id_fkey;

-- Matching a provider's record back to payments.
CREATE INDEX payments_provider_ref_idx ON payments (provider_ref);
CREATE INDEX payments_provider_created_at_idx ON payments (provider, created_at);
CREATE INDEX payments_provider_updated_at_idx ON payments (provider, updated_at);

CREATE TABLE reconciliation_runs (
    id                bigint      GENERATED ALWAYS AS IDENTITY,
    provider          text        NOT NULL,
    business_date     date        NOT NULL,
    version           integer     NOT NULL,
    trigger           text        NOT NULL,
    status            text        NOT NULL DEFAULT 'running',
    time_zone         text        NOT NULL,
    window_start      timestamptz NOT NULL,
    window_end        timestamptz NOT NULL,
    grace_seconds     integer     NOT NULL,
    requested_by      text        NOT NULL DEFAULT '',
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    lease_until       timestamptz,
    local_count       bigint      NOT NULL DEFAULT 0,
    provider_count    bigint      NOT NULL DEFAULT 0,
    matched_count     bigint      NOT NULL DEFAULT 0,
    discrepancy_count bigint      NOT NULL DEFAULT 0,
    totals            jsonb       NOT NULL DEFAULT '{}',
    category_counts   jsonb       NOT NULL DEFAULT '{}',
    diff              jsonb       NOT NULL DEFAULT '{}',
    error             text,
    CONSTRAINT reconciliation_runs_pkey PRIMARY KEY (id),
    CONSTRAINT reconciliation_runs_provider_business_date_version_key UNIQUE (provider, business_date, version),
    CONSTRAINT reconciliation_runs_status_check CHECK (status IN ('running', 'succeeded', 'failed')),
    CONSTRAINT reconciliation_runs_trigger_check CHECK (trigger IN ('schedule', 'api', 'cli')),
    CONSTRAINT reconciliation_runs_version_check CHECK (version >= 1)
);

-- The scheduled run of a day happens once, however many instances fire.
CREATE UNIQUE INDEX reconciliation_runs_one_scheduled_key ON reconciliation_runs (provider, business_date)
    WHERE trigger = 'schedule';

CREATE TABLE reconciliation_discrepancies (
    id                bigint      GENERATED ALWAYS AS IDENTITY,
    run_id            bigint      NOT NULL,
    category          text        NOT NULL,
    -- Stable across versions of a run: category, the payment (or provider
    -- reference) and the field.
    fingerprint       text        NOT NULL,
    tenant_id         bigint,
    payment_id        text,
    provider_ref      text,
    field             text        NOT NULL DEFAULT '',
    expected          text        NOT NULL DEFAULT '',
    actual            text        NOT NULL DEFAULT '',
    currency          text        NOT NULL DEFAULT '',
    difference_minor  bigint,
    change            text        NOT NULL DEFAULT 'new',
    detail            jsonb       NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL,
    resolved_at       timestamptz,
    resolved_by       text,
    resolution_note   text,
    CONSTRAINT reconciliation_discrepancies_pkey PRIMARY KEY (id),
    CONSTRAINT reconciliation_discrepancies_run_id_fkey FOREIGN KEY (run_id) REFERENCES reconciliation_runs (id),
    CONSTRAINT reconciliation_discrepancies_run_id_fingerprint_key UNIQUE (run_id, fingerprint),
    CONSTRAINT reconciliation_discrepancies_category_check CHECK (category IN ('missing_at_provider', 'missing_locally',
        'amount_mismatch', 'currency_mismatch', 'status_mismatch', 'duplicate_at_provider', 'stuck_pending',
        'hold_expired_uncaptured')),
    CONSTRAINT reconciliation_discrepancies_change_check CHECK (change IN ('new', 'still_open')),
    CONSTRAINT reconciliation_discrepancies_resolution_check CHECK ((resolved_at IS NULL) = (resolved_by IS NULL))
);

CREATE INDEX reconciliation_discrepancies_run_category_idx ON reconciliation_discrepancies (run_id, category, id);

-- The provider's record of a run's window, loaded with COPY and matched in
-- SQL; emptied when the run ends. Unlogged: it is rebuilt by a re-run.
CREATE UNLOGGED TABLE reconciliation_provider_rows (
    run_id             bigint      NOT NULL,
    seq                bigint      NOT NULL,
    ref                text        NOT NULL,
    payment_id         text        NOT NULL DEFAULT '',
    status             text        NOT NULL,
    amount_minor       bigint      NOT NULL,
    captured_minor     bigint      NOT NULL,
    refunded_minor     bigint      NOT NULL,
    currency           text        NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    matched_tenant_id  bigint,
    matched_payment_id text,
    CONSTRAINT reconciliation_provider_rows_pkey PRIMARY KEY (run_id, seq)
);

CREATE INDEX reconciliation_provider_rows_ref_idx ON reconciliation_provider_rows (run_id, ref);

-- +goose Down
DROP TABLE reconciliation_provider_rows;
DROP TABLE reconciliation_discrepancies;
DROP TABLE reconciliation_runs;
DROP INDEX payments_provider_updated_at_idx;
DROP INDEX payments_provider_created_at_idx;
DROP INDEX payments_provider_ref_idx;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id);
