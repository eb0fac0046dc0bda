-- +goose Up
-- The life of a hold (issue #16, SPEC: Hold lifecycle): what to do when it
-- is about to lapse, the one warning before it lapses, and the hold
-- sweeper's bookkeeping.
ALTER TABLE payments
    -- on_expiry is chosen at authorize: capture or cancel the hold once,
    -- shortly before capture_before, or leave it to lapse (none).
    ADD COLUMN on_expiry text NOT NULL DEFAULT 'none'
        CONSTRAINT payments_on_expiry_check CHECK (on_expiry IN ('none', 'capture', 'cancel')),
    -- extended_authorization: the authorize asked the provider for its
    -- longest hold (Stripe's request_extended_authorization).
    ADD COLUMN extended_authorization boolean NOT NULL DEFAULT false,
    -- hold_expiring_at: when payment.hold_expiring was announced; set once.
    ADD COLUMN hold_expiring_at timestamptz,
    -- hold_next_check_at: the hold sweeper does not pick the payment again
    -- before it (the sweeper stamps it when it picks, like next_resolve_at
    -- for the resolver), so instances share the work without doing a
    -- payment twice at once.
    ADD COLUMN hold_next_check_at timestamptz;

-- The hold sweeper's candidates: authorized payments by deadline.
CREATE INDEX payments_authorized_capture_before_idx ON payments (capture_before) WHERE status = 'authorized';

-- History: the hold's own events (a warning sent, the deadline moved, the
-- on_expiry action started), between the state changes.
ALTER TABLE payment_events
    DROP CONSTRAINT payment_events_type_check,
    ADD CONSTRAINT payment_events_type_check CHECK (type IN ('state_changed', 'provider_call', 'request', 'attempt_started',
        'provider_event', 'hold'));

-- The outbox: payment.hold_expiring when the warning is stamped, and
-- payment.hold_extended when an authorized hold's deadline moves later
-- (POST /v1/payments/{id}/extend, or the provider's word found by the
-- sweeper); the snapshot carries on_expiry.
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

DROP TRIGGER payments_outbox_changed ON payments;
CREATE TRIGGER payments_outbox_changed
    AFTER UPDATE OF status, attempt, hold_expiring_at, capture_before ON payments
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt
        OR (OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL)
        OR (NEW.status = 'authorized' AND OLD.status = 'authorized' AND NEW.capture_before > OLD.capture_before))
    EXECUTE FUNCTION payments_outbox();

-- +goose Down
DROP TRIGGER payments_outbox_changed ON payments;
CREATE TRIGGER payments_outbox_changed
    AFTER UPDATE OF status, attempt ON payments
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt)
    EXECUTE FUNCTION payments_outbox();
DELETE FROM payment_events WHERE type = 'hold';
ALTER TABLE payment_events
    DROP CONSTRAINT payment_events_type_check,
    ADD CONSTRAINT payment_events_type_check CHECK (type IN ('state_changed', 'provider_call', 'request', 'attempt_started',
        'provider_event'));
DROP INDEX payments_authorized_capture_before_idx;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
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
ALTER TABLE payments
    DROP COLUMN hold_next_check_at,
    DROP COLUMN hold_expiring_at,
    DROP COLUMN extended_authorization,
    DROP COLUMN on_expiry;
