-- Web console sessions. The browser holds a random token in an HttpOnly
-- cookie; only its SHA-256 is kept here. Sessions expire, are revoked on
-- sign-out, and end when their API key is revoked (the lookup joins
-- api_keys). The API key itself is never stored.

-- +goose Up
CREATE TABLE console_sessions (
    id_hash     bytea       NOT NULL,
    api_key_id  text        NOT NULL,
    role        text        NOT NULL,
    tenant_id   bigint,
    csrf_token  text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    revoked     boolean     NOT NULL DEFAULT false,
    CONSTRAINT console_sessions_pkey PRIMARY KEY (id_hash),
    CONSTRAINT console_sessions_api_key_id_fkey FOREIGN KEY (api_key_id) REFERENCES api_keys (id) ON DELETE CASCADE,
    CONSTRAINT console_sessions_role_check CHECK (role IN ('merchant', 'support', 'finance', 'admin')),
    CONSTRAINT console_sessions_id_hash_check CHECK (octet_length(id_hash) = 32),
    CONSTRAINT console_sessions_expiry_check CHECK (expires_at > created_at)
);

-- Purging expired sessions.
CREATE INDEX console_sessions_expires_at_idx ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
