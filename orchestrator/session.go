package orchestrator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConsoleSession is a signed-in web console user (SPEC: Web console): the
// principal of the API key they signed in with, the CSRF token every form
// they post must carry, and when the session ends. The browser holds the
// session's token; the database (table console_sessions) keeps only its
// SHA-256, never the token nor the API key.
type ConsoleSession struct {
	Principal Principal
	CSRF      string
	ExpiresAt time.Time
}

// errNoConsoleSession is ConsoleSession's answer for a token that names no
// live session.
var errNoConsoleSession = &Error{Code: CodeUnauthorized, Message: "no live console session: sign in again"}

// CreateConsoleSession stores a new console session for p, lasting ttl
// (positive) from now, and returns its token (256 random bits, base64url)
// with the session. Expired sessions are purged on the way (a bounded
// batch), so the table stays small without a background job.
// Errors: internal.
func (s *Service) CreateConsoleSession(ctx context.Context, p Principal, ttl time.Duration) (string, *ConsoleSession, error) {
	token := randomToken()
	now := s.now()
	sess := &ConsoleSession{Principal: p, CSRF: randomToken(), ExpiresAt: now.Add(ttl)}
	var tenant *int64
	if p.TenantID != 0 {
		tenant = &p.TenantID
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		const purge = `DELETE FROM console_sessions WHERE id_hash IN (
			SELECT id_hash FROM console_sessions WHERE expires_at < $1 ORDER BY expires_at LIMIT 100)`
		if _, err := tx.Exec(ctx, purge, now); err != nil {
			return err
		}
		const ins = `INSERT INTO console_sessions (id_hash, api_key_id, role, tenant_id, csrf_token, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`
		_, err := tx.Exec(ctx, ins, sessionTokenHash(token), p.KeyID, p.Role, tenant, sess.CSRF, now, sess.ExpiresAt)
		return err
	})
	if err != nil {
		return "", nil, internalf("create console session: %w", err)
	}
	return token, sess, nil
}

// ConsoleSession returns the live console session of token.
// Errors: unauthorized (no such session: unknown, expired, ended, or its
// API key revoked), internal.
func (s *Service) ConsoleSession(ctx context.Context, token string) (*ConsoleSession, error) {
	const q = `
		SELECT cs.api_key_id, cs.role, coalesce(cs.tenant_id, 0), cs.csrf_token, cs.expires_at
		FROM console_sessions cs
		JOIN api_keys k ON k.id = cs.api_key_id
		WHERE cs.id_hash = $1 AND NOT cs.revoked AND cs.expires_at > $2 AND k.revoked_at IS NULL`
	var sess ConsoleSession
	err := s.pool.QueryRow(ctx, q, sessionTokenHash(token), s.now()).Scan(
		&sess.Principal.KeyID, &sess.Principal.Role, &sess.Principal.TenantID, &sess.CSRF, &sess.ExpiresAt)
	if isNoRows(err) {
		return nil, errNoConsoleSession
	}
	if err != nil {
		return nil, internalf("console session: %w", err)
	}
	return &sess, nil
}

// EndConsoleSession ends the console session of token (sign-out): it is
// revoked, and ConsoleSession no longer finds it. A token that names no
// session, or an ended one, is not an error.
// Errors: internal.
func (s *Service) EndConsoleSession(ctx context.Context, token string) error {
	const q = `UPDATE console_sessions SET revoked = true WHERE id_hash = $1`
	if _, err := s.pool.Exec(ctx, q, sessionTokenHash(token)); err != nil {
		return internalf("end console session: %w", err)
	}
	return nil
}

// randomToken returns 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	// crypto/rand.Read never fails on Linux (Go ≥ 1.24 panics instead).
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionTokenHash is what console_sessions keeps of a session token: its
// SHA-256.
func sessionTokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}
