-- Events for merchants (issue #15), first slice: the outbox.
--
-- Every state change of a payment, and every new attempt of one, writes
-- one row of events in the same transaction as the change: the trigger
-- below fires on the payment_events row that records the change, which
-- every statement changing a payment's state writes. So no event is
-- written for a change that rolled back, and none is missing for one that
-- committed; delivery (the next slice) reads the events from here, at
-- least once.
--
-- sequence numbers a payment's events from 1 in the order of its changes.
-- Every writer of a state change (and of a new attempt) holds the payment's
-- row lock while it writes (it updated or inserted the row in the same
-- statement or transaction), so the next number is read safely under that
-- lock; the unique constraint would refuse a second writer anyway.
--
-- object is the payment as the change left it, in the API's shape
-- (orchestrator.Payment; TestEventSnapshotIsThePayment checks they agree).

-- +goose Up
CREATE TABLE events (
    id         text        NOT NULL,
    tenant_id  bigint      NOT NULL,
    type       text        NOT NULL,
    payment_id text        NOT NULL,
    sequence   integer     NOT NULL,
    object     jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (id),
    CONSTRAINT events_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    CONSTRAINT events_sequence_key UNIQUE (tenant_id, payment_id, sequence),
    CONSTRAINT events_sequence_check CHECK (sequence > 0)
);

-- The events API lists a tenant's events newest first.
CREATE INDEX events_tenant_created_idx ON events (tenant_id, created_at DESC, id DESC);

-- +goose StatementBegin
CREATE FUNCTION payment_events_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    next_seq integer;
    snapshot jsonb;
BEGIN
    SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
    FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.payment_id;
    SELECT jsonb_build_object(
        'id', p.id, 'object', 'payment', 'tenant_id', p.tenant_id, 'status', p.status,
        'amount_minor', p.amount_minor, 'currency', p.currency, 'captured_minor', p.captured_minor,
        'refunded_minor', p.refunded_minor, 'provider', p.provider, 'provider_ref', p.provider_ref,
        'payment_method', p.payment_method, 'idempotency_key', p.idempotency_key,
        'description', p.description, 'metadata', p.metadata, 'failure_code', p.failure_code,
        'capture_before', to_char(p.capture_before AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'created_at', to_char(p.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'updated_at', to_char(p.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'routing_version', p.routing_version, 'attempt', p.attempt)
    INTO snapshot
    FROM payments p WHERE p.tenant_id = NEW.tenant_id AND p.id = NEW.payment_id;
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES ('evt_' || replace(gen_random_uuid()::text, '-', ''), NEW.tenant_id,
        CASE NEW.type WHEN 'attempt_started' THEN 'payment.attempt_started' ELSE 'payment.' || NEW.to_status END,
        NEW.payment_id, next_seq, snapshot, NEW.created_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER payment_events_outbox
    AFTER INSERT ON payment_events
    FOR EACH ROW WHEN (NEW.type IN ('state_changed', 'attempt_started'))
    EXECUTE FUNCTION payment_events_outbox();

-- +goose Down
DROP TRIGGER payment_events_outbox ON payment_events;
DROP FUNCTION payment_events_outbox();
DROP TABLE events;
