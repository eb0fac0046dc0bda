-- A payment whose method is a card of payorch's vault shows the card as
-- the API shows it (orchestrator.CardSummary: brand, last4, exp_month,
-- exp_year; never the number), so that support and the merchant see which
-- card paid without reading the vault. It is copied from the vault when
-- the payment is created (a card's summary never changes; a method
-- deleted later still leaves its payments readable) and is NULL for a
-- provider's own token.
--
-- payments_outbox gains the key, as events carry exactly the API's
-- objects (TestEventsAreTheAPIObjects). Events stored before have no
-- "card" key: their payments have none (no payment used the vault before
-- this migration), and the renderer gives them null.
--
-- Down restores 00018's trigger function and drops the column.

-- +goose Up
ALTER TABLE payments ADD COLUMN card jsonb;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text;
    event_type text;
    event_at   timestamptz := NEW.updated_at;
    next_seq   integer := 1;
    first_id   text;
    last_id    text;
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
    event_id := event_id_at(event_at);
    -- A new payment's first event is number 1 (see the top of 00014).
    -- A payment's events are between its creation and now; the bounds on
    -- the id, a day wider each side for clocks of instances that
    -- disagree, keep the search to the partitions of those months.
    IF TG_OP <> 'INSERT' THEN
        first_id := event_id_floor(NEW.created_at - interval '1 day');
        last_id := event_id_floor(greatest(event_at, NEW.updated_at) + interval '1 day');
        SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
        FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.id AND id >= first_id AND id < last_id;
    END IF;
    -- The event and its deliveries in one statement (see 00014; keep
    -- alike with webhook_fan_out). The object has every field of
    -- orchestrator.Payment's JSON (TestEventsAreTheAPIObjects).
    WITH event AS (
        INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
        VALUES (event_id, NEW.tenant_id, event_type, NEW.id, next_seq, jsonb_build_object(
            'id', NEW.id, 'object', 'payment', 'tenant_id', NEW.tenant_id, 'status', NEW.status,
            'amount_minor', NEW.amount_minor, 'currency', NEW.currency, 'captured_minor', NEW.captured_minor,
            'refunded_minor', NEW.refunded_minor, 'provider', NEW.provider, 'provider_ref', NEW.provider_ref,
            'payment_method', NEW.payment_method, 'idempotency_key', NEW.idempotency_key,
            'description', NEW.description, 'metadata', NEW.metadata, 'failure_code', NEW.failure_code,
            'capture_before', NEW.capture_before, 'on_expiry', NEW.on_expiry,
            'extended_authorization', NEW.extended_authorization, 'created_at', NEW.created_at,
            'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt, 'card', NEW.card),
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

-- CREATE OR REPLACE resets it: kept as 00017 set it.
ALTER FUNCTION payments_outbox() SET plan_cache_mode = force_generic_plan;

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text;
    event_type text;
    event_at   timestamptz := NEW.updated_at;
    next_seq   integer := 1;
    first_id   text;
    last_id    text;
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
    event_id := event_id_at(event_at);
    -- A new payment's first event is number 1 (see the top of 00014).
    -- A payment's events are between its creation and now; the bounds on
    -- the id, a day wider each side for clocks of instances that
    -- disagree, keep the search to the partitions of those months.
    IF TG_OP <> 'INSERT' THEN
        first_id := event_id_floor(NEW.created_at - interval '1 day');
        last_id := event_id_floor(greatest(event_at, NEW.updated_at) + interval '1 day');
        SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
        FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.id AND id >= first_id AND id < last_id;
    END IF;
    -- The event and its deliveries in one statement (see 00014; keep
    -- alike with webhook_fan_out). The object has every field of
    -- orchestrator.Payment's JSON (TestEventsAreTheAPIObjects).
    WITH event AS (
        INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
        VALUES (event_id, NEW.tenant_id, event_type, NEW.id, next_seq, jsonb_build_object(
            'id', NEW.id, 'object', 'payment', 'tenant_id', NEW.tenant_id, 'status', NEW.status,
            'amount_minor', NEW.amount_minor, 'currency', NEW.currency, 'captured_minor', NEW.captured_minor,
            'refunded_minor', NEW.refunded_minor, 'provider', NEW.provider, 'provider_ref', NEW.provider_ref,
            'payment_method', NEW.payment_method, 'idempotency_key', NEW.idempotency_key,
            'description', NEW.description, 'metadata', NEW.metadata, 'failure_code', NEW.failure_code,
            'capture_before', NEW.capture_before, 'on_expiry', NEW.on_expiry,
            'extended_authorization', NEW.extended_authorization, 'created_at', NEW.created_at,
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

-- CREATE OR REPLACE resets it: kept as 00017 set it.
ALTER FUNCTION payments_outbox() SET plan_cache_mode = force_generic_plan;

ALTER TABLE payments DROP COLUMN card;
