-- Strong Customer Authentication (3-D Secure). A payment whose issuer
-- asks for the cardholder's authentication waits in requires_action:
-- pending → requires_action → authorized | failed (orchestrator.Statuses,
-- the one list). While it waits:
--
--   return_url         where the provider sends the shopper back (the
--                      request's; NULL when it gave none, and then no
--                      challenge can be issued)
--   next_action_url    the provider's challenge page (kept after the
--                      payment leaves requires_action, for its history)
--   action_expires_at  when an unfinished challenge is abandoned: the
--                      hold sweeper cancels the provider's intent and
--                      fails the payment authentication_abandoned
--   request_three_ds   the current attempt asks the provider to
--                      authenticate (the one retry after an
--                      authentication_required decline)
--
-- The attempt that issued the challenge has outcome requires_action
-- until the challenge ends. The waiting payments are few: a partial index
-- finds them for the sweeper without an entry per payment.
--
-- payments_outbox gains return_url and next_action (rendered as the API
-- renders them: next_action only while requires_action), as events carry
-- exactly the API's objects. Down restores 00023's function, the
-- constraints and drops the columns (a requires_action payment must not
-- be left: down refuses then, by the constraint).

-- +goose Up
ALTER TABLE payments
    ADD COLUMN return_url text,
    ADD COLUMN next_action_url text,
    ADD COLUMN action_expires_at timestamptz,
    ADD COLUMN request_three_ds boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT payments_status_check,
    ADD CONSTRAINT payments_status_check CHECK (status IN
        ('pending', 'requires_action', 'authorized', 'failed', 'captured', 'canceled', 'expired', 'partially_refunded',
         'refunded'));

ALTER TABLE payment_attempts
    DROP CONSTRAINT payment_attempts_outcome_check,
    ADD CONSTRAINT payment_attempts_outcome_check CHECK (outcome IN
        ('authorized', 'requires_action', 'declined', 'rejected', 'not_executed', 'unknown'));

CREATE INDEX payments_requires_action_idx ON payments (action_expires_at) WHERE status = 'requires_action';

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

DROP INDEX payments_requires_action_idx;

ALTER TABLE payment_attempts
    DROP CONSTRAINT payment_attempts_outcome_check,
    ADD CONSTRAINT payment_attempts_outcome_check CHECK (outcome IN
        ('authorized', 'declined', 'rejected', 'not_executed', 'unknown'));

ALTER TABLE payments
    DROP CONSTRAINT payments_status_check,
    ADD CONSTRAINT payments_status_check CHECK (status IN
        ('pending', 'authorized', 'failed', 'captured', 'canceled', 'expired', 'partially_refunded', 'refunded')),
    DROP COLUMN return_url,
    DROP COLUMN next_action_url,
    DROP COLUMN action_expires_at,
    DROP COLUMN request_three_ds;
