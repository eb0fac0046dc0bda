package webhooks

// Webhook deliveries, as merchants and support see them: one
// per event and endpoint, with every attempt of it, and the reset that
// sends an event again. The delivery worker makes the attempts.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
)

// WebhookDelivery is the delivery of one event to one endpoint.
type WebhookDelivery struct {
	Object     string `json:"object" db:"-"`
	EventID    string `json:"event_id" db:"event_id"`
	EndpointID string `json:"endpoint_id" db:"endpoint_id"`
	// EndpointURL is the endpoint's URL, for people reading the delivery:
	// whole for the merchant, scheme://host/… for staff (FullEndpointURLs).
	EndpointURL string `json:"endpoint_url" db:"endpoint_url"`
	// Status is pending (to be sent at NextAttemptAt), delivered (answered
	// 2xx) or failed (given up, or the endpoint deleted).
	Status   string `json:"status" db:"status"`
	Attempts int    `json:"attempts" db:"attempts"`
	// NextAttemptAt is set only while pending.
	NextAttemptAt *time.Time `json:"next_attempt_at" db:"next_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at" db:"delivered_at"`
	// Tries are its attempts, first to last.
	Tries []WebhookDeliveryAttempt `json:"tries" db:"tries"`
}

// WebhookDeliveryAttempt is one attempt of a delivery: when, how long,
// and what came back (the status and the answer's first bytes, or the
// error).
type WebhookDeliveryAttempt struct {
	Attempt         int       `json:"attempt"`
	StartedAt       time.Time `json:"started_at"`
	LatencyMS       float64   `json:"latency_ms"`
	StatusCode      *int      `json:"status_code"`
	Error           *string   `json:"error"`
	ResponseExcerpt *string   `json:"response_excerpt"`
}

// LastStatusCode is the HTTP status of d's last attempt, if it got one.
func (d WebhookDelivery) LastStatusCode() *int {
	if len(d.Tries) == 0 {
		return nil
	}
	return d.Tries[len(d.Tries)-1].StatusCode
}

// deliveriesQuery reads the deliveries of one event (@event_id) or of
// every event of a payment (@payment_id), within @tenant_id (0: any), in
// the order of the events, then of the endpoints' creation.
const deliveriesQuery = `
	SELECT d.event_id, d.endpoint_id, e.url AS endpoint_url, d.status, d.attempts,
		CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
		d.delivered_at,
		coalesce((SELECT jsonb_agg(jsonb_build_object('attempt', a.attempt, 'started_at', a.started_at,
				'latency_ms', a.latency_ms, 'status_code', a.status_code, 'error', a.error,
				'response_excerpt', a.response_excerpt) ORDER BY a.attempt)
			FROM webhook_delivery_attempts a
			WHERE a.event_id = d.event_id AND a.endpoint_id = d.endpoint_id), '[]'::jsonb) AS tries
	FROM events ev
	JOIN webhook_deliveries d ON d.event_id = ev.id
	JOIN webhook_endpoints e ON e.id = d.endpoint_id
	WHERE ` + deliveriesVisible + `
	  AND (ev.id = @event_id OR ev.payment_id = @payment_id)
	ORDER BY ev.created_at, ev.sequence NULLS LAST, ev.id, e.created_at, e.id`

// deliveriesVisible says whose deliveries a scope sees: a merchant its
// tenant's, support every tenant's, finance (and admin) the staff events'
// only. Finance reads merchants' events, but their endpoints (URLs, what
// they answered) are the merchants' business, which support looks after.
const deliveriesVisible = `(CASE WHEN @staff THEN ev.tenant_id IS NULL
	ELSE ev.tenant_id IS NOT NULL AND (@tenant_id::bigint = 0 OR ev.tenant_id = @tenant_id) END)`

// eventForDeliveries checks that event id is one whose deliveries sc
// may read (deliveriesVisible): not_found otherwise, or if there is no
// such event.
func (s *Service) eventForDeliveries(ctx context.Context, sc orchestrator.Scope, id string) error {
	if !orchestrator.ValidEventID(id) {
		return orchestrator.Errorf(orchestrator.CodeNotFound, "no event %q", id)
	}
	const q = `SELECT EXISTS (SELECT 1 FROM events ev WHERE ev.id = @event_id AND ` + deliveriesVisible + `)`
	var found bool
	if err := s.pool.QueryRow(ctx, q, orchestrator.NamedArgs{"event_id": id, "tenant_id": sc.TenantID,
		"staff": sc.Staff}).Scan(&found); err != nil {
		return orchestrator.Internalf("read event: %w", err)
	}
	if !found {
		return orchestrator.Errorf(orchestrator.CodeNotFound, "no event %q", id)
	}
	return nil
}

// querier runs a query: the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// deliveries runs deliveriesQuery on q.
func deliveries(ctx context.Context, q querier, sc orchestrator.Scope, eventID, paymentID string) ([]WebhookDelivery, error) {
	rows, _ := q.Query(ctx, deliveriesQuery, orchestrator.NamedArgs{"tenant_id": sc.TenantID, "staff": sc.Staff, "event_id": eventID,
		"payment_id": paymentID})
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByName[WebhookDelivery])
	if err != nil {
		return nil, orchestrator.Internalf("read webhook deliveries: %w", err)
	}
	for i := range ds {
		ds[i].Object = "webhook_delivery"
		ds[i].EndpointURL = endpointURLFor(sc, ds[i].EndpointURL)
		if ds[i].Tries == nil {
			ds[i].Tries = []WebhookDeliveryAttempt{}
		}
	}
	return ds, nil
}

// EventDeliveries returns the deliveries of an event visible in sc, one
// per endpoint it was (or is to be) sent to, deleted endpoints included.
// Errors: not_found.
func (s *Service) EventDeliveries(ctx context.Context, sc orchestrator.Scope, eventID string) ([]WebhookDelivery, error) {
	if err := s.eventForDeliveries(ctx, sc, eventID); err != nil {
		return nil, err
	}
	return deliveries(ctx, s.pool, sc, eventID, "")
}

// PaymentDeliveries returns the deliveries of every event of a payment
// visible in sc, in the order of the events. A payment outside sc, or
// none, has none.
func (s *Service) PaymentDeliveries(ctx context.Context, sc orchestrator.Scope, paymentID string) ([]WebhookDelivery, error) {
	if paymentID == "" {
		return []WebhookDelivery{}, nil
	}
	return deliveries(ctx, s.pool, sc, "", paymentID)
}

// RedeliverEvent sends an event again to every endpoint of its tenant that
// is not deleted: each one's delivery becomes pending, due now, keeping
// its count of attempts; an endpoint without one (created after the event)
// gets one if it wants the event's type. A disabled endpoint's delivery
// waits until it is enabled. An attempt in flight when it is asked is
// superseded: its lease is cleared, so its record (when it ends) is
// dropped and the event goes again now. It returns the event's
// deliveries as they now are.
//
// Only the owner of the event's endpoints redelivers: a merchant its
// tenant's events, staff (finance, admin) the staff events. Support reads
// every tenant's deliveries but may not redeliver (forbidden): its role
// reads, and a redelivery is a write (it resets deliveries, delivered_at
// included, and sends payment events again, which a receiver that does
// not dedupe by event id acts on twice), across every tenant for one key.
// The merchant can redeliver itself when support finds a delivery that
// failed. Errors: not_found, forbidden (support).
func (s *Service) RedeliverEvent(ctx context.Context, sc orchestrator.Scope, eventID string) ([]WebhookDelivery, error) {
	if err := s.eventForDeliveries(ctx, sc, eventID); err != nil {
		return nil, err
	}
	if sc.TenantID == 0 && !sc.Staff { // support's scope: every tenant's, read only
		return nil, orchestrator.Errorf(orchestrator.CodeForbidden, "only the event's owner may redeliver it: the merchant (or finance, for a staff event)")
	}
	const q = `
		INSERT INTO webhook_deliveries AS d (event_id, endpoint_id, status, next_attempt_at, created_at)
		SELECT ev.id, e.id, 'pending', @now, @now
		FROM events ev
		JOIN webhook_endpoints e ON e.tenant_id IS NOT DISTINCT FROM ev.tenant_id AND e.deleted_at IS NULL
		WHERE ev.id = @event_id
		  AND ('*' = ANY (e.event_types) OR ev.type = ANY (e.event_types)
		       OR EXISTS (SELECT 1 FROM webhook_deliveries x WHERE x.event_id = ev.id AND x.endpoint_id = e.id))
		ON CONFLICT (event_id, endpoint_id) DO UPDATE
		SET status = 'pending', next_attempt_at = @now, delivered_at = NULL, leased_until = NULL`
	var ds []WebhookDelivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q, orchestrator.NamedArgs{"event_id": eventID, "now": s.now()}); err != nil {
			return orchestrator.Internalf("redeliver event: %w", err)
		}
		var err error
		ds, err = deliveries(ctx, tx, sc, eventID, "")
		return err
	})
	return ds, err
}
