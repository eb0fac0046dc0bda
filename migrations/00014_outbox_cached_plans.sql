-- Where PostgreSQL's time goes on a new authorize (issue #17,
-- BENCHMARKS.md "Where the time goes on the durable cluster"): the two
-- events an authorize writes (payment.pending, payment.authorized) cost
-- more in webhook_fan_out than in anything else the triggers do, and
-- almost all of it is planning, not inserting.
--
-- webhook_fan_out was a LANGUAGE sql function. PostgreSQL plans the body
-- of a SQL function that it cannot inline (an INSERT) again on every
-- call: pg_stat_statements (track = all, track_planning = on) counted
-- about 95 µs of planning for 1.4 µs of execution per call, two calls
-- per authorize. The same statement in PL/pgSQL is prepared once per
-- connection and its plan kept (SPI's plan cache), so a call costs the
-- execution. The function keeps its name, arguments and effect: one
-- delivery for each enabled endpoint of the tenant (NULL: the staff
-- endpoints) that wants the type; every trigger that calls it is
-- unchanged.
--
-- payments_outbox, which runs twice on every authorize, does not call
-- webhook_fan_out at all: even a PL/pgSQL call costs more than the
-- insert it makes (about 20 µs of call for 3 µs of insert), so the
-- trigger writes the event and its deliveries in one statement, the
-- fan-out's INSERT written out in it (a data-modifying CTE; the
-- deliveries' foreign key to the event is checked at the statement's
-- end, when the event is there).
--
-- payments_outbox numbers a payment's events from 1. For the event of a
-- payment's creation (the trigger on INSERT) the number is 1 without a
-- look at events: the row was inserted by this very statement (payments
-- are never deleted, and the id is derived from the tenant and the key,
-- so no earlier payment of that id left events behind; the unique
-- constraint events_sequence_key would refuse a second number 1 anyway).
-- Later changes still read max(sequence) under the payment's row lock.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_fan_out(p_event_id text, p_tenant_id bigint, p_event_type text, p_at timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
    SELECT p_event_id, e.id, p_at, p_at
    FROM webhook_endpoints e
    WHERE e.tenant_id IS NOT DISTINCT FROM p_tenant_id AND e.enabled AND e.deleted_at IS NULL
        AND ('*' = ANY (e.event_types) OR p_event_type = ANY (e.event_types));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    event_type text;
    event_at   timestamptz := NEW.updated_at;
    next_seq   integer := 1;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        event_type := 'payment.' || NEW.status;
    ELSIF NEW.attempt IS DISTINCT FROM OLD.attempt THEN
        event_type := 'payment.attempt_started';
    ELSIF OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL THEN
        -- A warning changes nothing of the payment (updated_at stays).
        event_type := 'payment.hold_expiring';
        event_at := NEW.hold_expiring_at;
    ELSE
        event_type := 'payment.hold_extended';
    END IF;
    -- A new payment's first event is number 1 (see the top of 00014).
    IF TG_OP <> 'INSERT' THEN
        SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
        FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.id;
    END IF;
    -- The event and its deliveries in one statement: webhook_fan_out's
    -- INSERT, written out here because this trigger runs twice on every
    -- authorize and a call of the function costs more than its insert
    -- (keep the two alike).
    WITH event AS (
        INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
        VALUES (event_id, NEW.tenant_id, event_type, NEW.id, next_seq, jsonb_build_object(
            'id', NEW.id, 'object', 'payment', 'tenant_id', NEW.tenant_id, 'status', NEW.status,
            'amount_minor', NEW.amount_minor, 'currency', NEW.currency, 'captured_minor', NEW.captured_minor,
            'refunded_minor', NEW.refunded_minor, 'provider', NEW.provider, 'provider_ref', NEW.provider_ref,
            'payment_method', NEW.payment_method, 'idempotency_key', NEW.idempotency_key,
            'description', NEW.description, 'metadata', NEW.metadata, 'failure_code', NEW.failure_code,
            'capture_before', NEW.capture_before, 'on_expiry', NEW.on_expiry, 'created_at', NEW.created_at,
            'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt),
            event_at)
        RETURNING id
    )
    INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
    SELECT event.id, e.id, event_at, event_at
    FROM event, webhook_endpoints e
    WHERE e.tenant_id IS NOT DISTINCT FROM NEW.tenant_id AND e.enabled AND e.deleted_at IS NULL
        AND ('*' = ANY (e.event_types) OR event_type = ANY (e.event_types));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    event_type text;
    event_at   timestamptz := NEW.updated_at;
    next_seq   integer;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        event_type := 'payment.' || NEW.status;
    ELSIF NEW.attempt IS DISTINCT FROM OLD.attempt THEN
        event_type := 'payment.attempt_started';
    ELSIF OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL THEN
        -- A warning changes nothing of the payment (updated_at stays).
        event_type := 'payment.hold_expiring';
        event_at := NEW.hold_expiring_at;
    ELSE
        event_type := 'payment.hold_extended';
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
        'capture_before', NEW.capture_before, 'on_expiry', NEW.on_expiry, 'created_at', NEW.created_at,
        'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt),
        event_at);
    PERFORM webhook_fan_out(event_id, NEW.tenant_id, event_type, event_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_fan_out(p_event_id text, p_tenant_id bigint, p_event_type text, p_at timestamptz) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
    SELECT p_event_id, e.id, p_at, p_at
    FROM webhook_endpoints e
    WHERE e.tenant_id IS NOT DISTINCT FROM p_tenant_id AND e.enabled AND e.deleted_at IS NULL
        AND ('*' = ANY (e.event_types) OR p_event_type = ANY (e.event_types));
$$;
-- +goose StatementEnd
