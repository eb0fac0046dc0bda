-- Bank statements and the matching of payouts to bank credits
-- (reconcile/bankstatement.go, reconcile/bank.go).
--
-- connector_bank_accounts: the bank account each connector pays out to
-- and the window (days after a payout's arrival date) within which its
-- credit must be booked. Credit lines of an account belong to the
-- connectors paying into it.
--
-- bank_statements / bank_statement_lines: the statements finance uploads
-- (camt.053 or CSV), each imported whole in one transaction. The same
-- statement of an account (its id, or the same content) is imported
-- once. A line's account is copied from its statement for the index the
-- matching reads credits by.
--
-- reconciliation_runs.bank: what the run found of its connector's payouts
-- in the bank (reconcile.BankSummary); NULL when the connector has no bank
-- account configured. The run's outbox trigger writes it into the run's
-- event, with the settlement of 00028 (the event is the run as the API
-- answers it).
--
-- The three new discrepancy categories are added to the category check
-- by reading the list it holds, so that this migration keeps whatever
-- categories the migrations before it added, whichever they are.

-- +goose Up
CREATE TABLE connector_bank_accounts (
    connector         text        NOT NULL,
    account           text        NOT NULL,
    match_window_days integer     NOT NULL,
    updated_by        text        NOT NULL,
    updated_at        timestamptz NOT NULL,
    CONSTRAINT connector_bank_accounts_pkey PRIMARY KEY (connector),
    CONSTRAINT connector_bank_accounts_match_window_days_check CHECK (match_window_days BETWEEN 1 AND 14)
);
CREATE INDEX connector_bank_accounts_account_idx ON connector_bank_accounts (account);

CREATE TABLE bank_statements (
    id             bigint      GENERATED ALWAYS AS IDENTITY,
    account        text        NOT NULL,
    statement_id   text        NOT NULL,
    format         text        NOT NULL,
    content_sha256 text        NOT NULL,
    from_date      date,
    to_date        date,
    line_count     integer     NOT NULL,
    totals         jsonb       NOT NULL,
    created_by     text        NOT NULL,
    created_at     timestamptz NOT NULL,
    CONSTRAINT bank_statements_pkey PRIMARY KEY (id),
    CONSTRAINT bank_statements_account_statement_id_key UNIQUE (account, statement_id),
    CONSTRAINT bank_statements_account_content_sha256_key UNIQUE (account, content_sha256),
    CONSTRAINT bank_statements_format_check CHECK (format IN ('camt.053', 'csv'))
);

CREATE TABLE bank_statement_lines (
    statement_id   bigint  NOT NULL,
    line           integer NOT NULL,
    account        text    NOT NULL,
    booking_date   date    NOT NULL,
    value_date     date,
    amount_minor   bigint  NOT NULL,
    currency       text    NOT NULL,
    credit_debit   text    NOT NULL,
    reversal       boolean NOT NULL,
    reference      text    NOT NULL,
    counterparty   text    NOT NULL,
    bank_reference text    NOT NULL,
    CONSTRAINT bank_statement_lines_pkey PRIMARY KEY (statement_id, line),
    CONSTRAINT bank_statement_lines_statement_id_fkey FOREIGN KEY (statement_id) REFERENCES bank_statements (id)
        ON DELETE CASCADE,
    CONSTRAINT bank_statement_lines_amount_minor_check CHECK (amount_minor >= 0),
    CONSTRAINT bank_statement_lines_credit_debit_check CHECK (credit_debit IN ('credit', 'debit'))
);
-- The matching reads an account's credits by booking date.
CREATE INDEX bank_statement_lines_credits_idx ON bank_statement_lines (account, booking_date)
    WHERE credit_debit = 'credit' AND NOT reversal;

ALTER TABLE reconciliation_runs ADD COLUMN bank jsonb;

-- The run's event carries its settlement (00028) and bank summary too:
-- every field of reconcile.Run's JSON, as before.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reconciliation_runs_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_at   timestamptz := coalesce(NEW.finished_at, now());
    event_id   text := event_id_at(event_at);
    event_type text := CASE NEW.status WHEN 'succeeded' THEN 'reconciliation.run.completed'
        ELSE 'reconciliation.run.failed' END;
BEGIN
    -- The run: every field of reconcile.Run's JSON (GET
    -- /v1/reconciliation/runs/{id}).
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NULL, event_type, NULL, NULL, jsonb_build_object(
        'id', NEW.id, 'object', 'reconciliation_run', 'provider', NEW.provider,
        'business_date', NEW.business_date::text, 'version', NEW.version, 'trigger', NEW.trigger,
        'status', NEW.status, 'time_zone', NEW.time_zone, 'window_start', NEW.window_start,
        'window_end', NEW.window_end, 'grace_seconds', NEW.grace_seconds, 'requested_by', NEW.requested_by,
        'started_at', NEW.started_at, 'finished_at', NEW.finished_at,
        'local_count', NEW.local_count, 'provider_count', NEW.provider_count, 'matched_count', NEW.matched_count,
        'discrepancy_count', NEW.discrepancy_count, 'totals', NEW.totals, 'category_counts', NEW.category_counts,
        'diff', NEW.diff, 'error', NEW.error,
        'settlement', NEW.settlement, 'bank', NEW.bank),
        event_at);
    PERFORM webhook_fan_out(event_id, NULL, event_type, event_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    cats text[];
BEGIN
    SELECT array_agg(m[1] ORDER BY n) INTO cats
    FROM pg_constraint c, regexp_matches(pg_get_constraintdef(c.oid), '''([a-z_]+)''', 'g') WITH ORDINALITY AS r(m, n)
    WHERE c.conrelid = 'reconciliation_discrepancies'::regclass
        AND c.conname = 'reconciliation_discrepancies_category_check';
    IF cats IS NULL THEN
        RAISE EXCEPTION 'reconciliation_discrepancies_category_check not found';
    END IF;
    cats := cats || ARRAY(SELECT x FROM unnest(ARRAY['payout_missing_in_bank', 'payout_amount_mismatch',
        'bank_credit_unmatched']) WITH ORDINALITY AS n(x, i) WHERE x <> ALL (cats) ORDER BY i);
    EXECUTE format('ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check, '
        'ADD CONSTRAINT reconciliation_discrepancies_category_check CHECK (category IN (%s))',
        (SELECT string_agg(quote_literal(x), ', ' ORDER BY i) FROM unnest(cats) WITH ORDINALITY AS n(x, i)));
END
$$;
-- +goose StatementEnd

-- +goose Down
DELETE FROM reconciliation_discrepancies
WHERE category IN ('payout_missing_in_bank', 'payout_amount_mismatch', 'bank_credit_unmatched');

-- +goose StatementBegin
DO $$
DECLARE
    cats text[];
BEGIN
    SELECT array_agg(m[1] ORDER BY n) INTO cats
    FROM pg_constraint c, regexp_matches(pg_get_constraintdef(c.oid), '''([a-z_]+)''', 'g') WITH ORDINALITY AS r(m, n)
    WHERE c.conrelid = 'reconciliation_discrepancies'::regclass
        AND c.conname = 'reconciliation_discrepancies_category_check'
        AND m[1] NOT IN ('payout_missing_in_bank', 'payout_amount_mismatch', 'bank_credit_unmatched');
    EXECUTE format('ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_category_check, '
        'ADD CONSTRAINT reconciliation_discrepancies_category_check CHECK (category IN (%s))',
        (SELECT string_agg(quote_literal(x), ', ' ORDER BY i) FROM unnest(cats) WITH ORDINALITY AS n(x, i)));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reconciliation_runs_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_at   timestamptz := coalesce(NEW.finished_at, now());
    event_id   text := event_id_at(event_at);
    event_type text := CASE NEW.status WHEN 'succeeded' THEN 'reconciliation.run.completed'
        ELSE 'reconciliation.run.failed' END;
BEGIN
    -- The run: every field of reconcile.Run's JSON (GET
    -- /v1/reconciliation/runs/{id}).
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NULL, event_type, NULL, NULL, jsonb_build_object(
        'id', NEW.id, 'object', 'reconciliation_run', 'provider', NEW.provider,
        'business_date', NEW.business_date::text, 'version', NEW.version, 'trigger', NEW.trigger,
        'status', NEW.status, 'time_zone', NEW.time_zone, 'window_start', NEW.window_start,
        'window_end', NEW.window_end, 'grace_seconds', NEW.grace_seconds, 'requested_by', NEW.requested_by,
        'started_at', NEW.started_at, 'finished_at', NEW.finished_at,
        'local_count', NEW.local_count, 'provider_count', NEW.provider_count, 'matched_count', NEW.matched_count,
        'discrepancy_count', NEW.discrepancy_count, 'totals', NEW.totals, 'category_counts', NEW.category_counts,
        'diff', NEW.diff, 'error', NEW.error),
        event_at);
    PERFORM webhook_fan_out(event_id, NULL, event_type, event_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
ALTER TABLE reconciliation_runs DROP COLUMN bank;
DROP TABLE bank_statement_lines;
DROP TABLE bank_statements;
DROP TABLE connector_bank_accounts;
