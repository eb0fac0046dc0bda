-- Events carry exactly the API's objects. An event's data is served (GET
-- /v1/events, webhooks) as its stored object decoded into the Go type the
-- API answers with and encoded by it (orchestrator/eventdata.go): the
-- formats are the API's by construction (times in UTC, "Z", as Go writes
-- them, where jsonb writes "+00:00"). The fields must be in the object,
-- though, and three writers left some out:
--
-- * payments_outbox: extended_authorization (00011 added the column, not
--   the key). One key more in the trigger that runs twice on every
--   authorize: the same statement, one more argument.
-- * reconciliation_runs_outbox: the run's summary lacked time_zone,
--   window_start, window_end, grace_seconds, requested_by, totals and
--   diff; it is the whole run now (reconcile.Run), as GET
--   /v1/reconciliation/runs/{id} answers it.
-- * the delivery worker's webhook_endpoint.disabled event (its statement,
--   orchestrator/webhookworker.go) lacks the endpoint's tenant_id,
--   created_at and updated_at. The trigger webhook_endpoints_disabled
--   below completes it at the end of that very statement, from the
--   endpoint's row, so the worker's statement stays as it is. It fires on
--   an endpoint's disabling only (rare), never on the payments' path.
--
-- Events stored before this migration: those of a payment created before
-- 00011 have no on_expiry nor extended_authorization key, and the
-- renderer gives them the columns' defaults ('none', false), which every
-- such payment has (both columns are written once, at authorize). Those
-- of 00011 to now lack extended_authorization: the payments that have it
-- true get the key here (the others are right with the default), found
-- through the payments that have it (few: Stripe's extended holds) and
-- the index events_payment_sequence_idx, with no pass over events.
-- Finished runs' events get the run's missing fields, from the run's row
-- (a finished run's row does not change), and disabled endpoints' events
-- their endpoint's; both are found through the staff and per-tenant
-- events that have no payment (payment_id IS NULL on the same index).
-- Down restores the trigger functions of 00017 and drops the new trigger;
-- the keys added to stored objects stay (they are the API's fields; the
-- code of before served objects as stored).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text;
    event_type text;
    event_at   timestamptz := NEW.updated_at;
    next_seq   integer := 1;
    first_id   text;
    last_id    text;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        event_type := 'payment.' || NEW.status;
    ELSIF NEW.attempt IS DISTINCT FROM OLD.attempt THEN
        event_type := 'payment.attempt_started';
    ELSIF OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL THEN
        -- A warning changes nothing of the payment (updated_at stays).
        event_type := 'payment.hold_expiring';
        event_at := NEW.hold_expiring_at;
    ELSE
        event_type := 'payment.hold_extended';
    END IF;
    event_id := event_id_at(event_at);
    -- A new payment's first event is number 1 (see the top of 00014).
    -- A payment's events are between its creation and now; the bounds on
    -- the id, a day wider each side for clocks of instances that
    -- disagree, keep the search to the partitions of those months.
    IF TG_OP <> 'INSERT' THEN
        first_id := event_id_floor(NEW.created_at - interval '1 day');
        last_id := event_id_floor(greatest(event_at, NEW.updated_at) + interval '1 day');
        SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
        FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.id AND id >= first_id AND id < last_id;
    END IF;
    -- The event and its deliveries in one statement (see 00014; keep
    -- alike with webhook_fan_out). The object has every field of
    -- orchestrator.Payment's JSON (TestEventsAreTheAPIObjects).
    WITH event AS (
        INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
        VALUES (event_id, NEW.tenant_id, event_type, NEW.id, next_seq, jsonb_build_object(
            'id', NEW.id, 'object', 'payment', 'tenant_id', NEW.tenant_id, 'status', NEW.status,
            'amount_minor', NEW.amount_minor, 'currency', NEW.currency, 'captured_minor', NEW.captured_minor,
            'refunded_minor', NEW.refunded_minor, 'provider', NEW.provider, 'provider_ref', NEW.provider_ref,
            'payment_method', NEW.payment_method, 'idempotency_key', NEW.idempotency_key,
            'description', NEW.description, 'metadata', NEW.metadata, 'failure_code', NEW.failure_code,
            'capture_before', NEW.capture_before, 'on_expiry', NEW.on_expiry,
            'extended_authorization', NEW.extended_authorization, 'created_at', NEW.created_at,
            'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt),
            event_at)
        RETURNING id
    )
    INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
    SELECT event.id, e.id, event_at, event_at
    FROM event, webhook_endpoints e
    WHERE e.tenant_id IS NOT DISTINCT FROM NEW.tenant_id AND e.enabled AND e.deleted_at IS NULL
        AND ('*' = ANY (e.event_types) OR event_type = ANY (e.event_types));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- CREATE OR REPLACE resets it: kept as 00017 set it.
ALTER FUNCTION payments_outbox() SET plan_cache_mode = force_generic_plan;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reconciliation_runs_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_at   timestamptz := coalesce(NEW.finished_at, now());
    event_id   text := event_id_at(event_at);
    event_type text := CASE NEW.status WHEN 'succeeded' THEN 'reconciliation.run.completed'
        ELSE 'reconciliation.run.failed' END;
BEGIN
    -- The run: every field of reconcile.Run's JSON (GET
    -- /v1/reconciliation/runs/{id}).
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NULL, event_type, NULL, NULL, jsonb_build_object(
        'id', NEW.id, 'object', 'reconciliation_run', 'provider', NEW.provider,
        'business_date', NEW.business_date::text, 'version', NEW.version, 'trigger', NEW.trigger,
        'status', NEW.status, 'time_zone', NEW.time_zone, 'window_start', NEW.window_start,
        'window_end', NEW.window_end, 'grace_seconds', NEW.grace_seconds, 'requested_by', NEW.requested_by,
        'started_at', NEW.started_at, 'finished_at', NEW.finished_at,
        'local_count', NEW.local_count, 'provider_count', NEW.provider_count, 'matched_count', NEW.matched_count,
        'discrepancy_count', NEW.discrepancy_count, 'totals', NEW.totals, 'category_counts', NEW.category_counts,
        'diff', NEW.diff, 'error', NEW.error),
        event_at);
    PERFORM webhook_fan_out(event_id, NULL, event_type, event_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- webhook_endpoints_disabled completes the webhook_endpoint.disabled
-- events of an endpoint that has just been disabled (written by the same
-- statement, whose end this AFTER trigger runs at) with the endpoint's
-- tenant_id, created_at and updated_at: with them the object is the
-- endpoint as GET /v1/webhook_endpoints/{id} answers it. The search goes
-- through the events without a payment of the endpoint's tenant (the
-- index on tenant_id, payment_id): its disabled events and, for a staff
-- endpoint, the reconciliation runs'. (Two statements: IS NOT DISTINCT
-- FROM would not use the index.)
CREATE FUNCTION webhook_endpoints_disabled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tenant_id IS NULL THEN
        UPDATE events SET object = object || jsonb_build_object('tenant_id', NEW.tenant_id,
            'created_at', NEW.created_at, 'updated_at', created_at)
        WHERE tenant_id IS NULL AND payment_id IS NULL
            AND type = 'webhook_endpoint.disabled' AND object->>'id' = NEW.id AND NOT object ? 'created_at';
    ELSE
        UPDATE events SET object = object || jsonb_build_object('tenant_id', NEW.tenant_id,
            'created_at', NEW.created_at, 'updated_at', created_at)
        WHERE tenant_id = NEW.tenant_id AND payment_id IS NULL
            AND type = 'webhook_endpoint.disabled' AND object->>'id' = NEW.id AND NOT object ? 'created_at';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER webhook_endpoints_disabled
    AFTER UPDATE OF enabled ON webhook_endpoints
    FOR EACH ROW WHEN (OLD.enabled AND NOT NEW.enabled)
    EXECUTE FUNCTION webhook_endpoints_disabled();

-- The events stored before (see the top).
UPDATE events e SET object = e.object || '{"extended_authorization": true}'
FROM payments p
WHERE p.extended_authorization AND e.tenant_id = p.tenant_id AND e.payment_id = p.id AND e.sequence IS NOT NULL
    AND NOT e.object ? 'extended_authorization';

UPDATE events e SET object = e.object || jsonb_build_object('time_zone', r.time_zone,
    'window_start', r.window_start, 'window_end', r.window_end, 'grace_seconds', r.grace_seconds,
    'requested_by', r.requested_by, 'totals', r.totals, 'diff', r.diff)
FROM reconciliation_runs r
WHERE e.tenant_id IS NULL AND e.payment_id IS NULL AND e.type IN ('reconciliation.run.completed', 'reconciliation.run.failed')
    AND r.id = (e.object->>'id')::bigint AND NOT e.object ? 'totals';

UPDATE events e SET object = e.object || jsonb_build_object('tenant_id', w.tenant_id, 'created_at', w.created_at,
    'updated_at', e.created_at)
FROM webhook_endpoints w
WHERE e.tenant_id = w.tenant_id AND e.payment_id IS NULL AND e.type = 'webhook_endpoint.disabled'
    AND e.object->>'id' = w.id AND NOT e.object ? 'created_at';
UPDATE events e SET object = e.object || jsonb_build_object('tenant_id', NULL, 'created_at', w.created_at,
    'updated_at', e.created_at)
FROM webhook_endpoints w
WHERE w.tenant_id IS NULL AND e.tenant_id IS NULL AND e.payment_id IS NULL AND e.type = 'webhook_endpoint.disabled'
    AND e.object->>'id' = w.id AND NOT e.object ? 'created_at';

-- +goose Down
DROP TRIGGER webhook_endpoints_disabled ON webhook_endpoints;
DROP FUNCTION webhook_endpoints_disabled();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reconciliation_runs_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_at   timestamptz := coalesce(NEW.finished_at, now());
    event_id   text := event_id_at(event_at);
    event_type text := CASE NEW.status WHEN 'succeeded' THEN 'reconciliation.run.completed'
        ELSE 'reconciliation.run.failed' END;
BEGIN
    -- The run's summary, in the shape of GET /v1/reconciliation/runs/{id}
    -- (reconcile.Run) without totals, diff and requested_by.
    INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
    VALUES (event_id, NULL, event_type, NULL, NULL, jsonb_build_object(
        'id', NEW.id, 'object', 'reconciliation_run', 'provider', NEW.provider,
        'business_date', NEW.business_date::text, 'version', NEW.version, 'trigger', NEW.trigger,
        'status', NEW.status, 'started_at', NEW.started_at, 'finished_at', NEW.finished_at,
        'local_count', NEW.local_count, 'provider_count', NEW.provider_count, 'matched_count', NEW.matched_count,
        'discrepancy_count', NEW.discrepancy_count, 'category_counts', NEW.category_counts, 'error', NEW.error),
        event_at);
    PERFORM webhook_fan_out(event_id, NULL, event_type, event_at);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id   text;
    event_type text;
    event_at   timestamptz := NEW.updated_at;
    next_seq   integer := 1;
    first_id   text;
    last_id    text;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        event_type := 'payment.' || NEW.status;
    ELSIF NEW.attempt IS DISTINCT FROM OLD.attempt THEN
        event_type := 'payment.attempt_started';
    ELSIF OLD.hold_expiring_at IS NULL AND NEW.hold_expiring_at IS NOT NULL THEN
        -- A warning changes nothing of the payment (updated_at stays).
        event_type := 'payment.hold_expiring';
        event_at := NEW.hold_expiring_at;
    ELSE
        event_type := 'payment.hold_extended';
    END IF;
    event_id := event_id_at(event_at);
    -- A new payment's first event is number 1 (see the top of 00014).
    -- A payment's events are between its creation and now; the bounds on
    -- the id, a day wider each side for clocks of instances that
    -- disagree, keep the search to the partitions of those months.
    IF TG_OP <> 'INSERT' THEN
        first_id := event_id_floor(NEW.created_at - interval '1 day');
        last_id := event_id_floor(greatest(event_at, NEW.updated_at) + interval '1 day');
        SELECT coalesce(max(sequence), 0) + 1 INTO next_seq
        FROM events WHERE tenant_id = NEW.tenant_id AND payment_id = NEW.id AND id >= first_id AND id < last_id;
    END IF;
    -- The event and its deliveries in one statement (see 00014; keep
    -- alike with webhook_fan_out).
    WITH event AS (
        INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
        VALUES (event_id, NEW.tenant_id, event_type, NEW.id, next_seq, jsonb_build_object(
            'id', NEW.id, 'object', 'payment', 'tenant_id', NEW.tenant_id, 'status', NEW.status,
            'amount_minor', NEW.amount_minor, 'currency', NEW.currency, 'captured_minor', NEW.captured_minor,
            'refunded_minor', NEW.refunded_minor, 'provider', NEW.provider, 'provider_ref', NEW.provider_ref,
            'payment_method', NEW.payment_method, 'idempotency_key', NEW.idempotency_key,
            'description', NEW.description, 'metadata', NEW.metadata, 'failure_code', NEW.failure_code,
            'capture_before', NEW.capture_before, 'on_expiry', NEW.on_expiry, 'created_at', NEW.created_at,
            'updated_at', NEW.updated_at, 'routing_version', NEW.routing_version, 'attempt', NEW.attempt),
            event_at)
        RETURNING id
    )
    INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
    SELECT event.id, e.id, event_at, event_at
    FROM event, webhook_endpoints e
    WHERE e.tenant_id IS NOT DISTINCT FROM NEW.tenant_id AND e.enabled AND e.deleted_at IS NULL
        AND ('*' = ANY (e.event_types) OR event_type = ANY (e.event_types));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

ALTER FUNCTION payments_outbox() SET plan_cache_mode = force_generic_plan;
