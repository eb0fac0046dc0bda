-- pgbench script: the SQL one new authorize (POST /v1/payments with a new
-- Idempotency-Key, answered 201 by the fake provider) runs, statement for
-- statement, each one round trip and one transaction as in the service.
-- The API key is not read: payorch serve authenticates from its key cache
-- (orchestrator/keycache.go), so a request reads api_keys only when the
-- cache misses.
--
-- GENERATED from the service's statements by TestHotPathScript
-- (orchestrator/hotpath_test.go), which fails when this file is stale; do
-- not edit, run `go generate ./orchestrator/` instead. Each named argument
-- (@name) of a statement is replaced, in parentheses, by a pgbench
-- expression (hotPathArgs there): pgbench variables, now(), md5() of the
-- key for the values the service computes in Go (lease token, payment id,
-- provider reference), literals for the request's fingerprint and the
-- stored answer. The key is unique per transaction: run, client and a
-- random 63-bit number.
--
-- BenchmarkServe (cmd/payorch/bench_test.go) runs it as
--
--   pgbench --no-vacuum --protocol=prepared --client=16 --jobs=2 --time=15 \
--     --file=testdata/bench/authorize_hot_path.sql \
--     --define=tenant_id=1 --define=run=<n> \
--     --log --log-prefix=<dir>/tx 'postgres:///<db>?host=<socket dir>&user=postgres…'
--
-- against a migrated database holding that tenant.

\set r random(1, 9223372036854775806)

-- 1. Claim the key, or read it if it exists (claimOrReadSQL in
--    Service.BeginIdempotent).
WITH ins AS (
	INSERT INTO idempotency_keys (tenant_id, scope, operation, key, request_hash, field_hashes,
		status, lock_token, locked_until, created_at, updated_at, expires_at)
	SELECT (:tenant_id), (''), ('POST /v1/payments'), (('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)), ('\xdb9fea7465bfaa649337620b818c5906b131b12f4de6b6a971ec3b37a406d698'::bytea), ('{"currency": "87ef325635aa32dd785d818665ee8fe1", "amount_minor": "40510175845988f13f6162ed8526f0b0"}'::jsonb),
		'in_progress', (md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)::uuid), (now() + interval '60 seconds'), (now()), (now()), (now() + interval '24 hours')
	WHERE (SELECT set_config('synchronous_commit',
		coalesce(('off')::text, current_setting('synchronous_commit')), true)) IS NOT NULL
	ON CONFLICT (tenant_id, operation, key, scope) DO NOTHING
	RETURNING expires_at
)
SELECT true AS claimed, NULL::bytea AS request_hash, NULL::jsonb AS field_hashes, ''::text AS status,
	NULL::text AS lock_token, NULL::timestamptz AS locked_until, 'started'::text AS recovery_point,
	NULL::int AS response_status, NULL::jsonb AS response_headers, NULL::bytea AS response_body, expires_at
FROM ins
UNION ALL
SELECT false, request_hash, field_hashes, status, lock_token::text, locked_until, recovery_point,
	response_status, response_headers, response_body, expires_at
FROM idempotency_keys
WHERE tenant_id = (:tenant_id) AND operation = ('POST /v1/payments') AND key = (('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)) AND scope = ('')
	AND NOT EXISTS (SELECT 1 FROM ins);

-- 2. Create the pending payment, its first event and the key's recovery
--    point (createPaymentSQL in Service.Authorize).
WITH p AS (
	INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor,
		currency, provider, payment_method, description, metadata, created_at, updated_at,
		routing_version, route, attempt, on_expiry, extended_authorization, card, return_url,
		incremental_authorization, multicapture, overcapture)
	SELECT (:tenant_id), ('pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)), (('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)), ('\xdb9fea7465bfaa649337620b818c5906b131b12f4de6b6a971ec3b37a406d698'::bytea), ('{"currency": "87ef325635aa32dd785d818665ee8fe1", "amount_minor": "40510175845988f13f6162ed8526f0b0"}'::jsonb), 'pending', (1000),
		('EUR'), ('fake'), ('pm_card_visa'), (''), ('{}'::jsonb), (now()), (now()),
		(NULL::integer), (ARRAY['fake']), 1, ('none'), (false), (NULL::jsonb), (NULL::text),
		(NULL::text), (NULL::text), (NULL::text)
	-- Only while the request's claim is there (its commit may not have
	-- waited for its flush: claimOrReadSQL).
	WHERE (md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)::uuid)::uuid IS NULL OR EXISTS (SELECT 1 FROM idempotency_keys k
		WHERE k.tenant_id = (:tenant_id) AND k.operation = ('POST /v1/payments') AND k.key = (('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text))
			AND k.lock_token = (md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)::uuid)::uuid)
	ON CONFLICT (tenant_id, id) DO NOTHING
	RETURNING tenant_id, id, status, amount_minor, currency, captured_minor, refunded_minor,
	provider, provider_ref, payment_method, idempotency_key, description, metadata, failure_code,
	capture_before, created_at, updated_at, routing_version, route, attempt, on_expiry, extended_authorization,
	card, return_url, next_action_url, action_expires_at, request_three_ds, incremental_authorization, multicapture,
	overcapture, max_capturable_minor, max_amount_minor, request_hash, field_hashes
), attempt AS (
	INSERT INTO payment_attempts (tenant_id, payment_id, attempt, connector, forwarded_key, dispatched, started_at,
		routing)
	SELECT tenant_id, id, 1, provider, ('po_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text) || md5('pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text))), 1, (now()), ('{"strategy": "priority", "chosen": "fake", "explored": false}'::jsonb) FROM p
), event AS (
	INSERT INTO payment_events (tenant_id, payment_id, type, from_status, to_status, detail, created_at)
	SELECT tenant_id, id, 'state_changed', NULL, 'pending', jsonb_build_object('idempotency_key', idempotency_key), (now())
	FROM p
), checkpoint AS (
	UPDATE idempotency_keys k SET recovery_point = 'payment_created', payment_id = coalesce(k.payment_id, p.id),
		updated_at = (now())
	FROM p
	WHERE k.tenant_id = (:tenant_id) AND k.operation = ('POST /v1/payments') AND k.key = (('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text))
		AND k.lock_token = (md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)::uuid)::uuid
)
SELECT tenant_id, id, status, amount_minor, currency, captured_minor, refunded_minor,
	provider, provider_ref, payment_method, idempotency_key, description, metadata, failure_code,
	capture_before, created_at, updated_at, routing_version, route, attempt, on_expiry, extended_authorization,
	card, return_url, next_action_url, action_expires_at, request_three_ds, incremental_authorization, multicapture,
	overcapture, max_capturable_minor, max_amount_minor, request_hash, field_hashes
FROM p;

-- (the provider creates the hold: HTTP, no SQL)
-- 3. Save the provider's reference before confirming (saveReferenceSQL,
--    OnReference in Service.authorizeAtProvider).
UPDATE payments SET provider_ref = ('fh_' || substr(md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text), 1, 24))
WHERE tenant_id = (:tenant_id) AND id = ('pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)) AND attempt = (1) AND provider_ref IS NULL
	AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off';

-- (the provider confirms the hold: HTTP, no SQL)
-- 4. Settle and answer: the payment is authorized, the provider call and
--    the state change go into its history, and the key is completed with
--    its stored answer (a real 485-byte 201 body) and its lease released
--    (settleCompleteSQL in Service.settleAuthorize).
WITH p AS (
	UPDATE payments SET status = ('authorized'), provider_ref = coalesce(('fh_' || substr(md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text), 1, 24)), provider_ref),
		capture_before = (now() + interval '7 days'), failure_code = (NULL),
		next_action_url = coalesce((NULL::text), next_action_url), action_expires_at = (NULL::timestamptz),
		incremental_authorization = coalesce((NULL::text), incremental_authorization),
		multicapture = coalesce((NULL::text), multicapture), overcapture = coalesce((NULL::text), overcapture),
		max_capturable_minor = (NULL::bigint), max_amount_minor = (NULL::bigint),
		updated_at = (now())
	WHERE tenant_id = (:tenant_id) AND id = ('pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)) AND status = 'pending' AND attempt = (1)
	RETURNING tenant_id, id, status, amount_minor, currency, captured_minor, refunded_minor,
	provider, provider_ref, payment_method, idempotency_key, description, metadata, failure_code,
	capture_before, created_at, updated_at, routing_version, route, attempt, on_expiry, extended_authorization,
	card, return_url, next_action_url, action_expires_at, request_three_ds, incremental_authorization, multicapture,
	overcapture, max_capturable_minor, max_amount_minor, request_hash, field_hashes
), attempt AS (
	UPDATE payment_attempts a SET outcome = ('authorized'), code = (NULL),
		provider_ref = coalesce(('fh_' || substr(md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text), 1, 24)), a.provider_ref),
		latency_ms = coalesce((0.5)::double precision, a.latency_ms), ended_at = (now())
	FROM p
	WHERE a.tenant_id = p.tenant_id AND a.payment_id = p.id AND a.attempt = p.attempt
), events AS (
	INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms,
		from_status, to_status, detail, created_at)
	SELECT (:tenant_id), ('pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)), 'provider_call', ('authorize')::text, ('po_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text) || md5('pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)))::text,
		('ok')::text, (0.5)::double precision, NULL::text, NULL::text, ('{"attempt": 1, "provider": "fake"}'::jsonb)::jsonb,
		(now())::timestamptz
	WHERE ('authorize')::text IS NOT NULL
	UNION ALL
	SELECT tenant_id, id, 'state_changed', NULL, NULL, NULL, NULL, 'pending', status, ('{}'::jsonb)::jsonb, (now())
	FROM p

), complete AS (
	UPDATE idempotency_keys k SET status = 'completed', response_status = (201),
		response_headers = (('{"Location": "/v1/payments/' || 'pay_' || md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text) || '", "Content-Type": "application/json"}')::jsonb), response_body = ('\x7b226964223a227061795f3766653362353337313365666366386636653163663833396266306463333064222c226f626a656374223a227061796d656e74222c2274656e616e745f6964223a312c22737461747573223a22617574686f72697a6564222c22616d6f756e745f6d696e6f72223a313030302c2263757272656e6379223a22455552222c2263617074757265645f6d696e6f72223a302c22726566756e6465645f6d696e6f72223a302c2270726f7669646572223a2266616b65222c2270726f76696465725f726566223a2266685f393066353431643539343539346164363038656534366263222c227061796d656e745f6d6574686f64223a22706d5f636172645f76697361222c226964656d706f74656e63795f6b6579223a22736372617463682d31222c226465736372697074696f6e223a22222c226d65746164617461223a7b7d2c226661696c7572655f636f6465223a6e756c6c2c22636170747572655f6265666f7265223a22323032362d31322d30395431323a31383a31332e3133353435335a222c22637265617465645f6174223a22323032362d31322d30325431323a31383a31332e3132323830365a222c22757064617465645f6174223a22323032362d31322d30325431323a31383a31332e3133363736385a227d0a'::bytea), payment_id = p.id,
		recovery_point = 'finished', lock_token = NULL, locked_until = NULL, updated_at = (now())
	FROM p
	WHERE k.tenant_id = (:tenant_id) AND k.operation = ('POST /v1/payments') AND k.key = (('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text))
		AND k.lock_token = (md5('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)::uuid)::uuid
	RETURNING 1
)
SELECT tenant_id, id, status, amount_minor, currency, captured_minor, refunded_minor,
	provider, provider_ref, payment_method, idempotency_key, description, metadata, failure_code,
	capture_before, created_at, updated_at, routing_version, route, attempt, on_expiry, extended_authorization,
	card, return_url, next_action_url, action_expires_at, request_three_ds, incremental_authorization, multicapture,
	overcapture, max_capturable_minor, max_amount_minor, request_hash, field_hashes,
	EXISTS (SELECT 1 FROM complete) AS completed
FROM p;
