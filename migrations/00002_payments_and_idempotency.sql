-- Payments, their operations and history, and the idempotency keys that make
-- every POST safe to retry. Tenant-owned tables lead every primary and
-- unique key with tenant_id, so the schema can be distributed by tenant.

-- +goose Up
CREATE TABLE idempotency_keys (
    tenant_id        bigint      NOT NULL,
    operation        text        NOT NULL,
    key              text        NOT NULL,
    request_hash     bytea       NOT NULL,
    field_hashes     jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'in_progress',
    -- The lease: the owner's token and how long it holds the key. A new
    -- owner takes over an expired or released lease by compare-and-swap on
    -- lock_token.
    lock_token       uuid,
    locked_until     timestamptz,
    recovery_point   text        NOT NULL DEFAULT 'started',
    takeovers        integer     NOT NULL DEFAULT 0,
    payment_id       text,
    response_status  integer,
    response_headers jsonb,
    response_body    bytea,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, operation, key),
    CONSTRAINT idempotency_keys_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT idempotency_keys_status_check CHECK (status IN ('in_progress', 'completed')),
    CONSTRAINT idempotency_keys_key_check CHECK (char_length(key) BETWEEN 1 AND 255),
    CONSTRAINT idempotency_keys_completed_check CHECK (
        status <> 'completed' OR (response_status IS NOT NULL AND response_body IS NOT NULL))
);

CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

CREATE TABLE payments (
    tenant_id       bigint      NOT NULL,
    id              text        NOT NULL,
    idempotency_key text        NOT NULL,
    request_hash    bytea       NOT NULL,
    field_hashes    jsonb       NOT NULL,
    status          text        NOT NULL,
    amount_minor    bigint      NOT NULL,
    currency        text        NOT NULL,
    captured_minor  bigint      NOT NULL DEFAULT 0,
    refunded_minor  bigint      NOT NULL DEFAULT 0,
    provider        text        NOT NULL,
    provider_ref    text,
    payment_method  text        NOT NULL,
    description     text        NOT NULL DEFAULT '',
    metadata        jsonb       NOT NULL DEFAULT '{}',
    failure_code    text,
    capture_before  timestamptz,
    resolve_attempts integer    NOT NULL DEFAULT 0,
    next_resolve_at timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT payments_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT payments_tenant_id_idempotency_key_key UNIQUE (tenant_id, idempotency_key),
    CONSTRAINT payments_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT payments_status_check CHECK (status IN
        ('pending', 'authorized', 'failed', 'captured', 'canceled', 'expired', 'partially_refunded', 'refunded')),
    CONSTRAINT payments_amount_minor_check CHECK (amount_minor > 0),
    CONSTRAINT payments_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT payments_captured_minor_check CHECK (captured_minor BETWEEN 0 AND amount_minor),
    CONSTRAINT payments_refunded_minor_check CHECK (refunded_minor BETWEEN 0 AND captured_minor),
    CONSTRAINT payments_id_check CHECK (id ~ '^pay_[0-9a-f]{32}$')
);

CREATE INDEX payments_id_idx ON payments (id);
CREATE INDEX payments_idempotency_key_idx ON payments (idempotency_key);
CREATE INDEX payments_tenant_id_created_at_idx ON payments (tenant_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX payments_tenant_id_provider_ref_key ON payments (tenant_id, provider, provider_ref);
CREATE INDEX payments_pending_idx ON payments (next_resolve_at) WHERE status = 'pending';

-- A capture, cancel or refund of a payment: the business record of one money
-- movement, with a deterministic id from (tenant, operation, client key), so
-- a resumed request finds it and the resolver can settle it.
CREATE TABLE payment_operations (
    tenant_id        bigint      NOT NULL,
    id               text        NOT NULL,
    payment_id       text        NOT NULL,
    kind             text        NOT NULL,
    idempotency_key  text        NOT NULL,
    forwarded_key    text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending',
    amount_minor     bigint      NOT NULL,
    provider_ref     text,
    failure_code     text,
    resolve_attempts integer     NOT NULL DEFAULT 0,
    next_resolve_at  timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT payment_operations_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT payment_operations_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    CONSTRAINT payment_operations_kind_check CHECK (kind IN ('capture', 'cancel', 'refund')),
    CONSTRAINT payment_operations_status_check CHECK (status IN ('pending', 'succeeded', 'failed')),
    CONSTRAINT payment_operations_amount_minor_check CHECK (amount_minor >= 0)
);

-- One hold ends once: at most one capture or cancel that has not failed.
CREATE UNIQUE INDEX payment_operations_one_settlement_key ON payment_operations (tenant_id, payment_id)
    WHERE kind IN ('capture', 'cancel') AND status <> 'failed';
CREATE INDEX payment_operations_payment_idx ON payment_operations (tenant_id, payment_id);
CREATE INDEX payment_operations_pending_idx ON payment_operations (next_resolve_at) WHERE status = 'pending';

-- Append-only history of a payment: state changes, provider calls (with the
-- forwarded key, outcome and latency) and idempotent requests.
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
    created_at    timestamptz NOT NULL,
    CONSTRAINT payment_events_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT payment_events_payment_fkey FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, id),
    CONSTRAINT payment_events_type_check CHECK (type IN ('state_changed', 'provider_call', 'request'))
);

CREATE INDEX payment_events_payment_idx ON payment_events (tenant_id, payment_id, id);

-- +goose StatementBegin
CREATE FUNCTION payment_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'payment_events is append-only';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER payment_events_append_only BEFORE UPDATE OR DELETE ON payment_events
    FOR EACH ROW EXECUTE FUNCTION payment_events_append_only();

-- +goose Down
DROP TABLE payment_events;
DROP FUNCTION payment_events_append_only();
DROP TABLE payment_operations;
DROP TABLE payments;
DROP TABLE idempotency_keys;
