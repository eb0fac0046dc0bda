-- +goose Up
-- A payment's history (payment_events) is append-only and grows with
-- every payment for as long as payorch runs. It becomes a table
-- partitioned by month (created_at): old months are dropped whole when a
-- retention is set (DROP of a partition: no long DELETE, no bloat), and
-- the months ahead are created in advance by payment_events_ensure_partitions
-- (serve runs it hourly, orchestrator/history.go). A default partition catches a row outside every
-- month (a clock far off), so an insert never fails for want of one.
--
-- The existing rows move to the new table in this migration (one INSERT …
-- SELECT; on a large history it takes minutes, under this migration's
-- lock).
ALTER TABLE payment_events RENAME TO payment_events_unpartitioned;
ALTER TABLE payment_events_unpartitioned RENAME CONSTRAINT payment_events_pkey TO payment_events_unpartitioned_pkey;
ALTER TABLE payment_events_unpartitioned RENAME CONSTRAINT payment_events_payment_fkey TO payment_events_unpartitioned_payment_fkey;
ALTER TABLE payment_events_unpartitioned RENAME CONSTRAINT payment_events_type_check TO payment_events_unpartitioned_type_check;
ALTER INDEX payment_events_payment_idx RENAME TO payment_events_unpartitioned_payment_idx;

-- Ids keep coming from one sequence, after the rows that exist.
CREATE SEQUENCE payment_event_ids AS bigint;
SELECT setval('payment_event_ids', coalesce((SELECT max(id) FROM payment_events_unpartitioned), 0) + 1, false);

CREATE TABLE payment_events (
    tenant_id     bigint      NOT NULL,
    id            bigint      NOT NULL DEFAULT nextval('payment_event_ids'),
    payment_id    text        NOT NULL,
    type          text        NOT NULL,
    from_status   text,
    to_status     text,
    operation     text,
    forwarded_key text,
    outcome       text,
    latency_ms    double precision,
    detail        jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL,
    -- A partitioned table's keys include its partition key.
    CONSTRAINT payment_events_pkey PRIMARY KEY (tenant_id, id, created_at),
    CONSTRAINT payment_events_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    CONSTRAINT payment_events_type_check CHECK (type IN ('state_changed', 'provider_call', 'request', 'attempt_started',
        'provider_event', 'hold'))
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE payment_event_ids OWNED BY payment_events.id;
CREATE INDEX payment_events_payment_idx ON payment_events (tenant_id, payment_id, id);
CREATE TABLE payment_events_default PARTITION OF payment_events DEFAULT;

-- +goose StatementBegin
-- payment_events_ensure_partitions creates the monthly partitions (UTC
-- months, payment_events_yYYYYmMM) from the month of from_at through the
-- month of until_at, those missing; it returns how many it created. Safe
-- to run concurrently (an advisory lock serialises it) and again (it skips
-- what exists).
CREATE FUNCTION payment_events_ensure_partitions(from_at timestamptz, until_at timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    m       timestamptz := date_trunc('month', from_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    name    text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('payment_events_partitions'));
    WHILE m <= until_at LOOP
        name := 'payment_events_y' || to_char(m AT TIME ZONE 'UTC', 'YYYY"m"MM');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF payment_events FOR VALUES FROM (%L) TO (%L)',
                name, m, m + interval '1 month');
            created := created + 1;
        END IF;
        m := m + interval '1 month';
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- payment_events_drop_partitions drops the monthly partitions that end at
-- or before before_at (a retention), and returns how many. Each DROP locks
-- the parent table only for the change of its catalog: no rows are
-- deleted, nothing is left to vacuum. The default partition is never
-- dropped.
CREATE FUNCTION payment_events_drop_partitions(before_at timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part    record;
    starts  timestamptz;
    dropped integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('payment_events_partitions'));
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'payment_events'::regclass AND c.relname ~ '^payment_events_y[0-9]{4}m[0-9]{2}$'
    LOOP
        starts := make_timestamptz(substr(part.relname, 17, 4)::int, substr(part.relname, 22, 2)::int, 1, 0, 0, 0, 'UTC');
        IF starts + interval '1 month' <= before_at THEN
            EXECUTE format('DROP TABLE %I', part.relname);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END
$$;
-- +goose StatementEnd

-- Months for the rows that exist and three ahead, then the rows.
SELECT payment_events_ensure_partitions(coalesce((SELECT min(created_at) FROM payment_events_unpartitioned), now()),
    now() + interval '3 months');
INSERT INTO payment_events (tenant_id, id, payment_id, type, from_status, to_status, operation, forwarded_key, outcome,
    latency_ms, detail, created_at)
SELECT tenant_id, id, payment_id, type, from_status, to_status, operation, forwarded_key, outcome,
    latency_ms, detail, created_at
FROM payment_events_unpartitioned;
DROP TABLE payment_events_unpartitioned;

-- +goose Down
ALTER TABLE payment_events RENAME TO payment_events_partitioned;
CREATE TABLE payment_events (
    tenant_id     bigint      NOT NULL,
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    payment_id    text        NOT NULL,
    type          text        NOT NULL,
    from_status   text,
    to_status     text,
    operation     text,
    forwarded_key text,
    outcome       text,
    latency_ms    double precision,
    detail        jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL
);
INSERT INTO payment_events (tenant_id, id, payment_id, type, from_status, to_status, operation, forwarded_key, outcome,
    latency_ms, detail, created_at)
OVERRIDING SYSTEM VALUE
SELECT tenant_id, id, payment_id, type, from_status, to_status, operation, forwarded_key, outcome,
    latency_ms, detail, created_at
FROM payment_events_partitioned;
SELECT setval(pg_get_serial_sequence('payment_events', 'id'), coalesce((SELECT max(id) FROM payment_events), 0) + 1, false);
DROP TABLE payment_events_partitioned;
DROP FUNCTION payment_events_drop_partitions(timestamptz);
DROP FUNCTION payment_events_ensure_partitions(timestamptz, timestamptz);
ALTER TABLE payment_events
    ADD CONSTRAINT payment_events_pkey PRIMARY KEY (tenant_id, id),
    ADD CONSTRAINT payment_events_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    ADD CONSTRAINT payment_events_type_check CHECK (type IN ('state_changed', 'provider_call', 'request', 'attempt_started',
        'provider_event', 'hold'));
CREATE INDEX payment_events_payment_idx ON payment_events (tenant_id, payment_id, id);
-- The one heap is append-only again, as before this migration.
CREATE TRIGGER payment_events_append_only BEFORE UPDATE OR DELETE ON payment_events
    FOR EACH ROW EXECUTE FUNCTION payment_events_append_only();
