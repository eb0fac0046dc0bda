package webhooks

// Webhook endpoints: where a tenant's events are delivered,
// each with the secret that signs its deliveries (orchestrator/webhooksig).
// Staff endpoints (finance's, with no tenant) receive the staff events:
// reconciliation runs finishing (orchestrator.ReconciliationEventTypes), and the
// disabling of a staff endpoint; merchants' endpoints receive their
// tenant's events and never the staff ones.
// This file manages the endpoints and reads and resets their deliveries;
// the delivery worker sends them.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// WebhookEndpoint is a URL a tenant receives its events at, or, for a
// staff endpoint, finance receives the staff events at.
type WebhookEndpoint struct {
	ID     string `json:"id" db:"id"`
	Object string `json:"object" db:"-"`
	// TenantID is the owning tenant; nil for a staff endpoint.
	TenantID *int64 `json:"tenant_id" db:"tenant_id"`
	URL      string `json:"url" db:"url"`
	// EventTypes are the types it receives (orchestrator.EventTypes); "*"
	// is all.
	EventTypes  []string `json:"event_types" db:"event_types"`
	Description string   `json:"description" db:"description"`
	// Enabled endpoints receive deliveries; DisabledReason says why one
	// does not (its owner disabled it, or it failed for 3 days).
	Enabled        bool    `json:"enabled" db:"enabled"`
	DisabledReason *string `json:"disabled_reason" db:"disabled_reason"`
	// FailingSince is when the current run of failed deliveries began; nil
	// while the endpoint answers.
	FailingSince *time.Time `json:"failing_since" db:"failing_since"`
	CreatedAt    time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at" db:"updated_at"`
	// Deleted is set only in the answer of DeleteWebhookEndpoint.
	Deleted bool `json:"deleted,omitempty" db:"-"`
	// Secret signs the deliveries. It is set only in the answers of
	// CreateWebhookEndpoint and RotateWebhookSecret, shown that once: no
	// read returns it, and it is never logged.
	Secret string `json:"secret,omitempty" db:"-"`
}

// normalize completes a WebhookEndpoint as read: its object name, times
// in UTC (as every object of the API, and its events, has them).
func (w *WebhookEndpoint) normalize() {
	w.Object = "webhook_endpoint"
	w.CreatedAt, w.UpdatedAt = w.CreatedAt.UTC(), w.UpdatedAt.UTC()
	if w.FailingSince != nil {
		t := w.FailingSince.UTC()
		w.FailingSince = &t
	}
}

// The webhook_endpoint.disabled events carry an endpoint: its renderer
// (the core's outbox renders every event, and cannot import this package).
func init() {
	orchestrator.RegisterEventRenderer("webhook_endpoint", func(stored []byte) (any, error) {
		var w WebhookEndpoint
		if err := json.Unmarshal(stored, &w); err != nil {
			return nil, err
		}
		w.normalize()
		return w, nil
	})
}

// WebhookEndpointInput is what a merchant gives to create an endpoint.
type WebhookEndpointInput struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	Description string   `json:"description"`
}

// Bounds of webhook endpoints.
const (
	// MaxWebhookEndpoints is how many endpoints (not deleted) a tenant
	// may have, and staff too.
	MaxWebhookEndpoints = 20
	// maxWebhookURLLen bounds an endpoint's URL, in bytes.
	maxWebhookURLLen = 2048
	// maxWebhookEventTypes bounds an endpoint's event_types.
	maxWebhookEventTypes = 20
	// maxWebhookDescription bounds a description, in characters.
	maxWebhookDescription = 200
	// SecretRotationOverlap is how long the previous secret keeps signing
	// deliveries after a rotation, beside the new one.
	SecretRotationOverlap = 24 * time.Hour
	// DisabledByOwner is the disabled_reason of an endpoint its owner
	// disabled.
	DisabledByOwner = "disabled by its owner"
)

// webhookEndpointIDPrefix starts every endpoint id (then 32 hex digits).
const webhookEndpointIDPrefix = "we_"

// ValidWebhookEndpointID reports whether id is shaped like an endpoint id
// ("we_" and 32 lowercase hex digits).
func ValidWebhookEndpointID(id string) bool {
	rest, ok := strings.CutPrefix(id, webhookEndpointIDPrefix)
	if !ok || len(rest) != 32 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidateWebhookEndpoint checks in as CreateWebhookEndpoint(tenantID)
// does, without touching the database, so a caller can refuse bad input
// before anything is claimed: a tenant's endpoint (tenantID > 0) may want
// any type but the staff ones, a staff endpoint (tenantID 0) only
// StaffEndpointEventTypes. Errors: validation_failed naming url,
// event_types (or event_types[i]) or description.
func (s *Service) ValidateWebhookEndpoint(tenantID int64, in WebhookEndpointInput) error {
	if err := validateWebhookURL(in.URL, s.allowPrivate); err != nil {
		return err
	}
	if len(in.EventTypes) == 0 {
		return orchestrator.ParamError("event_types", "event_types must list at least one event type, or \"*\" for all")
	}
	if len(in.EventTypes) > maxWebhookEventTypes {
		return orchestrator.ParamError("event_types", "event_types lists at most %d types", maxWebhookEventTypes)
	}
	allowed := endpointEventTypes(tenantID)
	for i, t := range in.EventTypes {
		param := "event_types[" + strconv.Itoa(i) + "]"
		if t != "*" && !slices.Contains(allowed, t) {
			return orchestrator.ParamError(param, "event type must be \"*\" or one of %s", strings.Join(allowed, ", "))
		}
		if slices.Index(in.EventTypes, t) < i {
			return orchestrator.ParamError(param, "event type %q is listed twice", t)
		}
	}
	if !storableText(in.Description) {
		return orchestrator.ParamError("description", "description must be UTF-8 text without NUL")
	}
	if utf8.RuneCountInString(in.Description) > maxWebhookDescription {
		return orchestrator.ParamError("description", "description is longer than %d characters", maxWebhookDescription)
	}
	return nil
}

// StaffEndpointEventTypes are the types a staff endpoint may want ("*"
// is all of them): the staff events.
var StaffEndpointEventTypes = append([]string{orchestrator.EventEndpointDisabled}, orchestrator.ReconciliationEventTypes...)

// endpointEventTypes are the types an endpoint of tenantID may want: the
// staff ones for a staff endpoint (0), every other for a tenant's.
func endpointEventTypes(tenantID int64) []string {
	if tenantID == 0 {
		return StaffEndpointEventTypes
	}
	return slices.DeleteFunc(slices.Clone(orchestrator.EventTypes), func(t string) bool {
		return slices.Contains(orchestrator.ReconciliationEventTypes, t)
	})
}

// storableText reports whether PostgreSQL can store s as text.
func storableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// validateWebhookURL checks an endpoint's URL: absolute http or https
// (https only unless allowPrivate), with a host, no user info or fragment,
// at most 2048 bytes; unless allowPrivate, a host that is "localhost" or a
// literal address the delivery worker would refuse (blockedAddress) is
// refused. Names are resolved only when sending: the delivery worker
// checks the addresses it connects to. Errors: validation_failed on url.
func validateWebhookURL(raw string, allowPrivate bool) error {
	bad := func(format string, args ...any) error { return orchestrator.ParamError("url", format, args...) }
	if raw == "" {
		return bad("url is required")
	}
	if len(raw) > maxWebhookURLLen {
		return bad("url is longer than %d bytes", maxWebhookURLLen)
	}
	if !storableText(raw) {
		return bad("url must be UTF-8 text without NUL")
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return bad("url must be an absolute http or https URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	case u.Scheme == "http":
		return bad("url must use https")
	default:
		return bad("url must be an absolute http or https URL")
	}
	host := u.Hostname()
	if host == "" {
		return bad("url must name a host")
	}
	if u.User != nil {
		return bad("url must not carry user information")
	}
	if strings.Contains(raw, "#") {
		return bad("url must not carry a fragment")
	}
	if !allowPrivate && privateHost(host) {
		return bad("url must not point at a private, loopback, link-local or other special-purpose address")
	}
	return nil
}

// privateHost reports whether host (a URL's hostname) is "localhost" (or a
// name under it) or a literal address webhooks may not reach
// (blockedAddress: the worker's own check, so both agree).
func privateHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	addr, err := netip.ParseAddr(h)
	if err != nil {
		return false // a name: checked by the worker once resolved
	}
	return blockedAddress(addr)
}

// endpointURLFor is an endpoint URL as sc is shown it
// (orchestrator.Scope.FullEndpointURLs).
func endpointURLFor(sc orchestrator.Scope, raw string) string {
	if sc.FullEndpointURLs() {
		return raw
	}
	return orchestrator.RedactURL(raw)
}

// endpointVisible is the condition on webhook_endpoints of what @tenant_id
// and @staff (an orchestrator.Scope) may see and change: a merchant its tenant's
// endpoints, staff (finance) the staff endpoints only.
const endpointVisible = `(tenant_id = @tenant_id OR (@staff AND tenant_id IS NULL))`

// webhookEndpointColumns is what every statement reading endpoints returns.
const webhookEndpointColumns = `id, tenant_id, url, event_types, description, enabled, disabled_reason,
	failing_since, created_at, updated_at`

// collectEndpoint reads the one endpoint rows hold, in the eyes of sc: its
// URL redacted unless sc.FullEndpointURLs. Errors: not_found, internal.
func collectEndpoint(rows pgx.Rows, sc orchestrator.Scope, id, what string) (WebhookEndpoint, error) {
	ep, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[WebhookEndpoint])
	if errors.Is(err, pgx.ErrNoRows) {
		return WebhookEndpoint{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no webhook endpoint %q", id)
	}
	if err != nil {
		return WebhookEndpoint{}, orchestrator.Internalf("%s webhook endpoint: %w", what, err)
	}
	ep.normalize()
	ep.URL = endpointURLFor(sc, ep.URL)
	return ep, nil
}

// CreateWebhookEndpoint registers a webhook endpoint for tenantID, or a
// staff endpoint if tenantID is 0, and returns it with its signing secret,
// shown this once. createdBy is the creating API key's id. Errors:
// validation_failed (ValidateWebhookEndpoint), conflict (the tenant, or
// staff, has MaxWebhookEndpoints already), not_found (no such tenant).
func (s *Service) CreateWebhookEndpoint(ctx context.Context, tenantID int64, in WebhookEndpointInput, createdBy string) (WebhookEndpoint, error) {
	if err := s.ValidateWebhookEndpoint(tenantID, in); err != nil {
		return WebhookEndpoint{}, err
	}
	secret, err := webhooksig.NewSecret()
	if err != nil {
		return WebhookEndpoint{}, orchestrator.Internalf("webhook secret: %w", err)
	}
	var idb [16]byte
	_, _ = rand.Read(idb[:]) // never fails on Linux (Go ≥ 1.24 panics instead)
	id := webhookEndpointIDPrefix + hex.EncodeToString(idb[:])
	const q = `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, description, secret, created_by, created_at, updated_at)
		SELECT @id, nullif(@tenant_id::bigint, 0), @url, @event_types, @description, @secret, @created_by, @now, @now
		WHERE (SELECT count(*) FROM webhook_endpoints WHERE ` + endpointVisible + ` AND deleted_at IS NULL) < @max
		RETURNING ` + webhookEndpointColumns
	var ep WebhookEndpoint
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockEndpointOwner(ctx, tx, tenantID); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, q, orchestrator.NamedArgs{"id": id, "tenant_id": tenantID, "staff": tenantID == 0, "url": in.URL, "event_types": in.EventTypes,
			"description": in.Description, "secret": secret, "created_by": createdBy, "now": s.now(), "max": MaxWebhookEndpoints})
		var err error
		ep, err = collectEndpoint(rows, orchestrator.Scope{TenantID: tenantID, Staff: tenantID == 0}, id, "create")
		if orchestrator.ErrorCode(err) == orchestrator.CodeNotFound {
			return orchestrator.Errorf(orchestrator.CodeConflict, "a tenant (or staff) has at most %d webhook endpoints: delete one first", MaxWebhookEndpoints)
		}
		return err
	})
	if err != nil {
		return WebhookEndpoint{}, err
	}
	// Its creator gave the URL: it is shown whole in this answer, as the
	// secret is, even to staff (FullEndpointURLs).
	ep.URL, ep.Secret = in.URL, secret
	return ep, nil
}

// lockEndpointOwner serializes the creations of endpoints of tenantID (0:
// staff) until tx ends, so the count of its endpoints holds: the tenant's
// row lock, or for staff an advisory lock. Errors: not_found (no such
// tenant), internal.
func lockEndpointOwner(ctx context.Context, tx pgx.Tx, tenantID int64) error {
	const lockTenant = `SELECT id FROM tenants WHERE id = @tenant_id FOR NO KEY UPDATE`
	const lockStaff = `SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:staff', 0))`
	if tenantID == 0 {
		if _, err := tx.Exec(ctx, lockStaff); err != nil {
			return orchestrator.Internalf("lock staff endpoints: %w", err)
		}
		return nil
	}
	var got int64
	if err := tx.QueryRow(ctx, lockTenant, orchestrator.NamedArgs{"tenant_id": tenantID}).Scan(&got); errors.Is(err, pgx.ErrNoRows) {
		return orchestrator.Errorf(orchestrator.CodeNotFound, "tenant %d does not exist", tenantID)
	} else if err != nil {
		return orchestrator.Internalf("lock tenant: %w", err)
	}
	return nil
}

// ListWebhookEndpoints returns the endpoints (not deleted) visible in sc,
// oldest first.
func (s *Service) ListWebhookEndpoints(ctx context.Context, sc orchestrator.Scope) ([]WebhookEndpoint, error) {
	const q = `SELECT ` + webhookEndpointColumns + ` FROM webhook_endpoints
		WHERE deleted_at IS NULL AND ` + endpointVisible + `
		ORDER BY created_at, id`
	rows, _ := s.pool.Query(ctx, q, orchestrator.NamedArgs{"tenant_id": sc.TenantID, "staff": sc.Staff})
	eps, err := pgx.CollectRows(rows, pgx.RowToStructByName[WebhookEndpoint])
	if err != nil {
		return nil, orchestrator.Internalf("list webhook endpoints: %w", err)
	}
	for i := range eps {
		eps[i].normalize()
		eps[i].URL = endpointURLFor(sc, eps[i].URL)
	}
	return eps, nil
}

// GetWebhookEndpoint returns one endpoint (not deleted) visible in sc.
// Errors: not_found.
func (s *Service) GetWebhookEndpoint(ctx context.Context, sc orchestrator.Scope, id string) (WebhookEndpoint, error) {
	if !ValidWebhookEndpointID(id) {
		return WebhookEndpoint{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no webhook endpoint %q", id)
	}
	const q = `SELECT ` + webhookEndpointColumns + ` FROM webhook_endpoints
		WHERE id = @id AND deleted_at IS NULL AND ` + endpointVisible
	rows, _ := s.pool.Query(ctx, q, orchestrator.NamedArgs{"id": id, "tenant_id": sc.TenantID, "staff": sc.Staff})
	return collectEndpoint(rows, sc, id, "read")
}

// UpdateWebhookEndpoint enables or disables an endpoint. Disabling records
// DisabledByOwner; enabling clears disabled_reason and failing_since, so
// the endpoint gets 3 more days before it is disabled again, and closes
// its delivery breaker (worker.go): its owner says it is back. A disabled
// endpoint's pending deliveries stay pending, and are sent once it is
// enabled again (unless given up meanwhile). Errors: not_found.
func (s *Service) UpdateWebhookEndpoint(ctx context.Context, sc orchestrator.Scope, id string, enabled bool) (WebhookEndpoint, error) {
	if !ValidWebhookEndpointID(id) {
		return WebhookEndpoint{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no webhook endpoint %q", id)
	}
	const q = `
		UPDATE webhook_endpoints SET enabled = @enabled,
			disabled_reason = CASE WHEN @enabled THEN NULL WHEN enabled THEN @reason::text ELSE disabled_reason END,
			failing_since = CASE WHEN @enabled THEN NULL ELSE failing_since END,
			consecutive_timeouts = CASE WHEN @enabled THEN 0 ELSE consecutive_timeouts END,
			breaker_opens = CASE WHEN @enabled THEN 0 ELSE breaker_opens END,
			paused_until = CASE WHEN @enabled THEN NULL ELSE paused_until END,
			updated_at = @now
		WHERE id = @id AND deleted_at IS NULL AND ` + endpointVisible + `
		RETURNING ` + webhookEndpointColumns
	rows, _ := s.pool.Query(ctx, q, orchestrator.NamedArgs{"id": id, "tenant_id": sc.TenantID, "staff": sc.Staff, "enabled": enabled,
		"reason": DisabledByOwner, "now": s.now()})
	return collectEndpoint(rows, sc, id, "update")
}

// DeleteWebhookEndpoint deletes an endpoint: it receives nothing more, and
// its pending deliveries are marked failed (its row and history stay).
// The answer is the endpoint as deleted (Deleted set). Errors: not_found.
func (s *Service) DeleteWebhookEndpoint(ctx context.Context, sc orchestrator.Scope, id string) (WebhookEndpoint, error) {
	if !ValidWebhookEndpointID(id) {
		return WebhookEndpoint{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no webhook endpoint %q", id)
	}
	const q = `
		WITH deleted AS (
			UPDATE webhook_endpoints SET deleted_at = @now, enabled = false, updated_at = @now
			WHERE id = @id AND deleted_at IS NULL AND ` + endpointVisible + `
			RETURNING ` + webhookEndpointColumns + `
		), given_up AS (
			UPDATE webhook_deliveries SET status = 'failed'
			WHERE endpoint_id = (SELECT id FROM deleted) AND status = 'pending'
		)
		SELECT ` + webhookEndpointColumns + ` FROM deleted`
	rows, _ := s.pool.Query(ctx, q, orchestrator.NamedArgs{"id": id, "tenant_id": sc.TenantID, "staff": sc.Staff, "now": s.now()})
	ep, err := collectEndpoint(rows, sc, id, "delete")
	if err != nil {
		return WebhookEndpoint{}, err
	}
	ep.Deleted = true
	return ep, nil
}

// RotateWebhookSecret gives an endpoint a new signing secret, returned
// this once. The previous secret keeps signing deliveries beside the new
// one for SecretRotationOverlap, so receivers can switch without missing
// a delivery; rotating again within that time replaces it (the secret
// before is dropped at once). Errors: not_found.
func (s *Service) RotateWebhookSecret(ctx context.Context, sc orchestrator.Scope, id string) (WebhookEndpoint, error) {
	if !ValidWebhookEndpointID(id) {
		return WebhookEndpoint{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no webhook endpoint %q", id)
	}
	secret, err := webhooksig.NewSecret()
	if err != nil {
		return WebhookEndpoint{}, orchestrator.Internalf("webhook secret: %w", err)
	}
	const q = `
		UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = @until,
			secret = @secret, updated_at = @now
		WHERE id = @id AND deleted_at IS NULL AND ` + endpointVisible + `
		RETURNING ` + webhookEndpointColumns
	now := s.now()
	rows, _ := s.pool.Query(ctx, q, orchestrator.NamedArgs{"id": id, "tenant_id": sc.TenantID, "staff": sc.Staff, "secret": secret, "now": now,
		"until": now.Add(SecretRotationOverlap)})
	ep, err := collectEndpoint(rows, sc, id, "rotate")
	if err != nil {
		return WebhookEndpoint{}, err
	}
	ep.Secret = secret
	return ep, nil
}
