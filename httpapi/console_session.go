package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// lookupSession returns the live session of token, or nil when there is
// none: unknown, expired, signed out, or its API key revoked.
func (s *Server) lookupSession(ctx context.Context, token string) (*consoleSession, error) {
	const q = `
		SELECT cs.api_key_id, cs.role, coalesce(cs.tenant_id, 0), cs.csrf_token, cs.expires_at
		FROM console_sessions cs
		JOIN api_keys k ON k.id = cs.api_key_id
		WHERE cs.id_hash = $1 AND NOT cs.revoked AND cs.expires_at > $2 AND k.revoked_at IS NULL`
	var sess consoleSession
	err := s.svc.Pool().QueryRow(ctx, q, tokenHash(token), s.now()).Scan(
		&sess.Principal.KeyID, &sess.Principal.Role, &sess.Principal.TenantID, &sess.CSRF, &sess.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, &orchestrator.Error{Code: orchestrator.CodeInternal, Message: "internal error", Err: err}
	}
	return &sess, nil
}

// createSession stores a new session for p and returns its token. Expired
// sessions are purged on the way (a bounded batch), so the table stays
// small without a background job.
func (s *Server) createSession(ctx context.Context, p orchestrator.Principal) (string, *consoleSession, error) {
	token := randomToken()
	now := s.now()
	sess := &consoleSession{Principal: p, CSRF: randomToken(), ExpiresAt: now.Add(sessionLifetime)}
	var tenant *int64
	if p.TenantID != 0 {
		tenant = &p.TenantID
	}
	err := pgx.BeginFunc(ctx, s.svc.Pool(), func(tx pgx.Tx) error {
		const purge = `DELETE FROM console_sessions WHERE id_hash IN (
			SELECT id_hash FROM console_sessions WHERE expires_at < $1 ORDER BY expires_at LIMIT 100)`
		if _, err := tx.Exec(ctx, purge, now); err != nil {
			return err
		}
		const ins = `INSERT INTO console_sessions (id_hash, api_key_id, role, tenant_id, csrf_token, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`
		_, err := tx.Exec(ctx, ins, tokenHash(token), p.KeyID, p.Role, tenant, sess.CSRF, now, sess.ExpiresAt)
		return err
	})
	if err != nil {
		return "", nil, &orchestrator.Error{Code: orchestrator.CodeInternal, Message: "internal error", Err: err}
	}
	return token, sess, nil
}

// signInPage is the data of the sign-in form.
type signInPage struct {
	CSRF      string
	Message   string
	SignedOut bool
}

func (p signInPage) notice() (string, string) {
	if p.SignedOut {
		return "You have signed out.", p.Message
	}
	return "", p.Message
}

// consoleSignInForm: GET /console/signin. It sets the pre-session CSRF
// cookie the form's hidden field must match (double submit).
func (s *Server) consoleSignInForm(c echo.Context) error {
	return s.renderSignIn(c, http.StatusOK, "")
}

func (s *Server) renderSignIn(c echo.Context, status int, msg string) error {
	token := randomToken()
	c.SetCookie(s.consoleCookie(c, signinCookie, token, time.Time{}))
	return s.render(c, status, "signin", "Sign in",
		signInPage{CSRF: token, Message: msg, SignedOut: msg == "" && c.QueryParam("signed_out") == "1"})
}

// consoleSignIn: POST /console/signin with api_key. The key is checked
// like a Bearer key and then forgotten: it is never stored, logged or
// echoed back. A client address past its allowance of failed sign-ins is
// answered 429 before anything is checked; otherwise the attempt takes one
// of the allowance before the key is checked, and gives it back when the
// key is accepted.
func (s *Server) consoleSignIn(c echo.Context) error {
	client := signInClient(c.RealIP())
	if wait := s.signInWait(client); wait > 0 {
		return s.signInLimited(c, wait)
	}
	ck, err := c.Cookie(signinCookie)
	if err != nil || !sameToken(postedCSRF(c), ck.Value) {
		return s.renderSignIn(c, http.StatusForbidden, "The sign-in form expired. Please try again.")
	}
	key := strings.TrimSpace(c.Request().PostFormValue("api_key"))
	if key == "" {
		return s.renderSignIn(c, http.StatusUnauthorized, "Enter an API key.")
	}
	refund, wait := s.signInAttempt(client)
	if wait > 0 {
		return s.signInLimited(c, wait)
	}
	p, err := s.svc.Authenticate(c.Request().Context(), key)
	if orchestrator.ErrorCode(err) == orchestrator.CodeUnauthorized {
		return s.renderSignIn(c, http.StatusUnauthorized, "That API key was not accepted: it is unknown, mistyped or revoked.")
	}
	refund() // accepted, or not checked at all: not a failed sign-in
	if err != nil {
		return s.consoleError(c, err)
	}
	token, sess, err := s.createSession(c.Request().Context(), p)
	if err != nil {
		return s.consoleError(c, err)
	}
	c.SetCookie(s.consoleCookie(c, signinCookie, "", time.Time{}))
	c.SetCookie(s.consoleCookie(c, sessionCookie, token, sess.ExpiresAt))
	return c.Redirect(http.StatusSeeOther, consolePrefix+"/")
}

// signInLimited answers a sign-in from a client with no allowance left.
func (s *Server) signInLimited(c echo.Context, wait time.Duration) error {
	c.Set(errorCodeKey, orchestrator.CodeRateLimited)
	c.Response().Header().Set("Retry-After", retryAfter(wait))
	return s.renderSignIn(c, http.StatusTooManyRequests,
		"Too many failed sign-ins from your network address. Wait "+waitText(wait)+" before you try again.")
}

// waitText says d in words, rounded up: "30 seconds", "5 minutes".
func waitText(d time.Duration) string {
	if secs := int(math.Ceil(d.Seconds())); secs < 120 {
		if secs == 1 {
			return "1 second"
		}
		return strconv.Itoa(secs) + " seconds"
	}
	return strconv.Itoa(int(math.Ceil(d.Minutes()))) + " minutes"
}

// consoleSignOut: POST /console/signout (CSRF checked by consoleAuth).
func (s *Server) consoleSignOut(c echo.Context) error {
	ck, err := c.Cookie(sessionCookie)
	if err == nil {
		const q = `UPDATE console_sessions SET revoked = true WHERE id_hash = $1`
		if _, err := s.svc.Pool().Exec(c.Request().Context(), q, tokenHash(ck.Value)); err != nil {
			return s.consoleError(c, &orchestrator.Error{Code: orchestrator.CodeInternal, Message: "internal error", Err: err})
		}
	}
	c.SetCookie(s.consoleCookie(c, sessionCookie, "", time.Time{}))
	return c.Redirect(http.StatusSeeOther, consolePrefix+"/signin?signed_out=1")
}

// consoleHome: GET /console/ — straight to the user's first section.
func (s *Server) consoleHome(c echo.Context) error {
	r := consoleSessionOf(c).Principal.Role
	switch {
	case consoleAllowed(r, orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance):
		return c.Redirect(http.StatusSeeOther, consolePrefix+"/search")
	case s.rec != nil && r == orchestrator.RoleAdmin:
		return c.Redirect(http.StatusSeeOther, consolePrefix+"/runs")
	}
	return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeForbidden, "A %s key has nothing to see in the console.", r))
}
