-- payorch's vault: cards tokenized once, which every connector can charge
-- (orchestrator/vault). Two tables, so that a card's ciphertexts and the
-- key that opens them never sit in the same row:
--
-- * payment_methods: what may be shown (brand, last4, expiry, the
--   fingerprint, billing details, metadata) and the ciphertexts:
--   card_ciphertext (number and holder name) and cvc_ciphertext, each
--   AES-256-GCM under the method's own data key, with the tenant, the
--   method's id and the field ("number", "cvc") as associated data, so a
--   ciphertext copied to another row or column does not decrypt. Neither
--   holds anything in the clear; the fingerprint is an HMAC under a key
--   of its own, per tenant (no way back to the number).
-- * payment_method_keys: the method's data key, wrapped (AES-256-GCM) by
--   the key-encryption key of version kek_version, which lives only in
--   the configuration (PAYORCH_VAULT_KEYS), never in the database.
--   `payorch vault rotate` re-wraps these under the newest version,
--   without touching a ciphertext.
--
-- A copy of payment_methods alone decrypts nothing: its data keys are in
-- the other table. A copy of both decrypts nothing without the
-- key-encryption keys.
--
-- DELETE of a method removes its payment_method_keys row and nulls both
-- ciphertexts (deleted_at says when; the row stays so that GET answers
-- for it). What that does and does not erase, honestly:
-- * Through the database, the card is gone at once: no key, no
--   ciphertext, for any reader of this and every later snapshot.
-- * The bytes of the old row versions stay in the table's and the keys
--   table's files until VACUUM reclaims them and later writes overwrite
--   the space, and in the WAL (and its archive) until they are recycled.
-- * A backup (pg_dump, base backup, WAL archive, disk snapshot) of the
--   whole database taken before the DELETE still holds the wrapped data
--   key and the ciphertexts: together with the key-encryption key that
--   wrapped it, it still decrypts the card. Deletion becomes final for
--   such backups only once that key-encryption key is destroyed: rotate
--   to a new version (`payorch vault rotate`), then remove the old one
--   from PAYORCH_VAULT_KEYS and from wherever else it is kept.
--
-- The CVC is kept, encrypted, only until cvc_expires_at (an hour after
-- creation by default) or the first authorization that used it, whichever
-- is first; the vault's sweeper nulls it past that time, found through
-- payment_methods_cvc_expires_at_idx (only rows still holding one).
--
-- Down drops both tables: the cards stored are lost with them (the code
-- before this version has no vault).

-- +goose Up
CREATE TABLE payment_methods (
    tenant_id          bigint      NOT NULL,
    id                 text        NOT NULL,
    idempotency_key    text        NOT NULL,
    request_hash       bytea       NOT NULL,
    type               text        NOT NULL,
    brand              text        NOT NULL,
    last4              text        NOT NULL,
    exp_month          smallint    NOT NULL,
    exp_year           smallint    NOT NULL,
    funding            text,
    fingerprint        text        NOT NULL,
    billing_details    jsonb,
    metadata           jsonb       NOT NULL DEFAULT '{}',
    card_ciphertext    bytea,
    cvc_ciphertext     bytea,
    cvc_expires_at     timestamptz,
    publishable_key_id text,
    decline_count      integer     NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    deleted_at         timestamptz,
    CONSTRAINT payment_methods_pkey PRIMARY KEY (tenant_id, id),
    CONSTRAINT payment_methods_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT payment_methods_id_check CHECK (id ~ '^vpm_[0-9a-f]{32}$'),
    CONSTRAINT payment_methods_type_check CHECK (type IN ('card')),
    CONSTRAINT payment_methods_last4_check CHECK (last4 ~ '^[0-9]{4}$'),
    CONSTRAINT payment_methods_exp_month_check CHECK (exp_month BETWEEN 1 AND 12),
    CONSTRAINT payment_methods_exp_year_check CHECK (exp_year BETWEEN 1000 AND 9999),
    CONSTRAINT payment_methods_decline_count_check CHECK (decline_count >= 0),
    -- A live method has its card; a deleted one has nothing left to decrypt.
    CONSTRAINT payment_methods_card_check CHECK ((deleted_at IS NULL) = (card_ciphertext IS NOT NULL)),
    CONSTRAINT payment_methods_cvc_check CHECK (
        cvc_ciphertext IS NULL OR (cvc_expires_at IS NOT NULL AND deleted_at IS NULL))
);

-- The list, newest first, and the list by fingerprint (duplicates of a card).
CREATE INDEX payment_methods_tenant_id_created_at_idx ON payment_methods (tenant_id, created_at DESC, id DESC);
CREATE INDEX payment_methods_fingerprint_idx ON payment_methods (tenant_id, fingerprint, created_at DESC, id DESC);
-- The CVC sweeper's pick.
CREATE INDEX payment_methods_cvc_expires_at_idx ON payment_methods (cvc_expires_at) WHERE cvc_ciphertext IS NOT NULL;

CREATE TABLE payment_method_keys (
    tenant_id         bigint  NOT NULL,
    payment_method_id text    NOT NULL,
    kek_version       integer NOT NULL,
    wrapped_key       bytea   NOT NULL,
    CONSTRAINT payment_method_keys_pkey PRIMARY KEY (tenant_id, payment_method_id),
    CONSTRAINT payment_method_keys_payment_method_fkey FOREIGN KEY (tenant_id, payment_method_id)
        REFERENCES payment_methods (tenant_id, id) ON DELETE CASCADE,
    CONSTRAINT payment_method_keys_kek_version_check CHECK (kek_version > 0)
);

-- +goose Down
DROP TABLE payment_method_keys;
DROP TABLE payment_methods;
