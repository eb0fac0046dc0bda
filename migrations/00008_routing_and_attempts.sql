-- Routing across connectors, and the attempts of a payment (issue #14).
--
-- A connector is a named, configured instance of a provider adapter
-- (fake_a, fake_b, stripe): payments.provider and payment_attempts.connector
-- hold its name.
--
-- routing_versions: a tenant's routing rules, one row per change. The
-- active rules are the tenant's highest version; nothing is updated in
-- place, so every payment's routing_version names the rules that routed
-- it, for as long as the payment is kept.
--
-- payments.route: the connectors chosen for the payment when it was
-- created, in order (the routing decision, fixed once: a retry, a resumed
-- request and the resolver all follow the same list). payments.attempt:
-- the attempt now holding the payment, on the connector in
-- payments.provider.
--
-- payment_attempts: one row per attempt (a connector and its own forwarded
-- key), written when the attempt starts and updated with its last outcome.
-- dispatched counts the provider calls made (or about to be made) with the
-- attempt's key, each counted before it is sent; not_executed counts those
-- that certainly did not execute. The next attempt may start only while
-- the two are equal: every call of this attempt certainly moved no money
-- (see orchestrator/cascade.go).
-- A payment's history records each new attempt as an attempt_started event.

-- +goose Up
CREATE TABLE routing_versions (
    tenant_id  bigint      NOT NULL,
    version    integer     NOT NULL,
    rules      jsonb       NOT NULL,
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT routing_versions_pkey PRIMARY KEY (tenant_id, version),
    CONSTRAINT routing_versions_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT routing_versions_version_check CHECK (version > 0)
);

-- +goose StatementBegin
CREATE FUNCTION routing_versions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'routing_versions is append-only';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER routing_versions_append_only
    BEFORE UPDATE OR DELETE ON routing_versions
    FOR EACH ROW EXECUTE FUNCTION routing_versions_append_only();

-- Instances cache the active rules; a new version tells them to read again.
-- +goose StatementBegin
CREATE FUNCTION routing_versions_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('payorch_routing', NEW.tenant_id::text);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER routing_versions_notify
    AFTER INSERT ON routing_versions
    FOR EACH ROW EXECUTE FUNCTION routing_versions_notify();

ALTER TABLE payments
    ADD COLUMN routing_version integer,
    ADD COLUMN route text[] NOT NULL DEFAULT '{}',
    ADD COLUMN attempt smallint NOT NULL DEFAULT 1,
    ADD CONSTRAINT payments_attempt_check CHECK (attempt BETWEEN 1 AND 10);

CREATE TABLE payment_attempts (
    tenant_id     bigint           NOT NULL,
    payment_id    text             NOT NULL,
    attempt       smallint         NOT NULL,
    connector     text             NOT NULL,
    forwarded_key text             NOT NULL,
    -- outcome of the attempt's last provider call: NULL while none has
    -- answered; authorized, declined, rejected (final at the connector),
    -- not_executed, unknown (providers.Kind).
    outcome       text,
    code          text,
    provider_ref  text,
    latency_ms    double precision,
    dispatched    integer          NOT NULL DEFAULT 1,
    not_executed  integer          NOT NULL DEFAULT 0,
    started_at    timestamptz      NOT NULL,
    ended_at      timestamptz,
    CONSTRAINT payment_attempts_pkey PRIMARY KEY (tenant_id, payment_id, attempt),
    CONSTRAINT payment_attempts_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    CONSTRAINT payment_attempts_attempt_check CHECK (attempt BETWEEN 1 AND 10),
    CONSTRAINT payment_attempts_outcome_check CHECK (outcome IN ('authorized', 'declined', 'rejected', 'not_executed', 'unknown')),
    CONSTRAINT payment_attempts_calls_check CHECK (not_executed BETWEEN 0 AND dispatched)
);

ALTER TABLE payment_events
    DROP CONSTRAINT payment_events_type_check,
    ADD CONSTRAINT payment_events_type_check CHECK (type IN ('state_changed', 'provider_call', 'request', 'attempt_started'));

-- The console's connector charts read the last 24 hours by connector.
CREATE INDEX payment_attempts_connector_started_at_idx ON payment_attempts (connector, started_at);

-- Reconciliation of a connector matches the holds of a payment's earlier
-- attempts there too (reconcile/attempts.go): a declined or never
-- confirmed one is expected, a live one is a second hold.
ALTER TABLE reconciliation_provider_rows ADD COLUMN abandoned_attempt smallint;

-- Attempts of payments made before this migration: the one attempt each had.
INSERT INTO payment_attempts (tenant_id, payment_id, attempt, connector, forwarded_key, outcome, code, provider_ref,
    started_at, ended_at)
SELECT tenant_id, id, 1, provider,
    -- providers.ForwardedKey(tenant_id, 'POST /v1/payments', idempotency_key)
    'po_' || encode(sha256(convert_to(tenant_id::text, 'UTF8') || '\x00'::bytea || convert_to('POST /v1/payments', 'UTF8')
        || '\x00'::bytea || convert_to(idempotency_key, 'UTF8')), 'hex'),
    CASE status WHEN 'pending' THEN NULL WHEN 'failed' THEN 'declined' ELSE 'authorized' END,
    failure_code, provider_ref, created_at, CASE WHEN status <> 'pending' THEN updated_at END
FROM payments;
UPDATE payments SET route = ARRAY[provider];

-- +goose Down
ALTER TABLE reconciliation_provider_rows DROP COLUMN abandoned_attempt;
DROP TABLE payment_attempts;
-- payment_events keeps its attempt_started events (it is append-only) and
-- so the wider type check.
ALTER TABLE payments DROP COLUMN routing_version, DROP COLUMN route, DROP COLUMN attempt;
DROP TABLE routing_versions;
DROP FUNCTION routing_versions_notify();
DROP FUNCTION routing_versions_append_only();
