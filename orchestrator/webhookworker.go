package orchestrator

// Delivering webhooks (issue #15): the worker every `serve` runs.
//
// Deliveries are written with their event, in the transaction of the
// change (migration 00009), so a committed change is a delivery to make,
// even if the instance dies right after the commit: any instance's worker
// sends it. A pass takes a batch of due deliveries with FOR UPDATE SKIP
// LOCKED (one sender per delivery across instances), sends them
// concurrently, each under its own timeout, and records every attempt and
// its outcome in the same transaction before it commits. A crash in the
// middle of a pass rolls it back: the deliveries are due again and sent
// again (at least once; the event id is the receiver's dedupe key).
//
// Retries: after the n-th failed attempt the next is due in
// webhookBackoff(n): 30 s, then tripling up to 10 h, each with ±10%
// jitter (30 s, 1.5 min, 4.5 min, 13.5 min, 40.5 min, 2 h, 6 h, 10 h,
// 10 h …). A delivery still failing 3 days after it was first due is given
// up (failed); an endpoint whose every delivery has failed for 3 days is
// disabled, and a webhook_endpoint.disabled event says so.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// Delivery limits.
const (
	// WebhookTimeout bounds one delivery attempt, connection included.
	WebhookTimeout = 10 * time.Second
	// WebhookGiveUpAfter is how long deliveries are retried, and how long
	// an endpoint may fail before it is disabled.
	WebhookGiveUpAfter = 72 * time.Hour
	// webhookBatch is how many deliveries one pass takes at most.
	webhookBatch = 200
	// DefaultWebhookSenders is how many deliveries a pass sends at once
	// unless Config.WebhookSenders says otherwise.
	DefaultWebhookSenders = 32
	// maxResponseExcerpt is how much of an answer an attempt keeps.
	maxResponseExcerpt = 1024
)

// webhookBackoff is the delay after the n-th failed attempt (n ≥ 1),
// before jitter: 30 s, tripling, at most 10 h.
func webhookBackoff(n int) time.Duration {
	d := 30 * time.Second
	for i := 1; i < n && d < 10*time.Hour; i++ {
		d *= 3
	}
	return min(d, 10*time.Hour)
}

// jitter spreads d by ±10%, so retries of many deliveries do not arrive
// together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

// dueDeliverySQL takes up to @limit due deliveries of enabled endpoints,
// locked for this pass (others skip them), with what sending needs.
const dueDeliverySQL = `
	SELECT d.event_id, d.endpoint_id, d.attempts, d.created_at AS first_due,
		e.tenant_id, e.type, e.payment_id, e.sequence, e.object, e.created_at,
		w.url, w.secret, w.previous_secret, w.previous_secret_until
	FROM webhook_deliveries d
	JOIN events e ON e.id = d.event_id
	JOIN webhook_endpoints w ON w.id = d.endpoint_id
	WHERE d.status = 'pending' AND d.next_attempt_at <= @now AND w.enabled AND w.deleted_at IS NULL
	ORDER BY d.next_attempt_at
	LIMIT @limit
	FOR UPDATE OF d SKIP LOCKED`

// dueDelivery is a row of dueDeliverySQL.
type dueDelivery struct {
	EventID             string          `db:"event_id"`
	EndpointID          string          `db:"endpoint_id"`
	Attempts            int             `db:"attempts"`
	FirstDue            time.Time       `db:"first_due"`
	TenantID            *int64          `db:"tenant_id"` // nil: a staff event
	Type                string          `db:"type"`
	PaymentID           *string         `db:"payment_id"`
	Sequence            *int            `db:"sequence"`
	Object              json.RawMessage `db:"object"`
	CreatedAt           time.Time       `db:"created_at"`
	URL                 string          `db:"url"`
	Secret              string          `db:"secret"`
	PreviousSecret      *string         `db:"previous_secret"`
	PreviousSecretUntil *time.Time      `db:"previous_secret_until"`
}

// deliveryResult is what one attempt got.
type deliveryResult struct {
	at         time.Time
	latency    time.Duration
	statusCode int    // 0: no answer
	err        string // why there was no answer
	excerpt    string
}

func (r deliveryResult) ok() bool { return r.statusCode >= 200 && r.statusCode < 300 }

// recordAttemptSQL records one attempt and moves its delivery on:
// delivered, due again at @next_attempt_at, or given up.
const recordAttemptSQL = `
	WITH a AS (
		INSERT INTO webhook_delivery_attempts (event_id, endpoint_id, attempt, started_at, latency_ms, status_code,
			error, response_excerpt)
		VALUES (@event_id, @endpoint_id, @attempt, @started_at, @latency_ms, @status_code, @error, @excerpt)
	)
	UPDATE webhook_deliveries SET attempts = @attempt, status = @status, next_attempt_at = @next_attempt_at,
		delivered_at = @delivered_at
	WHERE event_id = @event_id AND endpoint_id = @endpoint_id`

// endpointHealthSQL notes an endpoint answering (failing_since cleared) or
// failing (failing_since set at its first failure).
const endpointHealthSQL = `
	UPDATE webhook_endpoints SET failing_since = CASE WHEN @ok::boolean THEN NULL ELSE @now::timestamptz END
	WHERE id = @endpoint_id AND (failing_since IS NULL) <> @ok::boolean`

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

// DeliveryStats counts one pass of the delivery worker.
type DeliveryStats struct {
	Sent, Delivered, Failed, GivenUp int
}

// DeliverWebhooks runs one pass of the delivery worker: up to a batch of
// due deliveries, sent and recorded (see the top of this file). Safe on
// several instances at once.
func (s *Service) DeliverWebhooks(ctx context.Context) (DeliveryStats, error) {
	var st DeliveryStats
	now := s.now()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Not while a partition of the outbox is being made or dropped
		// (outboxPassLock, history.go): the next pass goes.
		var free bool
		if err := tx.QueryRow(ctx, outboxPassLockShared).Scan(&free); err != nil || !free {
			return err
		}
		rows, _ := tx.Query(ctx, dueDeliverySQL, namedArgs{"now": now, "limit": webhookBatch})
		due, err := pgx.CollectRows(rows, pgx.RowToStructByName[dueDelivery])
		if err != nil {
			return err
		}
		if len(due) > 0 {
			results := s.sendAll(ctx, due, now)
			b := &pgx.Batch{}
			for i, d := range due {
				s.queueRecord(b, d, results[i], &st)
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		// Every pass, even one with nothing due: an endpoint failing for
		// 3 days is disabled whether or not a retry of it is due now.
		_, err = tx.Exec(ctx, disableFailingSQL, namedArgs{"now": s.now(), "give_up_after": WebhookGiveUpAfter})
		return err
	})
	if err != nil {
		return st, internalf("deliver webhooks: %w", err)
	}
	return st, nil
}

// sendAll sends due deliveries, s.webhookSenders at a time, and returns
// their results in order.
func (s *Service) sendAll(ctx context.Context, due []dueDelivery, now time.Time) []deliveryResult {
	results := make([]deliveryResult, len(due))
	sem := make(chan struct{}, s.webhookSenders)
	var wg sync.WaitGroup
	for i := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = s.send(ctx, due[i], now)
		})
	}
	wg.Wait()
	return results
}

// queueRecord queues the statements recording d's attempt r on b, and
// counts it in st.
func (s *Service) queueRecord(b *pgx.Batch, d dueDelivery, r deliveryResult, st *DeliveryStats) {
	attempt := d.Attempts + 1
	args := namedArgs{"event_id": d.EventID, "endpoint_id": d.EndpointID, "attempt": attempt, "started_at": r.at,
		"latency_ms": float64(r.latency.Microseconds()) / 1000, "status_code": nil, "error": nullIfEmpty(r.err),
		"excerpt": nullIfEmpty(r.excerpt), "status": "pending", "next_attempt_at": r.at, "delivered_at": nil}
	if r.statusCode != 0 {
		args["status_code"] = r.statusCode
	}
	outcome := "delivered"
	switch {
	case r.ok():
		args["status"], args["delivered_at"] = "delivered", r.at
		st.Delivered++
	case r.at.Sub(d.FirstDue) >= WebhookGiveUpAfter:
		args["status"] = "failed"
		outcome = "gave_up"
		st.GivenUp++
	default:
		args["next_attempt_at"] = r.at.Add(jitter(webhookBackoff(attempt)))
		outcome = "failed"
		st.Failed++
	}
	st.Sent++
	b.Queue(recordAttemptSQL, args)
	b.Queue(endpointHealthSQL, namedArgs{"endpoint_id": d.EndpointID, "ok": r.ok(), "now": r.at})
	s.tel.delivered(outcome)
}

// webhookBody is the JSON sent: the event as GET /v1/events/{id} answers
// (rendered the same way: WebhookEvent.render).
func webhookBody(d dueDelivery) ([]byte, error) {
	ev := WebhookEvent{ID: d.EventID, TenantID: d.TenantID, Type: d.Type, PaymentID: d.PaymentID,
		Sequence: d.Sequence, Data: d.Object, CreatedAt: d.CreatedAt}
	if err := ev.render(); err != nil {
		return nil, err
	}
	return json.Marshal(ev)
}

// send makes one attempt of d: POST the event, signed with the endpoint's
// secrets (the previous one too while it is valid).
func (s *Service) send(ctx context.Context, d dueDelivery, now time.Time) deliveryResult {
	r := deliveryResult{at: s.now()}
	body, err := webhookBody(d)
	if err != nil {
		r.err = "encode event: " + err.Error()
		return r
	}
	secrets := []string{d.Secret}
	if d.PreviousSecret != nil && d.PreviousSecretUntil != nil && now.Before(*d.PreviousSecretUntil) {
		secrets = append(secrets, *d.PreviousSecret)
	}
	cctx, cancel := context.WithTimeout(ctx, WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		r.err = "bad endpoint URL"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "payorch-webhooks/1")
	req.Header.Set(webhooksig.Header, webhooksig.Sign(secrets, time.Now(), body))
	req.Header.Set(webhooksig.EventIDHeader, d.EventID)
	start := time.Now()
	res, err := s.webhookClient.Do(req)
	r.latency = time.Since(start)
	if err != nil {
		r.err = deliveryError(err)
		return r
	}
	defer res.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(res.Body, maxResponseExcerpt))
	r.statusCode, r.excerpt = res.StatusCode, toValidText(excerpt)
	return r
}

// toValidText keeps what is valid UTF-8 text of an answer, without NUL
// (PostgreSQL text holds none).
func toValidText(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "")
}
