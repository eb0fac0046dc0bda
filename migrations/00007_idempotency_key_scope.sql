-- Idempotency keys of staff are scoped to the staff API key that sent them.
--
-- Staff (finance, admin, support) have no tenant: their keys live under
-- tenant 0. Without more, every staff API key shared that one scope, so an
-- admin reusing a key a finance analyst had used got the analyst's answer
-- replayed (nothing executed for the admin) or a 409 naming the analyst's
-- fields. scope narrows a key to whoever sent it:
--
--   ''            a tenant's keys: every API key of the tenant shares them
--                 (the SPEC's (tenant, operation, key)), so a merchant
--                 rotating its API key mid-retry still gets its answer;
--   the key's id  (key_…) for staff: one staff API key never sees another's
--                 stored answer, nor a 409 for another's body.
--
-- scope goes last in the primary key: tenant_id stays first (SPEC: Scale),
-- and the statements that address a key by (tenant_id, operation, key) and
-- its lease token still use the index.

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN scope text NOT NULL DEFAULT '';

-- Whose the staff keys written so far were is not recorded. They are parked
-- under a scope no API key id can match, answer nobody and are purged when
-- they expire; a staff request retried across this upgrade executes again
-- (a new run version, or a 409 conflict for a resolved discrepancy).
UPDATE idempotency_keys SET scope = 'unscoped' WHERE tenant_id = 0;

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, operation, key, scope),
    ADD CONSTRAINT idempotency_keys_scope_check CHECK ((tenant_id = 0) = (scope <> ''));

-- +goose Down
-- Staff keys cannot share one scope again without colliding: drop them.
DELETE FROM idempotency_keys WHERE scope <> '';
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_scope_check,
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, operation, key);
ALTER TABLE idempotency_keys DROP COLUMN scope;
