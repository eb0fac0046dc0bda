package orchestrator

// Events for merchants and staff: the outbox. Each state change of a
// payment and each new attempt, each capture, cancel or refund that ends,
// each dispute and each reconciliation run that finishes writes one event
// in the same transaction as the change (the triggers on payments,
// payment_operations, payment_disputes and reconciliation_runs, from
// migration 00009 on), so an event exists exactly when its change
// committed. This file reads them.

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// WebhookEvent is one event of the outbox: what happened to a payment,
// with the payment as the change left it, or to a reconciliation run.
type WebhookEvent struct {
	ID     string `json:"id" db:"id"`
	Object string `json:"object" db:"-"`
	// TenantID is the tenant the event belongs to; nil for a staff event
	// (reconciliation.run.…), which only staff (finance) see.
	TenantID *int64 `json:"tenant_id" db:"tenant_id"`
	Type     string `json:"type" db:"type"`
	// PaymentID is set for the events of a payment and of its captures,
	// cancels and refunds; Sequence for the payment's own (payment.…).
	PaymentID *string `json:"payment_id" db:"payment_id"`
	// Sequence numbers the payment's events from 1, in the order of its
	// changes: a receiver that sees 3 after 5 keeps 5.
	Sequence *int `json:"sequence" db:"sequence"`
	// Data is the object as the change left it, exactly as the API shows
	// it (eventdata.go): a Payment, an Operation, a Dispute, a
	// WebhookEndpoint or a reconciliation run (reconcile.Run).
	Data      json.RawMessage `json:"data" db:"object"`
	CreatedAt time.Time       `json:"created_at" db:"created_at"`
}

// Render completes an event as read: its object name, its time in UTC and
// its data, the stored object in the API's shape (renderEventData). The
// webhooks' bodies are rendered by it too, so a delivery and a GET of the
// event cannot differ.
func (ev *WebhookEvent) Render() error {
	ev.Object = "event"
	ev.CreatedAt = ev.CreatedAt.UTC()
	data, err := renderEventData(ev.Type, ev.Data)
	ev.Data = data
	return err
}

// EventTypes are the types of events: one per payment state, one per new
// attempt, one per end of a capture, cancel or refund, a dispute the
// provider reported (EventPaymentDisputed), an endpoint disabled after
// failing for 3 days, and the staff events of ReconciliationEventTypes.
var EventTypes = func() []string {
	out := make([]string, 0, len(Statuses)+4)
	for _, st := range Statuses {
		out = append(out, "payment."+string(st))
	}
	out = append(out, "payment.attempt_started", EventHoldExpiring, EventHoldExtended, EventAmountIncreased)
	for _, kind := range []string{"capture", "cancel", "refund", "increment"} {
		out = append(out, kind+".succeeded", kind+".failed")
	}
	out = append(out, EventPaymentDisputed, EventEndpointDisabled)
	return append(out, ReconciliationEventTypes...)
}()

// EventPaymentDisputed is the type of the event of a dispute a provider
// reported (a provider webhook, inbound.go): its data is the dispute (id,
// object "dispute", payment_id, connector, provider_ref, amount_minor,
// currency, reason, created_at), written by migration 00010's trigger on
// payment_disputes. It carries the payment's id but no sequence.
const EventPaymentDisputed = "payment.disputed"

// EventEndpointDisabled is the type of the event of an endpoint disabled
// after failing for 3 days: a tenant's for its endpoints, a staff event
// for a staff endpoint.
const EventEndpointDisabled = "webhook_endpoint.disabled"

// ReconciliationEventTypes are the types of the staff events, one per
// reconciliation run that finishes, written in the transaction of its
// final status: completed (succeeded, with its counts) or failed (with a
// reason fit for finance). They have no tenant: only staff endpoints
// receive them and only staff (finance) read them.
var ReconciliationEventTypes = []string{"reconciliation.run.completed", "reconciliation.run.failed"}

// eventVisible is the condition on events (and their tenant_id) of what
// @tenant_id and @staff (a Scope) may see: a tenant its own events, staff
// every tenant's, and finance (Staff) the staff events too.
const eventVisible = `(tenant_id = @tenant_id OR (@tenant_id::bigint = 0 AND tenant_id IS NOT NULL) OR (@staff AND tenant_id IS NULL))`

// EventFilter selects a page of events, newest first.
type EventFilter struct {
	Type      string
	PaymentID string
	// Delivered, when set, keeps the events whose deliveries all went
	// through (true: it has some, and every one is delivered) or those
	// with a delivery not delivered yet, or given up (false).
	Delivered     *bool
	Limit         int
	StartingAfter string
}

// eventIDRE is the shape of an event id (evt_ and 32 hex digits).
var eventIDRE = regexp.MustCompile(`^evt_[0-9a-f]{32}$`)

// ValidEventID reports whether id is shaped like an event id ("evt_" and
// 32 lowercase hex digits).
func ValidEventID(id string) bool { return eventIDRE.MatchString(id) }

// eventColumns is what every statement reading events returns.
const eventColumns = `id, tenant_id, type, payment_id, sequence, object, created_at`

// GetEvent returns one event visible in scope (a merchant's: its tenant's;
// support's: every tenant's; finance's: the staff events too). Errors:
// not_found.
func (s *Service) GetEvent(ctx context.Context, sc Scope, id string) (WebhookEvent, error) {
	if !eventIDRE.MatchString(id) {
		return WebhookEvent{}, Errorf(CodeNotFound, "no event %q", id)
	}
	const q = `SELECT ` + eventColumns + ` FROM events
		WHERE id = @id AND ` + eventVisible
	rows, _ := s.pool.Query(ctx, q, NamedArgs{"id": id, "tenant_id": sc.TenantID, "staff": sc.Staff})
	ev, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[WebhookEvent])
	if isNoRows(err) {
		return WebhookEvent{}, Errorf(CodeNotFound, "no event %q", id)
	}
	if err != nil {
		return WebhookEvent{}, internalf("read event: %w", err)
	}
	if err := ev.Render(); err != nil {
		return WebhookEvent{}, internalf("read event %s: %w", ev.ID, err)
	}
	ev.redactFor(sc)
	return ev, nil
}

// redactFor makes ev what sc is shown: a webhook_endpoint.disabled
// event's endpoint URL is redacted unless sc.FullEndpointURLs, as in the
// endpoints' and deliveries' reads (the event sent to the endpoints keeps
// it whole: they are the owner's).
func (ev *WebhookEvent) redactFor(sc Scope) {
	if ev.Type != EventEndpointDisabled || sc.FullEndpointURLs() {
		return
	}
	var obj map[string]json.RawMessage
	var url string
	if json.Unmarshal(ev.Data, &obj) != nil || json.Unmarshal(obj["url"], &url) != nil {
		ev.Data = json.RawMessage(`{}`) // not as written: show nothing rather than a URL
		return
	}
	obj["url"], _ = json.Marshal(RedactURL(url))
	ev.Data, _ = json.Marshal(obj)
}

// ListEvents returns a page of the events visible in scope, newest first,
// and whether more follow. Errors: validation_failed (type, payment_id,
// limit, starting_after).
func (s *Service) ListEvents(ctx context.Context, sc Scope, f EventFilter) ([]WebhookEvent, bool, error) {
	if f.Limit == 0 {
		f.Limit = 10
	}
	if f.Limit < 1 || f.Limit > 100 {
		return nil, false, ParamError("limit", "limit must be 1 to 100")
	}
	if f.Type != "" && !slices.Contains(EventTypes, f.Type) {
		return nil, false, ParamError("type", "type must be one of %s", strings.Join(EventTypes, ", "))
	}
	var cursorAt *time.Time
	cursorID := ""
	if f.StartingAfter != "" {
		c, err := s.GetEvent(ctx, sc, f.StartingAfter)
		if ErrorCode(err) == CodeNotFound {
			return nil, false, ParamError("starting_after", "starting_after names no event of yours")
		}
		if err != nil {
			return nil, false, err
		}
		cursorAt, cursorID = &c.CreatedAt, c.ID
	}
	const q = `
		SELECT ` + eventColumns + ` FROM events
		WHERE ` + eventVisible + `
		  AND (@type::text = '' OR type = @type)
		  AND (@payment_id::text = '' OR payment_id = @payment_id)
		  AND (@delivered::boolean IS NULL
		       OR @delivered AND EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.id)
		          AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.id AND d.status <> 'delivered')
		       OR NOT @delivered AND EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.id AND d.status <> 'delivered'))
		  AND (@cursor_at::timestamptz IS NULL OR (created_at, id) < (@cursor_at, @cursor_id::text))
		ORDER BY created_at DESC, id DESC
		LIMIT @limit`
	rows, _ := s.pool.Query(ctx, q, NamedArgs{"tenant_id": sc.TenantID, "staff": sc.Staff, "type": f.Type, "payment_id": f.PaymentID,
		"delivered": f.Delivered,
		"cursor_at": cursorAt, "cursor_id": cursorID, "limit": f.Limit + 1})
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[WebhookEvent])
	if err != nil {
		return nil, false, internalf("list events: %w", err)
	}
	more := len(evs) > f.Limit
	if more {
		evs = evs[:f.Limit]
	}
	for i := range evs {
		if err := evs[i].Render(); err != nil {
			return nil, false, internalf("list events: %s: %w", evs[i].ID, err)
		}
		evs[i].redactFor(sc)
	}
	return evs, more, nil
}

// FullEndpointURLs reports whether sc is shown endpoint URLs whole: only
// a merchant's scope, whose endpoints they are. An endpoint URL is often
// a capability (a token in its path or query lets anyone post to the
// receiver), so staff (support reading every tenant's deliveries, finance
// and admin, whose staff endpoints every finance and admin key shares)
// see scheme://host/… (RedactURL): enough to tell endpoints apart and to
// diagnose a host, not to post to it. The one who creates an endpoint
// gets its URL back whole in that answer only, like its secret.
func (sc Scope) FullEndpointURLs() bool { return sc.TenantID != 0 && !sc.Staff }

// RedactURL is an endpoint URL as staff see it: its scheme and host (with
// the port), and "/…" in place of a path or query ("/" when it has
// neither). Something that is not an absolute URL is "…".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "…"
	}
	rest := "/"
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		rest = "/…"
	}
	return u.Scheme + "://" + u.Host + rest
}
