-- Provider webhooks in (issue #16): every event a provider sends to
-- POST /webhooks/{connector} that passes its signature check, stored raw
-- and deduplicated, and the disputes they report.
--
-- provider_webhook_events: one row per (connector, provider event id),
-- inserted first, ON CONFLICT DO NOTHING, in the transaction that applies
-- the event (orchestrator/inbound.go): a duplicate delivery, however many
-- instances receive it at once, finds the row and changes nothing.
-- outcome says what applying it did:
--   applied         it changed a payment (state, an operation settled, a
--                   refund or dispute recorded);
--   ignored_stale   it says what the payment already knows, or a state
--                   older than the payment's: nothing changed;
--   unknown_object  no payment of this connector holds its reference; the
--                   next reconciliation of the connector reports it as
--                   missing_locally (reconcile/webhook.go);
--   recorded        stored, nothing to change (an event payorch does not
--                   act on, or one left to the resolver's lookup).
-- It is not a tenant-owned table: the tenant is learnt from the payment,
-- when the event names one of ours.
--
-- payment_disputes: the disputes of a payment (a payment is "disputed"
-- while it has one; GET /v1/payments/{id}/events shows each as a
-- provider_event). Each new dispute writes the outbound event
-- payment.disputed (its object the dispute) through the outbox, like
-- every other change.

-- +goose Up
CREATE TABLE provider_webhook_events (
    connector         text        NOT NULL,
    provider_event_id text        NOT NULL,
    type              text        NOT NULL,
    kind              text        NOT NULL,
    -- The provider's reference of the hold it is about (payments.provider_ref),
    -- and its own object (a refund's or dispute's id, else the hold's).
    hold_ref          text        NOT NULL DEFAULT '',
    object_id         text        NOT NULL DEFAULT '',
    -- The body exactly as received (the signature covers these bytes).
    raw               bytea       NOT NULL,
    received_at       timestamptz NOT NULL,
    provider_created_at timestamptz,
    outcome           text        NOT NULL,
    tenant_id         bigint,
    payment_id        text,
    CONSTRAINT provider_webhook_events_pkey PRIMARY KEY (connector, provider_event_id),
    CONSTRAINT provider_webhook_events_outcome_check CHECK (outcome IN ('applied', 'ignored_stale', 'unknown_object', 'recorded'))
);

-- Reconciliation reads a connector's unknown objects of a day.
CREATE INDEX provider_webhook_events_unknown_idx ON provider_webhook_events (connector, received_at)
    WHERE outcome = 'unknown_object';
-- An event about a hold no payment holds now may be about an earlier
-- attempt's (orchestrator/inbound.go, reconcile/webhook.go).
CREATE INDEX payment_attempts_connector_provider_ref_idx ON payment_attempts (connector, provider_ref)
    WHERE provider_ref IS NOT NULL;
CREATE INDEX provider_webhook_events_payment_idx ON provider_webhook_events (tenant_id, payment_id)
    WHERE payment_id IS NOT NULL;

CREATE TABLE payment_disputes (
    tenant_id         bigint      NOT NULL,
    id                text        NOT NULL,
    payment_id        text        NOT NULL,
    connector         text        NOT NULL,
    provider_ref      text        NOT NULL,
    amount_minor      bigint      NOT NULL,
    currency          text        NOT NULL,
    reason            text        NOT NULL DEFAULT '',
    provider_event_id text        NOT NULL,
    created_at        timestamptz NOT NULL,
    CONSTRAINT payment_disputes_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT payment_disputes_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    CONSTRAINT payment_disputes_provider_ref_key UNIQUE (tenant_id, connector, provider_ref),
    CONSTRAINT payment_disputes_amount_minor_check CHECK (amount_minor >= 0)
);

CREATE INDEX payment_disputes_payment_idx ON payment_disputes (tenant_id, payment_id);

-- A payment's timeline shows each provider event that names it.
ALTER TABLE payment_events
    DROP CONSTRAINT payment_events_type_check,
    ADD CONSTRAINT payment_events_type_check
        CHECK (type IN ('state_changed', 'provider_call', 'request', 'attempt_started', 'provider_event'));

-- +goose StatementBegin
CREATE FUNCTION payment_disputes_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id text := 'evt_' || replace(gen_random_uuid()::text, '-', '');
BEGIN
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NEW.tenant_id, 'payment.disputed', NEW.payment_id, NULL, jsonb_build_object(
        'id', NEW.id, 'object', 'dispute', 'payment_id', NEW.payment_id, 'connector', NEW.connector,
        'provider_ref', NEW.provider_ref, 'amount_minor', NEW.amount_minor, 'currency', NEW.currency,
        'reason', NEW.reason, 'created_at', NEW.created_at), NEW.created_at);
    PERFORM webhook_fan_out(event_id, NEW.tenant_id, 'payment.disputed', NEW.created_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER payment_disputes_outbox
    AFTER INSERT ON payment_disputes
    FOR EACH ROW EXECUTE FUNCTION payment_disputes_outbox();

-- +goose Down
DROP TRIGGER payment_disputes_outbox ON payment_disputes;
DROP FUNCTION payment_disputes_outbox();
-- payment_events keeps its provider_event rows (it is append-only) and so
-- the wider type check.
DROP TABLE payment_disputes;
DROP INDEX payment_attempts_connector_provider_ref_idx;
DROP TABLE provider_webhook_events;
