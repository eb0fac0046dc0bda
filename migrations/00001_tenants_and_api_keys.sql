-- Tenants (merchants) and the API keys that act for them or for staff.

-- +goose Up
CREATE TABLE tenants (
    id         bigint GENERATED ALWAYS AS IDENTITY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenants_pkey PRIMARY KEY (id),
    CONSTRAINT tenants_name_key UNIQUE (name),
    CONSTRAINT tenants_name_check CHECK (char_length(name) BETWEEN 1 AND 200 AND name = btrim(name))
);

-- An API key is shown once; only the SHA-256 of the whole key is kept. The
-- id is the public part embedded in the key, so verification is one
-- primary-key read and one constant-time comparison.
CREATE TABLE api_keys (
    id           text        NOT NULL,
    tenant_id    bigint,
    role         text        NOT NULL,
    secret_hash  bytea       NOT NULL,
    description  text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT api_keys_pkey PRIMARY KEY (id),
    CONSTRAINT api_keys_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT api_keys_role_check CHECK (role IN ('merchant', 'support', 'finance', 'admin')),
    CONSTRAINT api_keys_merchant_tenant_check CHECK ((role = 'merchant') = (tenant_id IS NOT NULL)),
    CONSTRAINT api_keys_secret_hash_check CHECK (octet_length(secret_hash) = 32),
    CONSTRAINT api_keys_description_check CHECK (char_length(description) <= 200)
);

CREATE INDEX api_keys_tenant_id_idx ON api_keys (tenant_id);

-- +goose Down
DROP TABLE api_keys;
DROP TABLE tenants;
