-- Indexes of payments that earn their keep, and room for HOT updates
-- (issue #17). Every index of payments costs each new authorization an
-- index entry per row version it writes: one for the INSERT, and one for
-- each of its two UPDATEs (saving the provider's reference, settling),
-- neither of which can be HOT (see below): 30 entries with ten indexes, 24
-- with eight. Two of the ten were covered by others:
--
-- * payments_tenant_id_idempotency_key_key, UNIQUE (tenant_id,
--   idempotency_key): a payment's id is derived from its tenant and key
--   (orchestrator.PaymentID, the only way payments are created, ON
--   CONFLICT on the primary key), so the primary key (tenant_id, id)
--   already allows one payment per tenant and key. Reads by key
--   (PaymentsByKey, staff across tenants too) use
--   payments_idempotency_key_idx.
-- * payments_provider_ref_idx (provider_ref) next to the unique
--   (tenant_id, provider, provider_ref): both are replaced by one unique
--   index on the same columns led by (provider, provider_ref), which
--   enforces the same uniqueness (the order of columns does not change
--   which rows are equal) and serves reconciliation's match by reference
--   (provider = $2 AND provider_ref = ref, reconcile.linkByRefSQL), which
--   knows no tenant.
--
-- What stays, and who reads it: payments_pkey (every read and write of
-- one payment); payments_id_idx (GET /v1/payments/{id} by id alone, staff
-- across tenants; reconciliation's match by our payment id);
-- payments_idempotency_key_idx (payments by key); payments_tenant_id_
-- created_at_idx (the list, newest first); payments_pending_idx (the
-- resolver's pick and the pending gauges); payments_provider_created_at_idx
-- and payments_provider_updated_at_idx (reconciliation's window).
--
-- No fillfactor on payments: it would let an UPDATE be HOT (heap-only: a
-- new row version on the same page, no index entry) only if it changed no
-- indexed column, and none of the hot path's can. Saving the reference
-- changes provider_ref (indexed: the match by reference above); settling
-- changes status (in payments_pending_idx's predicate, and PostgreSQL 15
-- counts predicate columns as indexed) and updated_at (in
-- payments_provider_updated_at_idx). Free space kept in every page would
-- only make reconciliation read more pages.
--
-- The UPDATEs an authorization makes of idempotency_keys (its recovery
-- point, then its completion with the stored answer, which makes the row
-- grow by the answer's size) change no indexed column: they are HOT when
-- the page has room. A fillfactor leaves that room: without it about 88%
-- of them were HOT, with 80 over 99% (TestAuthorizeUpdatesAreHOT). It
-- applies to pages written from now on. payment_attempts' update (its
-- outcome and provider reference) cannot be HOT since migration 00010
-- indexes (connector, provider_ref), which provider webhooks about an
-- earlier attempt's hold need.
--
-- The index is built in the migration's transaction, which blocks writes
-- to payments while it builds (seconds per million payments).

-- +goose Up
CREATE UNIQUE INDEX payments_provider_ref_key ON payments (provider, provider_ref, tenant_id);
ALTER TABLE payments DROP CONSTRAINT payments_tenant_id_idempotency_key_key;
DROP INDEX payments_tenant_id_provider_ref_key;
DROP INDEX payments_provider_ref_idx;
ALTER TABLE idempotency_keys SET (fillfactor = 80);

-- +goose Down
ALTER TABLE idempotency_keys RESET (fillfactor);
CREATE INDEX payments_provider_ref_idx ON payments (provider_ref);
CREATE UNIQUE INDEX payments_tenant_id_provider_ref_key ON payments (tenant_id, provider, provider_ref);
ALTER TABLE payments ADD CONSTRAINT payments_tenant_id_idempotency_key_key UNIQUE (tenant_id, idempotency_key);
DROP INDEX payments_provider_ref_key;
