package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Status is a payment's state (SPEC: Payments).
type Status string

// Payment states.
const (
	StatusPending           Status = "pending"
	StatusRequiresAction    Status = "requires_action"
	StatusAuthorized        Status = "authorized"
	StatusFailed            Status = "failed"
	StatusCaptured          Status = "captured"
	StatusCanceled          Status = "canceled"
	StatusExpired           Status = "expired"
	StatusPartiallyRefunded Status = "partially_refunded"
	StatusRefunded          Status = "refunded"
)

// Statuses lists every payment state, in the order of the lifecycle: the
// one list. The migration's CHECK constraint (payments_status_check), the
// OpenAPI document's PaymentStatus enum and the console's badges are held
// to it by tests (httpapi's TestPaymentStatusesAgree).
var Statuses = []Status{StatusPending, StatusRequiresAction, StatusAuthorized, StatusFailed, StatusCaptured, StatusCanceled, StatusExpired,
	StatusPartiallyRefunded, StatusRefunded}

// Known reports whether s is a payment state (one of Statuses).
func (s Status) Known() bool { return slices.Contains(Statuses, s) }

// transitions is the one state machine: from → allowed next states.
var transitions = map[Status][]Status{
	StatusPending:           {StatusRequiresAction, StatusAuthorized, StatusFailed},
	StatusRequiresAction:    {StatusAuthorized, StatusFailed},
	StatusAuthorized:        {StatusCaptured, StatusCanceled, StatusExpired},
	StatusCaptured:          {StatusPartiallyRefunded, StatusRefunded},
	StatusPartiallyRefunded: {StatusPartiallyRefunded, StatusRefunded},
}

// CanTransition reports whether a payment in state from may move to to.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// checkTransition returns payment_state_conflict for an illegal move.
func checkTransition(from, to Status, what string) error {
	if CanTransition(from, to) {
		return nil
	}
	return Errorf(CodePaymentStateConflict, "cannot %s a payment that is %s", what, from)
}

// Payment is an authorized hold and what became of it. Amounts are in the
// currency's minor unit. Rows are read into it by column name (db tags).
type Payment struct {
	ID             string            `json:"id" db:"id"`
	Object         string            `json:"object" db:"-"`
	TenantID       int64             `json:"tenant_id" db:"tenant_id"`
	Status         Status            `json:"status" db:"status"`
	AmountMinor    int64             `json:"amount_minor" db:"amount_minor"`
	Currency       string            `json:"currency" db:"currency"`
	CapturedMinor  int64             `json:"captured_minor" db:"captured_minor"`
	RefundedMinor  int64             `json:"refunded_minor" db:"refunded_minor"`
	Provider       string            `json:"provider" db:"provider"`
	ProviderRef    *string           `json:"provider_ref" db:"provider_ref"`
	PaymentMethod  string            `json:"payment_method" db:"payment_method"`
	IdempotencyKey string            `json:"idempotency_key" db:"idempotency_key"`
	Description    string            `json:"description" db:"description"`
	Metadata       map[string]string `json:"metadata" db:"metadata"`
	FailureCode    *string           `json:"failure_code" db:"failure_code"`
	CaptureBefore  *time.Time        `json:"capture_before" db:"capture_before"`
	CreatedAt      time.Time         `json:"created_at" db:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at" db:"updated_at"`
	// RoutingVersion is the version of the tenant's routing rules that
	// chose Route; nil when none applied (the request named its provider,
	// or the tenant has no rules and the default connector was used).
	RoutingVersion *int `json:"routing_version" db:"routing_version"`
	// Attempt is the number of the attempt holding the payment, on
	// Provider (the connector); attempts before it certainly moved no
	// money (failover.go).
	Attempt int `json:"attempt" db:"attempt"`
	// Route is the connectors chosen for the payment when it was created,
	// in order; later attempts follow it.
	Route []string `json:"-" db:"route"`
	// OnExpiry is what payorch does with the hold shortly before
	// CaptureBefore (SweepHolds, hold.go): capture it, cancel it, or nothing.
	OnExpiry OnExpiry `json:"on_expiry" db:"on_expiry"`
	// ExtendedAuthorization says the authorize asked the provider for its
	// longest hold (Stripe's request_extended_authorization).
	ExtendedAuthorization bool `json:"extended_authorization" db:"extended_authorization"`
	// Card is the card of a method of payorch's vault, as anyone may see
	// it; nil for a provider's own token.
	Card *CardSummary `json:"card" db:"card"`
	// ReturnURL is where the provider sends the shopper back after an
	// authentication challenge (3-D Secure); nil when the request gave
	// none, and then no challenge can be issued (authentication.go).
	ReturnURL *string `json:"return_url" db:"return_url"`
	// NextAction is what the shopper must do while the payment is
	// requires_action; nil in every other state.
	NextAction *NextAction `json:"next_action" db:"-"`
	// NextActionURL and ActionExpiresAt are the challenge's page and when
	// it is abandoned, kept after it ended for the payment's history;
	// NextAction shows them while it waits.
	NextActionURL   *string    `json:"-" db:"next_action_url"`
	ActionExpiresAt *time.Time `json:"-" db:"action_expires_at"`
	// RequestThreeDS says the current attempt asks its connector to
	// authenticate the cardholder (the retry after an
	// authentication_required decline).
	RequestThreeDS bool `json:"-" db:"request_three_ds"`
	// IncrementalAuthorization, Multicapture and Overcapture say what the
	// connector granted of what the authorization asked for (flexhold.go);
	// nil when it did not ask.
	IncrementalAuthorization *Grant `json:"incremental_authorization" db:"incremental_authorization"`
	Multicapture             *Grant `json:"multicapture" db:"multicapture"`
	Overcapture              *Grant `json:"overcapture" db:"overcapture"`
	// MaxCapturableMinor is, with overcapture granted, the most that may
	// be captured in all.
	MaxCapturableMinor *int64 `json:"max_capturable_minor" db:"max_capturable_minor"`
	// MaxAmountMinor is, with increments granted, the most the hold may
	// be raised to, when the connector states it.
	MaxAmountMinor *int64 `json:"-" db:"max_amount_minor"`
}

// paymentColumns are the columns every statement that returns a payment
// returns, read into a paymentRow by name (a column missing or left over
// fails the read instead of shifting the others). One list, so that a new
// column of payments is added once and no statement can lag behind.
const paymentColumns = `tenant_id, id, status, amount_minor, currency, captured_minor, refunded_minor,
		provider, provider_ref, payment_method, idempotency_key, description, metadata, failure_code,
		capture_before, created_at, updated_at, routing_version, route, attempt, on_expiry, extended_authorization,
		card, return_url, next_action_url, action_expires_at, request_three_ds, incremental_authorization, multicapture,
		overcapture, max_capturable_minor, max_amount_minor, request_hash, field_hashes`

// paymentRow is a payments row as statements return it (paymentColumns):
// the Payment and the fingerprint of the request that created it.
type paymentRow struct {
	Payment
	RequestHash []byte            `db:"request_hash"`
	FieldHashes map[string]string `db:"field_hashes"`
}

// scanPaymentRow reads a paymentRow by column name.
func scanPaymentRow(row pgx.CollectableRow) (paymentRow, error) {
	r, err := pgx.RowToStructByName[paymentRow](row)
	r.Payment.normalize()
	return r, err
}

// scanPayment reads a Payment from a row of a paymentRow's columns.
func scanPayment(row pgx.CollectableRow) (Payment, error) {
	r, err := scanPaymentRow(row)
	return r.Payment, err
}

// normalize completes a Payment as read: its object name, metadata never
// nil, times in UTC.
func (p *Payment) normalize() {
	p.Object = "payment"
	if p.Metadata == nil {
		p.Metadata = map[string]string{}
	}
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	if p.CaptureBefore != nil {
		t := p.CaptureBefore.UTC()
		p.CaptureBefore = &t
	}
	if p.ActionExpiresAt != nil {
		t := p.ActionExpiresAt.UTC()
		p.ActionExpiresAt = &t
	}
	// Read from a row, next_action is made of its columns; decoded from
	// an event's object (which has no next_action_url), it is as decoded.
	if p.NextActionURL != nil {
		p.NextAction = nil
		if p.Status == StatusRequiresAction {
			p.NextAction = &NextAction{Type: NextActionRedirect, URL: *p.NextActionURL, ReturnURL: p.ReturnURL,
				ExpiresAt: p.ActionExpiresAt}
		}
	}
}

// selectPaymentSQL reads one payment of a tenant.
const selectPaymentSQL = `
	SELECT ` + paymentColumns + `
	FROM payments
	WHERE tenant_id = @tenant_id AND id = @payment_id`

// readPayment reads payment id of tenant (selectPaymentSQL).
func (s *Service) readPayment(ctx context.Context, tenantID int64, id string) (Payment, error) {
	rows, _ := s.pool.Query(ctx, selectPaymentSQL, NamedArgs{"tenant_id": tenantID, "payment_id": id})
	return pgx.CollectExactlyOneRow(rows, scanPayment)
}

// ValidText reports whether s can be stored in a PostgreSQL text or jsonb
// value: valid UTF-8 without the NUL character.
func ValidText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// PaymentID is the deterministic id of the payment a tenant creates under
// an idempotency key: a retry, even after the key expired, names the same
// payment.
func PaymentID(tenantID int64, key string) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(tenantID, 10) + ":" + key))
	return "pay_" + hex.EncodeToString(sum[:16])
}

// operationID is the deterministic id of a capture, cancel or refund.
func operationID(prefix string, tenantID int64, operation, key string) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(tenantID, 10) + ":" + operation + ":" + key))
	return prefix + hex.EncodeToString(sum[:16])
}

// Scope says whose payments a read may see: a merchant's own tenant
// (TenantID > 0) or every tenant (staff, TenantID == 0).
type Scope struct {
	TenantID int64
	// Staff also sees what belongs to no tenant: the staff events
	// (reconciliation.run.…) and the staff webhook endpoints. It is set
	// for finance and admin keys, the roles of reconciliation.
	Staff bool
}

// ScopeOf is the read scope of p. A publishable key reads nothing (the
// HTTP API lets it only create payment methods); were it ever to reach a
// read, it would see its own tenant, never every tenant.
func ScopeOf(p Principal) Scope {
	switch p.Role {
	case RoleMerchant, RolePublishable:
		return Scope{TenantID: p.TenantID}
	case RoleFinance, RoleAdmin:
		return Scope{Staff: true}
	}
	return Scope{}
}

func notFound(id string) error {
	return &Error{Code: CodeNotFound, Message: "no payment " + strconv.Quote(id)}
}

// GetPayment reads one payment. Another tenant's payment is not_found.
func (s *Service) GetPayment(ctx context.Context, sc Scope, id string) (Payment, error) {
	const q = `
		SELECT ` + paymentColumns + `
		FROM payments
		WHERE id = $1 AND ($2::bigint = 0 OR tenant_id = $2)`
	rows, _ := s.pool.Query(ctx, q, id, sc.TenantID)
	p, err := pgx.CollectExactlyOneRow(rows, scanPayment)
	if isNoRows(err) {
		return Payment{}, notFound(id)
	}
	if err != nil {
		return Payment{}, internalf("get payment: %w", err)
	}
	return p, nil
}

// PaymentsByKey finds the payments created under an idempotency key: at
// most one per tenant; staff scope may see several tenants'.
func (s *Service) PaymentsByKey(ctx context.Context, sc Scope, key string) ([]Payment, error) {
	const q = `
		SELECT ` + paymentColumns + `
		FROM payments
		WHERE idempotency_key = $1 AND ($2::bigint = 0 OR tenant_id = $2)
		ORDER BY created_at DESC, id LIMIT 100`
	rows, _ := s.pool.Query(ctx, q, key, sc.TenantID)
	ps, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return nil, internalf("payments by key: %w", err)
	}
	return ps, nil
}

// ListFilter selects a page of a tenant's payments, newest first.
type ListFilter struct {
	Status     Status
	CreatedGTE *time.Time
	CreatedLT  *time.Time
	// ExpiringBefore keeps the authorized payments whose hold lapses
	// before it (capture_before < ExpiringBefore), lapsed ones included
	// until the sweeper records them expired.
	ExpiringBefore *time.Time
	Limit          int
	StartingAfter  string
}

// ListPayments returns a page of payments and whether more follow.
// Errors: validation_failed (bad cursor).
func (s *Service) ListPayments(ctx context.Context, sc Scope, f ListFilter) ([]Payment, bool, error) {
	if f.Limit <= 0 {
		f.Limit = 10
	}
	if f.Limit > 100 {
		return nil, false, ParamError("limit", "limit must be 1 to 100")
	}
	var cursorAt *time.Time
	cursorID := ""
	if f.StartingAfter != "" {
		c, err := s.GetPayment(ctx, sc, f.StartingAfter)
		if ErrorCode(err) == CodeNotFound {
			return nil, false, ParamError("starting_after", "starting_after names no payment of yours")
		}
		if err != nil {
			return nil, false, err
		}
		cursorAt, cursorID = &c.CreatedAt, c.ID
	}
	const q = `
		SELECT ` + paymentColumns + `
		FROM payments
		WHERE ($1::bigint = 0 OR tenant_id = $1)
		  AND ($2 = '' OR status = $2)
		  AND ($3::timestamptz IS NULL OR created_at >= $3)
		  AND ($4::timestamptz IS NULL OR created_at < $4)
		  AND ($5::timestamptz IS NULL OR (created_at, id) < ($5, $6))
		  AND ($8::timestamptz IS NULL OR (status = 'authorized' AND capture_before < $8))
		ORDER BY created_at DESC, id DESC
		LIMIT $7`
	rows, _ := s.pool.Query(ctx, q, sc.TenantID, string(f.Status), f.CreatedGTE, f.CreatedLT, cursorAt, cursorID, f.Limit+1,
		f.ExpiringBefore)
	ps, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return nil, false, internalf("list payments: %w", err)
	}
	more := len(ps) > f.Limit
	if more {
		ps = ps[:f.Limit]
	}
	return ps, more, nil
}

// Event is one entry of a payment's append-only history.
type Event struct {
	ID           int64          `json:"id" db:"id"`
	PaymentID    string         `json:"payment_id" db:"payment_id"`
	Type         string         `json:"type" db:"type"`
	FromStatus   *string        `json:"from_status,omitempty" db:"from_status"`
	ToStatus     *string        `json:"to_status,omitempty" db:"to_status"`
	Operation    *string        `json:"operation,omitempty" db:"operation"`
	ForwardedKey *string        `json:"forwarded_key,omitempty" db:"forwarded_key"`
	Outcome      *string        `json:"outcome,omitempty" db:"outcome"`
	LatencyMS    *float64       `json:"latency_ms,omitempty" db:"latency_ms"`
	Detail       map[string]any `json:"detail" db:"detail"`
	CreatedAt    time.Time      `json:"created_at" db:"created_at"`
}

// PaymentEvents returns a payment's history, oldest first. Errors:
// not_found.
func (s *Service) PaymentEvents(ctx context.Context, sc Scope, id string) ([]Event, error) {
	p, err := s.GetPayment(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	const q = `
		SELECT id, payment_id, type, from_status, to_status, operation, forwarded_key, outcome, latency_ms, detail, created_at
		FROM payment_events WHERE tenant_id = $1 AND payment_id = $2 ORDER BY id`
	rows, _ := s.pool.Query(ctx, q, p.TenantID, p.ID)
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return nil, internalf("payment events: %w", err)
	}
	for i := range evs {
		evs[i].CreatedAt = evs[i].CreatedAt.UTC()
	}
	return evs, nil
}

// stateEvent appends a state change to a payment's history.
func stateEvent(ctx context.Context, tx pgx.Tx, tenantID int64, paymentID string, from *Status, to Status, detail map[string]any, at time.Time) error {
	if detail == nil {
		detail = map[string]any{}
	}
	const q = `
		INSERT INTO payment_events (tenant_id, payment_id, type, from_status, to_status, detail, created_at)
		VALUES (@tenant_id, @payment_id, 'state_changed', @from_status, @to_status, @detail, @at)`
	_, err := tx.Exec(ctx, q, NamedArgs{"tenant_id": tenantID, "payment_id": paymentID,
		"from_status": from, "to_status": to, "detail": detail, "at": at})
	return err
}
