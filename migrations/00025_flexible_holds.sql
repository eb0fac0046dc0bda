-- Flexible holds: incremental authorization, several partial captures,
-- overcapture (orchestrator/flexhold.go).
--
-- payments gains what the connector granted of what the authorization
-- asked for, as Stripe reports it per card: incremental_authorization,
-- multicapture, overcapture ('requested' while the payment is pending,
-- then 'available' | 'unavailable'; NULL when not asked), max_capturable_minor (with overcapture, the most that may be
-- captured in all) and max_amount_minor (with increments, the most the
-- hold may be raised to, when the connector states it). captured_minor
-- may then exceed amount_minor, up to max_capturable_minor.
--
-- payment_operations gains the kind increment (amount_minor: the new
-- total) and final (a capture with final_capture false leaves the rest of
-- the hold capturable). One hold still ends once: at most one final
-- capture or cancel that has not failed. And a payment has at most one
-- increment, capture or cancel pending at a time, so each is admitted
-- against the hold as the one before left it (the row lock decides;
-- these indexes are the backstop).
--
-- payments_outbox writes payment.amount_increased when the amount rises,
-- and the object gains the new fields (events carry the API's objects).

-- +goose Up
ALTER TABLE payments
    ADD COLUMN incremental_authorization text,
    ADD COLUMN multicapture text,
    ADD COLUMN overcapture text,
    ADD COLUMN max_capturable_minor bigint,
    ADD COLUMN max_amount_minor bigint,
    -- (NULL IN (…) is NULL, which a CHECK lets through: not asked.)
    ADD CONSTRAINT payments_flex_check CHECK (incremental_authorization IN ('requested', 'available', 'unavailable')
        AND multicapture IN ('requested', 'available', 'unavailable')
        AND overcapture IN ('requested', 'available', 'unavailable')),
    DROP CONSTRAINT payments_captured_minor_check,
    ADD CONSTRAINT payments_captured_minor_check
        CHECK (captured_minor >= 0 AND captured_minor <= greatest(amount_minor, coalesce(max_capturable_minor, 0)));

ALTER TABLE payment_operations
    ADD COLUMN final boolean NOT NULL DEFAULT true,
    DROP CONSTRAINT payment_operations_kind_check,
    ADD CONSTRAINT payment_operations_kind_check CHECK (kind IN ('capture', 'cancel', 'refund', 'increment'));

DROP INDEX payment_operations_one_settlement_key;
CREATE UNIQUE INDEX payment_operations_one_settlement_key ON payment_operations (tenant_id, payment_id)
    WHERE kind IN ('capture', 'cancel') AND status <> 'failed' AND final;
CREATE UNIQUE INDEX payment_operations_one_pending_change ON payment_operations (tenant_id, payment_id)
    WHERE kind IN ('increment', 'capture', 'cancel') AND status = 'pending';

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
    ELSIF NEW.amount_minor > OLD.amount_minor THEN
        event_type := 'payment.amount_increased';
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
            'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt, 'card', NEW.card,
            'return_url', NEW.return_url, 'next_action', CASE WHEN NEW.status = 'requires_action' THEN jsonb_build_object(
                'type', 'redirect_to_url', 'url', NEW.next_action_url, 'return_url', NEW.return_url,
                'expires_at', NEW.action_expires_at) END,
            'incremental_authorization', NEW.incremental_authorization, 'multicapture', NEW.multicapture,
            'overcapture', NEW.overcapture, 'max_capturable_minor', NEW.max_capturable_minor),
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

DROP TRIGGER payments_outbox_changed ON payments;
CREATE TRIGGER payments_outbox_changed
    AFTER UPDATE OF status, attempt, hold_expiring_at, capture_before, amount_minor ON payments
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt
        OR (OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL)
        OR (NEW.status = 'authorized' AND OLD.status = 'authorized' AND NEW.capture_before > OLD.capture_before)
        OR NEW.amount_minor > OLD.amount_minor)
    EXECUTE FUNCTION payments_outbox();

-- +goose Down
DROP TRIGGER payments_outbox_changed ON payments;
CREATE TRIGGER payments_outbox_changed
    AFTER UPDATE OF status, attempt, hold_expiring_at, capture_before ON payments
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt
        OR (OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL)
        OR (NEW.status = 'authorized' AND OLD.status = 'authorized' AND NEW.capture_before > OLD.capture_before))
    EXECUTE FUNCTION payments_outbox();

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
            'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt, 'card', NEW.card,
            'return_url', NEW.return_url, 'next_action', CASE WHEN NEW.status = 'requires_action' THEN jsonb_build_object(
                'type', 'redirect_to_url', 'url', NEW.next_action_url, 'return_url', NEW.return_url,
                'expires_at', NEW.action_expires_at) END),
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

DROP INDEX payment_operations_one_pending_change;
DROP INDEX payment_operations_one_settlement_key;
CREATE UNIQUE INDEX payment_operations_one_settlement_key ON payment_operations (tenant_id, payment_id)
    WHERE kind IN ('capture', 'cancel') AND status <> 'failed';

ALTER TABLE payment_operations
    DROP CONSTRAINT payment_operations_kind_check,
    ADD CONSTRAINT payment_operations_kind_check CHECK (kind IN ('capture', 'cancel', 'refund')),
    DROP COLUMN final;

ALTER TABLE payments
    DROP CONSTRAINT payments_captured_minor_check,
    ADD CONSTRAINT payments_captured_minor_check CHECK (captured_minor BETWEEN 0 AND amount_minor),
    DROP CONSTRAINT payments_flex_check,
    DROP COLUMN incremental_authorization,
    DROP COLUMN multicapture,
    DROP COLUMN overcapture,
    DROP COLUMN max_capturable_minor,
    DROP COLUMN max_amount_minor;
