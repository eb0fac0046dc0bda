-- Webhook deliveries leased, not locked, while they are sent; and a
-- breaker per endpoint (orchestrator/webhookworker.go explains the
-- argument).
--
-- A delivery pass used to lock its deliveries (FOR UPDATE) in one
-- transaction kept open while it sent them and recorded every attempt at
-- its commit: an endpoint that never answered kept the transaction open
-- past the pass's timeout, it rolled back, and nothing was recorded for
-- anyone. Now a short transaction claims due deliveries by leasing them
-- (leased_until, next_attempt_at pushed to the same time), the sends run
-- with no transaction open, and each attempt is recorded by a short
-- transaction that applies only while the lease it was sent under is
-- still the delivery's. A crashed instance's deliveries are due again when
-- their leases end.
--
-- The leases in force are also how every instance counts what is in
-- flight to an endpoint, for the per-endpoint cap: the partial index
-- below holds only leased deliveries, a handful at any time.
--
-- webhook_deliveries_endpoint_pending_idx (endpoint_id) becomes
-- (endpoint_id, next_attempt_at): a claim takes each endpoint's oldest due
-- deliveries from it, and the give-up of a disabled endpoint's deliveries
-- still reads it by endpoint_id. webhook_deliveries_due_idx
-- (next_attempt_at) goes: claims no longer take the oldest due deliveries
-- of all endpoints together, and nothing else reads it. Every delivery
-- written (webhook_fan_out, on the money path) and every claim maintain
-- one index fewer.
--
-- The breaker of an endpoint: consecutive_timeouts counts its attempts in
-- a row that got no answer (timed out, or failed to connect); at
-- orchestrator's trip count it opens: its deliveries wait until
-- paused_until, then one probe goes. breaker_opens counts the opens since
-- it last answered; each pause is twice the last, up to a bound. Any
-- answer closes it.

-- +goose Up
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;
CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (endpoint_id, leased_until)
    WHERE status = 'pending' AND leased_until IS NOT NULL;
CREATE INDEX webhook_deliveries_endpoint_due_idx ON webhook_deliveries (endpoint_id, next_attempt_at)
    WHERE status = 'pending';
DROP INDEX webhook_deliveries_endpoint_pending_idx;
DROP INDEX webhook_deliveries_due_idx;

ALTER TABLE webhook_endpoints
    ADD COLUMN consecutive_timeouts integer NOT NULL DEFAULT 0,
    ADD COLUMN breaker_opens integer NOT NULL DEFAULT 0,
    ADD COLUMN paused_until timestamptz;

-- +goose Down
ALTER TABLE webhook_endpoints
    DROP COLUMN paused_until,
    DROP COLUMN breaker_opens,
    DROP COLUMN consecutive_timeouts;
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_pending_idx ON webhook_deliveries (endpoint_id) WHERE status = 'pending';
DROP INDEX webhook_deliveries_endpoint_due_idx;
DROP INDEX webhook_deliveries_leased_idx;
ALTER TABLE webhook_deliveries DROP COLUMN leased_until;
