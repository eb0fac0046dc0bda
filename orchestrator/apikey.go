package orchestrator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Role is what an API key may do.
type Role string

// The roles (SPEC: Auth).
const (
	// RoleMerchant acts for exactly one tenant: payments.
	RoleMerchant Role = "merchant"
	// RoleSupport reads payments of every tenant.
	RoleSupport Role = "support"
	// RoleFinance runs and reviews reconciliation and reads payments.
	RoleFinance Role = "finance"
	// RoleAdmin manages tenants and keys.
	RoleAdmin Role = "admin"
	// RolePublishable belongs to one tenant, like a merchant key, but is
	// meant to be public (it sits in a shopper's browser): it may only
	// create payment methods, never read anything back.
	RolePublishable Role = "publishable"
)

// ParseRole returns the Role named s, or a validation_failed *Error.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleMerchant, RoleSupport, RoleFinance, RoleAdmin, RolePublishable:
		return r, nil
	}
	return "", ParamError("role", "role must be one of merchant, support, finance, admin, publishable")
}

// OfTenant reports whether keys of role r belong to one tenant (merchant
// and publishable keys) rather than acting for staff across tenants.
func (r Role) OfTenant() bool {
	return r == RoleMerchant || r == RolePublishable
}

// Principal is the authenticated caller of a request.
type Principal struct {
	KeyID string
	Role  Role
	// TenantID is the tenant a merchant or publishable key acts for; 0
	// for staff roles.
	TenantID int64
}

// APIKey is an API key as stored: everything but the secret.
type APIKey struct {
	ID          string     `json:"id" db:"id"`
	Role        Role       `json:"role" db:"role"`
	TenantID    *int64     `json:"tenant_id" db:"tenant_id"`
	Description string     `json:"description" db:"description"`
	CreatedAt   time.Time  `json:"created_at" db:"created_at"`
	LastUsedAt  *time.Time `json:"last_used_at" db:"last_used_at"`
	RevokedAt   *time.Time `json:"revoked_at" db:"revoked_at"`
}

// API keys read "pok_<16 hex id>_<43 base64url secret>", publishable keys
// "ppk_…" (so that one is recognised at a glance, in a page's source or a
// secret scanner's report, as fit to publish, and a secret key as not). The
// id part is public (it names the key in listings and logs, as key_<id>);
// only the SHA-256 of the whole key, prefix included, is stored, so a
// publishable key's secret presented with the other prefix is refused. The
// secret has 256 bits of entropy, so a fast hash is the right one: there is
// nothing to brute-force.
const (
	keyPrefix         = "pok_"
	publishablePrefix = "ppk_"
	keyIDPrefix       = "key_"
	keyIDHexLen       = 16
	keySecretBytes    = 32
	// lastUsedGranularity bounds how often a key's last_used_at is written.
	lastUsedGranularity = time.Minute
)

var errUnauthorized = &Error{Code: CodeUnauthorized, Message: "a valid API key is required: Authorization: Bearer <key>"}

// newKeyMaterial makes a key of role: its id, the key itself and its hash.
func newKeyMaterial(role Role) (id, secret string, hash []byte) {
	idb := make([]byte, keyIDHexLen/2)
	sb := make([]byte, keySecretBytes)
	// crypto/rand.Read never fails on Linux (Go ≥ 1.24 panics instead).
	_, _ = rand.Read(idb)
	_, _ = rand.Read(sb)
	hexID := hex.EncodeToString(idb)
	prefix := keyPrefix
	if role == RolePublishable {
		prefix = publishablePrefix
	}
	secret = prefix + hexID + "_" + base64.RawURLEncoding.EncodeToString(sb)
	sum := sha256.Sum256([]byte(secret))
	return keyIDPrefix + hexID, secret, sum[:]
}

// parseKey splits a presented key into its stored id; ok is false for
// anything not shaped like a payorch key.
func parseKey(key string) (id string, ok bool) {
	rest, found := strings.CutPrefix(key, keyPrefix)
	if !found {
		if rest, found = strings.CutPrefix(key, publishablePrefix); !found {
			return "", false
		}
	}
	hexID, secret, found := strings.Cut(rest, "_")
	if !found || len(hexID) != keyIDHexLen || len(secret) != base64.RawURLEncoding.EncodedLen(keySecretBytes) {
		return "", false
	}
	if _, err := hex.DecodeString(hexID); err != nil {
		return "", false
	}
	return keyIDPrefix + hexID, true
}

// KeyShaped reports whether key is shaped like an API key, so that
// Authenticate would look its id up; anything else it refuses at once.
func KeyShaped(key string) bool {
	_, ok := parseKey(key)
	return ok
}

// CreateAPIKey creates a key with role for tenantID (required for merchant
// and publishable keys, must be 0 otherwise) and returns it with the key itself, which is
// shown this once and never stored. Errors: validation_failed, not_found
// (no such tenant).
func (s *Service) CreateAPIKey(ctx context.Context, role Role, tenantID int64, description string) (APIKey, string, error) {
	var k APIKey
	var secret string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		k, secret, err = s.createAPIKey(ctx, tx, role, tenantID, description)
		return err
	})
	s.keyCreated(k.ID)
	return k, secret, err
}

// keyCreated forgets that id authenticated nobody, once its key's
// transaction has committed (or may have: it is called on errors too), so
// this instance accepts the key at once; the others forget it when the
// notification reaches them. A read that began before is not remembered
// after (the generation advances).
func (s *Service) keyCreated(id string) {
	if id != "" {
		s.unknownKeys.invalidate(id)
	}
}

func (s *Service) createAPIKey(ctx context.Context, tx pgx.Tx, role Role, tenantID int64, description string) (APIKey, string, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return APIKey{}, "", err
	}
	if role.OfTenant() && tenantID <= 0 {
		return APIKey{}, "", ParamError("tenant_id", "a %s key needs a tenant", role)
	}
	if !role.OfTenant() && tenantID != 0 {
		return APIKey{}, "", ParamError("tenant_id", "only merchant and publishable keys belong to a tenant; %s keys see every tenant", role)
	}
	if len(description) > 200 {
		return APIKey{}, "", ParamError("description", "description is longer than 200 characters")
	}
	id, secret, hash := newKeyMaterial(role)
	if s.keyMaterial != nil {
		id, secret, hash = s.keyMaterial()
	}
	var tenant *int64
	if tenantID != 0 {
		tenant = &tenantID
	}
	const q = `
		INSERT INTO api_keys (id, tenant_id, role, secret_hash, description, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING id, role, tenant_id, description, created_at, last_used_at, revoked_at`
	rows, _ := tx.Query(ctx, q, id, tenant, role, hash, description, s.now())
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIKey])
	if err != nil {
		if code, con := constraintOf(err); code == pgForeignKeyViolation && con == "api_keys_tenant_id_fkey" {
			return APIKey{}, "", Errorf(CodeNotFound, "tenant %d does not exist", tenantID)
		}
		return APIKey{}, "", internalf("create api key: %w", err)
	}
	return k, secret, nil
}

// ListAPIKeys lists keys, newest first; tenantID > 0 keeps that tenant's.
func (s *Service) ListAPIKeys(ctx context.Context, tenantID int64) ([]APIKey, error) {
	const q = `
		SELECT id, role, tenant_id, description, created_at, last_used_at, revoked_at
		FROM api_keys
		WHERE $1::bigint = 0 OR tenant_id = $1
		ORDER BY created_at DESC, id`
	rows, _ := s.pool.Query(ctx, q, tenantID)
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[APIKey])
	if err != nil {
		return nil, internalf("list api keys: %w", err)
	}
	return keys, nil
}

// RevokeAPIKey revokes a key at once; revoking a revoked key changes
// nothing. Errors: not_found.
func (s *Service) RevokeAPIKey(ctx context.Context, id string) (APIKey, error) {
	const q = `
		UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2)
		WHERE id = $1
		RETURNING id, role, tenant_id, description, created_at, last_used_at, revoked_at`
	rows, _ := s.pool.Query(ctx, q, id, s.now())
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIKey])
	// Committed (or maybe, on an error): this instance drops the key now,
	// after the commit, so no read from before it is cached after it; the
	// others drop it when the notification reaches them.
	s.keys.invalidate(id)
	if isNoRows(err) {
		return APIKey{}, Errorf(CodeNotFound, "no API key %q", id)
	}
	if err != nil {
		return APIKey{}, internalf("revoke api key: %w", err)
	}
	return k, nil
}

// dummyHash is compared against when a presented key names no stored key, so
// an unknown id costs the same comparison as a wrong secret.
var dummyHash = make([]byte, sha256.Size)

// Authenticate verifies a presented API key and returns its Principal.
// With the key cache on (StartKeyCache), a key verified before is read from
// memory; the presented secret's hash is compared either way. An id found
// unknown or revoked lately is refused from memory (unknownKeys).
// Errors: unauthorized (malformed, unknown, wrong or revoked key), internal.
func (s *Service) Authenticate(ctx context.Context, key string) (Principal, error) {
	id, ok := parseKey(key)
	if !ok {
		return Principal{}, errUnauthorized
	}
	sum := sha256.Sum256([]byte(key))
	now := s.now()
	if e, touch, ok := s.keys.lookup(id, now); ok {
		if subtle.ConstantTimeCompare(sum[:], e.hash[:]) != 1 {
			return Principal{}, errUnauthorized
		}
		if touch {
			s.touchAPIKey(ctx, id, now)
		}
		return Principal{KeyID: id, Role: e.role, TenantID: e.tenantID}, nil
	}
	if _, ok := s.unknownKeys.lookup(id); ok {
		subtle.ConstantTimeCompare(sum[:], dummyHash)
		return Principal{}, errUnauthorized
	}
	// Read before the database: an invalidation after this point keeps
	// what the SELECT returns out of the caches.
	gen, unknownGen := s.keys.generation(), s.unknownKeys.generation()
	const q = `
		SELECT role, coalesce(tenant_id, 0), secret_hash, revoked_at IS NOT NULL, last_used_at
		FROM api_keys WHERE id = $1`
	var (
		p        = Principal{KeyID: id}
		stored   []byte
		revoked  bool
		lastUsed *time.Time
	)
	err := s.pool.QueryRow(ctx, q, id).Scan(&p.Role, &p.TenantID, &stored, &revoked, &lastUsed)
	if isNoRows(err) {
		subtle.ConstantTimeCompare(sum[:], dummyHash)
		s.unknownKeys.put(unknownGen, id, struct{}{})
		return Principal{}, errUnauthorized
	}
	if err != nil {
		return Principal{}, internalf("authenticate: %w", err)
	}
	if subtle.ConstantTimeCompare(sum[:], stored) != 1 {
		return Principal{}, errUnauthorized
	}
	if revoked {
		s.unknownKeys.put(unknownGen, id, struct{}{})
		return Principal{}, errUnauthorized
	}
	e := cachedKey{role: p.Role, tenantID: p.TenantID}
	if lastUsed != nil {
		e.lastUsed = *lastUsed
	}
	if lastUsedDue(e.lastUsed, now) {
		s.touchAPIKey(ctx, id, now)
		e.lastUsed = now
	}
	if copy(e.hash[:], stored) == len(e.hash) {
		s.keys.put(gen, id, e)
	}
	return p, nil
}

// touchAPIKey records that key id was used at now. Best effort and rare
// (once a minute per key): a failure must not fail the request.
func (s *Service) touchAPIKey(ctx context.Context, id string, now time.Time) {
	const upd = `UPDATE api_keys SET last_used_at = $2 WHERE id = $1`
	if _, err := s.pool.Exec(ctx, upd, id, now); err != nil {
		s.logger.WarnContext(ctx, "api key last_used_at not updated", "key_id", id, "error", err)
	}
}
