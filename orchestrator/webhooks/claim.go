package webhooks

// The statements of the delivery worker (worker.go): the claim
// that leases due deliveries, the record of an attempt, the endpoint's
// health and breaker, and the disabling of endpoints failing for 3 days.

import (
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
)

// The endpoint breaker (see the top of worker.go).
const (
	// webhookBreakerTrips is how many attempts in a row without an answer
	// open an endpoint's breaker.
	webhookBreakerTrips = 5
	// webhookBreakerPause is the first pause of an open breaker; each open
	// after a failed probe doubles it, up to webhookBreakerMaxPause.
	webhookBreakerPause    = 30 * time.Second
	webhookBreakerMaxPause = 30 * time.Minute
)

// webhookClaimLock serialises the claims of every instance: each runs in
// its transaction after it, so that it counts the leases in force, per
// endpoint, with the others' committed (each statement of a transaction
// reads what was committed when it began).
const webhookClaimLock = `SELECT pg_advisory_xact_lock(hashtextextended('webhook_deliveries:claim', 0))`

// claimDeliveriesSQL leases up to @limit due deliveries until
// @lease_until and returns them with what sending needs; none while a
// partition change of the outbox holds the lock
// orchestrator.OutboxPassLockKey names (orchestrator/history.go: the
// claim takes it shared, if it is free at once; the next claim goes).
// Each endpoint
// that is enabled, and not paused by its breaker, has room for
// @endpoint_cap deliveries in flight (1, the probe, while its breaker has
// tripped; @limit if it is one of the @fast) less its leases in force; it gives its oldest due deliveries up
// to its room, and these are taken round-robin: each tenant's first, then
// each tenant's second …, a tenant's endpoints taking turns.
const claimDeliveriesSQL = `
	WITH free AS (
		SELECT pg_try_advisory_xact_lock_shared(` + orchestrator.OutboxPassLockKey + `) AS free
	), endpoint AS (
		SELECT w.id, w.tenant_id,
			CASE WHEN w.consecutive_timeouts >= @trips THEN 1 WHEN w.id = ANY (@fast::text[]) THEN @limit
				ELSE @endpoint_cap END
				- (SELECT count(*) FROM webhook_deliveries l
					WHERE l.endpoint_id = w.id AND l.status = 'pending' AND l.leased_until > @now) AS room
		FROM webhook_endpoints w, free
		WHERE free.free AND w.enabled AND w.deleted_at IS NULL AND (w.paused_until IS NULL OR w.paused_until <= @now)
	), due AS (
		SELECT ep.tenant_id, d.event_id, d.endpoint_id, d.next_attempt_at,
			row_number() OVER (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_at) AS turn
		FROM endpoint ep
		CROSS JOIN LATERAL (
			SELECT d.event_id, d.endpoint_id, d.next_attempt_at
			FROM webhook_deliveries d
			WHERE d.endpoint_id = ep.id AND d.status = 'pending' AND d.next_attempt_at <= @now
			ORDER BY d.next_attempt_at
			LIMIT least(ep.room, @limit)
		) d
		WHERE ep.room > 0
	), picked AS (
		SELECT event_id, endpoint_id FROM due
		ORDER BY row_number() OVER (PARTITION BY tenant_id ORDER BY turn, next_attempt_at), next_attempt_at
		LIMIT @limit
	), claimed AS (
		UPDATE webhook_deliveries d SET leased_until = @lease_until, next_attempt_at = @lease_until
		FROM picked p
		WHERE d.event_id = p.event_id AND d.endpoint_id = p.endpoint_id
			AND d.status = 'pending' AND d.next_attempt_at <= @now
		RETURNING d.event_id, d.endpoint_id, d.attempts, d.leased_until, d.created_at AS first_due
	)
	SELECT c.event_id, c.endpoint_id, c.attempts, c.leased_until, c.first_due,
		e.tenant_id, e.type, e.payment_id, e.sequence, e.object, e.created_at,
		w.url, w.secret, w.previous_secret, w.previous_secret_until,
		w.failing_since IS NULL AND w.consecutive_timeouts = 0 AS healthy
	FROM claimed c
	JOIN events e ON e.id = c.event_id
	JOIN webhook_endpoints w ON w.id = c.endpoint_id`

// queueClaim queues on b the claim of up to limit due deliveries.
func (s *Service) queueClaim(b *pgx.Batch, limit int) {
	now := s.now()
	b.Queue(webhookClaimLock)
	b.Queue(claimDeliveriesSQL, orchestrator.NamedArgs{"now": now, "limit": limit,
		"lease_until": now.Add(s.timeout + webhookLeaseMargin), "trips": webhookBreakerTrips,
		"endpoint_cap": max(1, s.senders/webhookEndpointShare), "fast": s.fast.list()})
}

// readClaim reads the deliveries queueClaim claimed.
func readClaim(br pgx.BatchResults) ([]dueDelivery, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, _ := br.Query()
	return pgx.CollectRows(rows, pgx.RowToStructByName[dueDelivery])
}

// recordAttemptSQL records one attempt and moves its delivery on:
// delivered, due again at @next_attempt_at, or given up; only if the
// delivery is still pending under the lease and count of attempts it was
// claimed with (else it records nothing).
const recordAttemptSQL = `
	WITH d AS (
		UPDATE webhook_deliveries SET attempts = @claimed_attempts + 1, status = @status,
			next_attempt_at = @next_attempt_at, delivered_at = @delivered_at, leased_until = NULL
		WHERE event_id = @event_id AND endpoint_id = @endpoint_id AND status = 'pending'
			AND attempts = @claimed_attempts AND leased_until = @leased_until
		RETURNING event_id, endpoint_id, attempts
	)
	INSERT INTO webhook_delivery_attempts (event_id, endpoint_id, attempt, started_at, latency_ms, status_code,
		error, response_excerpt)
	SELECT event_id, endpoint_id, attempts, @started_at, @latency_ms, @status_code, nullif(@error::text, ''),
		nullif(@excerpt::text, '') FROM d`

// endpointHealthSQL notes what an attempt says of its endpoint: answering
// 2xx (failing_since cleared) or not (failing_since set at its first
// failure), and, for its breaker, answering at all (closed) or not (one
// more in a row; at @trips the breaker opens, unless it is open already:
// the attempts in flight when it opened end without an answer too). It
// writes nothing for an endpoint that answers 2xx with nothing to clear,
// the usual case. It returns whether the breaker opened.
const endpointHealthSQL = `
	WITH old AS (
		SELECT id, consecutive_timeouts, paused_until FROM webhook_endpoints
		WHERE id = @endpoint_id
			AND ((failing_since IS NULL) <> @ok::boolean OR NOT @answered::boolean OR consecutive_timeouts <> 0)
		FOR NO KEY UPDATE
	), next AS (
		SELECT id, NOT @answered AND consecutive_timeouts + 1 >= @trips
			AND (paused_until IS NULL OR paused_until <= @now::timestamptz) AS opens
		FROM old
	)
	UPDATE webhook_endpoints w SET
		failing_since = CASE WHEN @ok THEN NULL ELSE coalesce(w.failing_since, @now) END,
		consecutive_timeouts = CASE WHEN @answered THEN 0 ELSE w.consecutive_timeouts + 1 END,
		breaker_opens = CASE WHEN @answered THEN 0 WHEN next.opens THEN w.breaker_opens + 1 ELSE w.breaker_opens END,
		paused_until = CASE WHEN @answered THEN NULL
			WHEN next.opens THEN @now + least(@pause::interval * power(2, least(w.breaker_opens, 20)), @max_pause::interval)
			ELSE w.paused_until END
	FROM next
	WHERE w.id = next.id
	RETURNING next.opens`

// recorded is what recordAttempts recorded: attempts by outcome
// (delivered, failed, gave_up, and unrecorded: late, see the top of
// worker.go) and breakers opened.
type recorded struct {
	outcomes map[string]int
	opens    int
}

// queueRecords queues on b the records of the attempts ended, and
// returns what readRecords reads of each: its outcome, and whether its
// endpoint's health is written too. An attempt answered 2xx by an endpoint
// that was healthy when it was claimed changes nothing of it, the usual
// case, and skips that statement. (Were the endpoint to fail another
// attempt meanwhile, that attempt's delivery is retried, and the next
// answer clears what this one would have.)
func queueRecords(b *pgx.Batch, ended []sentDelivery) []queuedRecord {
	queued := make([]queuedRecord, len(ended))
	for i, x := range ended {
		var args orchestrator.NamedArgs
		args, queued[i].outcome = recordArgs(x.d, x.r)
		b.Queue(recordAttemptSQL, args)
		if queued[i].health = !x.r.ok() || !x.d.Healthy; queued[i].health {
			b.Queue(endpointHealthSQL, orchestrator.NamedArgs{"endpoint_id": x.d.EndpointID, "ok": x.r.ok(),
				"answered": x.r.answered(), "now": x.r.at, "trips": webhookBreakerTrips, "pause": webhookBreakerPause,
				"max_pause": webhookBreakerMaxPause})
		}
	}
	return queued
}

// queuedRecord is what queueRecords queued for one attempt.
type queuedRecord struct {
	outcome string
	health  bool
}

// readRecords reads what the records queueRecords queued did.
func readRecords(br pgx.BatchResults, queued []queuedRecord) (recorded, error) {
	rec := recorded{outcomes: map[string]int{}}
	for _, q := range queued {
		tag, err := br.Exec()
		if err != nil {
			return rec, err
		}
		if tag.RowsAffected() == 1 {
			rec.outcomes[q.outcome]++
		} else {
			rec.outcomes["unrecorded"]++
		}
		if !q.health {
			continue
		}
		var opened bool
		if err := br.QueryRow().Scan(&opened); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return rec, err
		}
		if opened {
			rec.opens++
		}
	}
	return rec, nil
}

// recordArgs are the arguments of recordAttemptSQL for attempt r of d,
// and its outcome: delivered, failed (due again after its backoff) or
// gave_up (failing 3 days after it was first due).
func recordArgs(d dueDelivery, r deliveryResult) (orchestrator.NamedArgs, string) {
	args := orchestrator.NamedArgs{"event_id": d.EventID, "endpoint_id": d.EndpointID, "claimed_attempts": d.Attempts,
		"leased_until": d.LeasedUntil, "started_at": r.at, "latency_ms": float64(r.latency.Microseconds()) / 1000,
		"status_code": nil, "error": r.err, "excerpt": r.excerpt, "status": "pending",
		"next_attempt_at": r.at, "delivered_at": nil}
	if r.statusCode != 0 {
		args["status_code"] = r.statusCode
	}
	switch {
	case r.ok():
		args["status"], args["delivered_at"] = "delivered", r.at
		return args, "delivered"
	case r.at.Sub(d.FirstDue) >= WebhookGiveUpAfter:
		args["status"] = "failed"
		return args, "gave_up"
	default:
		args["next_attempt_at"] = r.at.Add(jitter(webhookBackoff(d.Attempts + 1)))
		return args, "failed"
	}
}

// disableFailingSQL disables the endpoints failing for @give_up_after,
// gives up their pending deliveries (a redelivery can send them again once
// the endpoint is enabled) and those of deleted endpoints, and writes the
// webhook_endpoint.disabled event of each, delivered to the owner's other
// endpoints that want it (a staff endpoint's event is a staff event, for
// the other staff endpoints).
const disableFailingSQL = `
	WITH disabled AS (
		UPDATE webhook_endpoints SET enabled = false, updated_at = @now,
			disabled_reason = 'every delivery failed for 3 days'
		WHERE enabled AND deleted_at IS NULL AND failing_since <= @now::timestamptz - @give_up_after::interval
		RETURNING id, tenant_id, url, event_types, description, failing_since, created_at
	), given_up AS (
		UPDATE webhook_deliveries SET status = 'failed'
		WHERE status = 'pending' AND endpoint_id IN (SELECT id FROM disabled)
	), orphaned AS (
		-- written by a change that raced the endpoint's deletion
		UPDATE webhook_deliveries d SET status = 'failed'
		FROM webhook_endpoints w
		WHERE d.status = 'pending' AND d.endpoint_id = w.id AND w.deleted_at IS NOT NULL
	), ev AS (
		INSERT INTO events (id, tenant_id, type, payment_id, sequence, object, created_at)
		SELECT event_id_at(@now), tenant_id, 'webhook_endpoint.disabled', NULL, NULL,
			jsonb_build_object('id', id, 'object', 'webhook_endpoint', 'url', url, 'event_types', event_types,
				'description', description, 'enabled', false, 'disabled_reason', 'every delivery failed for 3 days',
				'failing_since', failing_since),
			@now
		FROM disabled
		RETURNING id, tenant_id, type, object
	)
	INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at, created_at)
	SELECT ev.id, w.id, @now, @now
	FROM ev JOIN webhook_endpoints w ON w.tenant_id IS NOT DISTINCT FROM ev.tenant_id
	WHERE w.enabled AND w.deleted_at IS NULL AND w.id <> ev.object->>'id'
		AND ('*' = ANY (w.event_types) OR ev.type = ANY (w.event_types))`

// fastEndpoints are the endpoints whose last attempt from this instance
// was answered within webhookFastAnswer (at most webhookFastMax of them).
type fastEndpoints struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func newFastEndpoints() *fastEndpoints { return &fastEndpoints{ids: map[string]struct{}{}} }

// note notes what an attempt to endpoint id got.
func (f *fastEndpoints) note(id string, r deliveryResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !r.answered() || r.latency >= webhookFastAnswer {
		delete(f.ids, id)
	} else if len(f.ids) < webhookFastMax {
		f.ids[id] = struct{}{}
	}
}

// list returns the fast endpoints' ids.
func (f *fastEndpoints) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.ids))
	for id := range f.ids {
		ids = append(ids, id)
	}
	return ids
}
