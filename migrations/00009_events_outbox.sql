-- Events for merchants (issue #15): the outbox, webhook endpoints and their
-- deliveries.
--
-- Every state change of a payment (its creation, pending, too), every new
-- attempt of one, and every capture, cancel or refund that ends writes one
-- row of events in the same transaction as the change: triggers on
-- payments and payment_operations write it from the row as the change left
-- it. So no event is written for a change that rolled back, and none is
-- missing for one that committed. The same triggers write a delivery for
-- each of the tenant's enabled endpoints that wants the event's type, and
-- the delivery workers send them from there, at least once.
--
-- sequence numbers a payment's own events from 1 in the order of its
-- changes: the trigger runs under the payment's row lock (the change
-- inserted or updated the row), so the next number is read safely; the
-- unique constraint would refuse a second writer anyway.
--
-- object is the payment as the change left it, in the API's shape
-- (orchestrator.Payment; TestOutbox checks that the last event's is the
-- payment as GET /v1/payments/{id} answers it).
--
-- Staff events have no tenant: a reconciliation run that finishes
-- (succeeded or failed) writes one, in the transaction that records its
-- final status (the trigger on reconciliation_runs below), delivered to
-- the staff endpoints (tenant_id NULL, created by finance) that want it.

-- +goose Up
CREATE TABLE events (
    id         text        NOT NULL,
    -- NULL for staff events (reconciliation.run.…, and
    -- webhook_endpoint.disabled for a staff endpoint).
    tenant_id  bigint,
    type       text        NOT NULL,
    -- payment_id is set for the events of a payment and of its captures,
    -- cancels and refunds; sequence for the payment's own (its states and
    -- attempts).
    payment_id text,
    sequence   integer,
    object     jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    -- No foreign keys: events are written by the trigger below (and the
    -- delivery worker), from rows it has just read, on the hot path of
    -- every payment; a key's check would read them again.
    CONSTRAINT events_pkey PRIMARY KEY (id),
    CONSTRAINT events_sequence_key UNIQUE (tenant_id, payment_id, sequence),
    -- A sequence only on a payment's events (its state changes, attempts).
    CONSTRAINT events_sequence_check CHECK (sequence > 0 AND payment_id IS NOT NULL OR sequence IS NULL)
);

-- The events API lists a tenant's events (or the staff events, tenant_id
-- IS NULL) newest first.
CREATE INDEX events_tenant_created_idx ON events (tenant_id, created_at DESC, id DESC);

-- Webhook endpoints: where a tenant's events (or, for a staff endpoint,
-- tenant_id NULL, the staff events) are delivered. secret
-- signs every delivery (orchestrator/webhooksig); after a rotation the previous
-- one keeps signing too until previous_secret_until. A deleted endpoint
-- keeps its row (its deliveries' history) and receives nothing more.
CREATE TABLE webhook_endpoints (
    id                    text        NOT NULL,
    -- NULL for a staff endpoint (finance's): it receives staff events only.
    tenant_id             bigint,
    url                   text        NOT NULL,
    -- The event types it receives; '{*}' is every type.
    event_types           text[]      NOT NULL,
    description           text        NOT NULL DEFAULT '',
    enabled               boolean     NOT NULL DEFAULT true,
    -- Why it was disabled (by its owner, or after failing for 3 days).
    disabled_reason       text,
    secret                text        NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    -- Since when every delivery to it has failed; NULL while it answers.
    failing_since         timestamptz,
    created_by            text        NOT NULL,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    deleted_at            timestamptz,
    CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_endpoints_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT webhook_endpoints_event_types_check CHECK (cardinality(event_types) > 0)
);

CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant_id) WHERE enabled AND deleted_at IS NULL;

-- One row per (event, endpoint) to deliver, written with the event (the
-- trigger below), so an event committed is an event to deliver. The
-- delivery worker of every instance takes due rows with FOR UPDATE SKIP
-- LOCKED: one delivery of an event to an endpoint at a time.
CREATE TABLE webhook_deliveries (
    event_id        text        NOT NULL,
    endpoint_id     text        NOT NULL,
    -- pending: to be sent at next_attempt_at; delivered: answered 2xx;
    -- failed: given up (3 days of failures, or the endpoint deleted).
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL,
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (event_id) REFERENCES events (id),
    CONSTRAINT webhook_deliveries_endpoint_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints (id),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed'))
);

CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
-- An endpoint's pending deliveries, given up when it is disabled or deleted.
CREATE INDEX webhook_deliveries_endpoint_pending_idx ON webhook_deliveries (endpoint_id) WHERE status = 'pending';

-- Every attempt of a delivery: when, how long, what came back (the status,
-- or the error, and the answer's first 1 KiB).
CREATE TABLE webhook_delivery_attempts (
    event_id         text             NOT NULL,
    endpoint_id      text             NOT NULL,
    attempt          integer          NOT NULL,
    started_at       timestamptz      NOT NULL,
    latency_ms       double precision NOT NULL,
    status_code      integer,
    error            text,
    response_excerpt text,
    CONSTRAINT webhook_delivery_attempts_pkey PRIMARY KEY (event_id, endpoint_id, attempt),
    CONSTRAINT webhook_delivery_attempts_delivery_fkey FOREIGN KEY (event_id, endpoint_id)
        REFERENCES webhook_deliveries (event_id, endpoint_id)
);

-- webhook_fan_out writes the deliveries of a new event: one for each
-- enabled endpoint of its tenant (NULL: the staff endpoints) that wants
-- its type. Every writer of events calls it in the event's transaction.
-- +goose StatementBegin
CREATE FUNCTION webhook_fan_out(p_event_id text, p_tenant_id bigint, p_event_type text, p_at timestamptz) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
    SELECT p_event_id, e.id, p_at, p_at
    FROM webhook_endpoints e
    WHERE e.tenant_id IS NOT DISTINCT FROM p_tenant_id AND e.enabled AND e.deleted_at IS NULL
        AND ('*' = ANY (e.event_types) OR p_event_type = ANY (e.event_types));
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    event_type text;
    next_seq   integer;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        event_type := 'payment.' || NEW.status;
    ELSE
        event_type := 'payment.attempt_started';
    END IF;
    SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
    FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.id;
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NEW.tenant_id, event_type, NEW.id, next_seq, jsonb_build_object(
        'id', NEW.id, 'object', 'payment', 'tenant_id', NEW.tenant_id, 'status', NEW.status,
        'amount_minor', NEW.amount_minor, 'currency', NEW.currency, 'captured_minor', NEW.captured_minor,
        'refunded_minor', NEW.refunded_minor, 'provider', NEW.provider, 'provider_ref', NEW.provider_ref,
        'payment_method', NEW.payment_method, 'idempotency_key', NEW.idempotency_key,
        'description', NEW.description, 'metadata', NEW.metadata, 'failure_code', NEW.failure_code,
        'capture_before', NEW.capture_before, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at,
        'routing_version', NEW.routing_version, 'attempt', NEW.attempt), NEW.updated_at);
    PERFORM webhook_fan_out(event_id, NEW.tenant_id, event_type, NEW.updated_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- A payment's events: its creation (pending), each change of its status,
-- and each new attempt, from the row as the change left it.
CREATE TRIGGER payments_outbox_created
    AFTER INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_outbox();

CREATE TRIGGER payments_outbox_changed
    AFTER UPDATE OF status, attempt ON payments
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt)
    EXECUTE FUNCTION payments_outbox();

-- A capture, cancel or refund that ends (succeeded or failed, at once or
-- after the provider answered) writes one event too: <kind>.<status>, with
-- the operation as its object. It carries the payment's id but no sequence:
-- sequence orders the payment's own states, which a capture or refund that
-- succeeds also changes (and so numbers, in the same statement), while a
-- failed one changes nothing of the payment and may end concurrently with
-- another operation of it.
-- +goose StatementBegin
CREATE FUNCTION payment_operations_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    event_type text := NEW.kind || '.' || NEW.status;
BEGIN
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    SELECT event_id, NEW.tenant_id, event_type, NEW.payment_id, NULL,
        jsonb_build_object('id', NEW.id, 'object', NEW.kind, 'payment_id', NEW.payment_id, 'status', NEW.status,
            'amount_minor', NEW.amount_minor, 'currency', p.currency, 'provider_ref', NEW.provider_ref,
            'failure_code', NEW.failure_code, 'idempotency_key', NEW.idempotency_key,
            'created_at', NEW.created_at, 'updated_at', NEW.updated_at),
        NEW.updated_at
    FROM payments p WHERE p.tenant_id = NEW.tenant_id AND p.id = NEW.payment_id;
    PERFORM webhook_fan_out(event_id, NEW.tenant_id, event_type, NEW.updated_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER payment_operations_outbox_ended
    AFTER UPDATE OF status ON payment_operations
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status <> 'pending')
    EXECUTE FUNCTION payment_operations_outbox();

CREATE TRIGGER payment_operations_outbox_born_ended
    AFTER INSERT ON payment_operations
    FOR EACH ROW WHEN (NEW.status <> 'pending')
    EXECUTE FUNCTION payment_operations_outbox();

-- +goose StatementBegin
CREATE FUNCTION reconciliation_runs_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text;
    event_type text;
BEGIN
    event_id := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    event_type := CASE NEW.status WHEN 'succeeded' THEN 'reconciliation.run.completed' ELSE 'reconciliation.run.failed' END;
    -- The run's summary, in the shape of GET /v1/reconciliation/runs/{id}
    -- (reconcile.Run) without totals, diff and requested_by.
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NULL, event_type, NULL, NULL, jsonb_build_object(
        'id', NEW.id, 'object', 'reconciliation_run', 'provider', NEW.provider,
        'business_date', NEW.business_date::text, 'version', NEW.version, 'trigger', NEW.trigger,
        'status', NEW.status, 'started_at', NEW.started_at, 'finished_at', NEW.finished_at,
        'local_count', NEW.local_count, 'provider_count', NEW.provider_count, 'matched_count', NEW.matched_count,
        'discrepancy_count', NEW.discrepancy_count, 'category_counts', NEW.category_counts, 'error', NEW.error),
        coalesce(NEW.finished_at, now()));
    PERFORM webhook_fan_out(event_id, NULL, event_type, coalesce(NEW.finished_at, now()));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- A run's final status is written once (reconcile: finish, in the
-- transaction of its findings; fail, in one statement), from running.
CREATE TRIGGER reconciliation_runs_outbox
    AFTER UPDATE OF status ON reconciliation_runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed'))
    EXECUTE FUNCTION reconciliation_runs_outbox();

-- +goose Down
DROP TRIGGER reconciliation_runs_outbox ON reconciliation_runs;
DROP FUNCTION reconciliation_runs_outbox();
DROP TRIGGER payment_operations_outbox_born_ended ON payment_operations;
DROP TRIGGER payment_operations_outbox_ended ON payment_operations;
DROP FUNCTION payment_operations_outbox();
DROP TRIGGER payments_outbox_changed ON payments;
DROP TRIGGER payments_outbox_created ON payments;
DROP FUNCTION payments_outbox();
DROP FUNCTION webhook_fan_out(text, bigint, text, timestamptz);
DROP TABLE webhook_delivery_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE events;
