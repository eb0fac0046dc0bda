package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

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
	if p.Role == orchestrator.RolePublishable {
		// Public by design: it must never open a session that reads.
		c.Set(errorCodeKey, orchestrator.CodeForbidden)
		return s.renderSignIn(c, http.StatusForbidden, "A publishable key cannot sign in: sign in with a secret key.")
	}
	token, sess, err := s.svc.CreateConsoleSession(c.Request().Context(), p, sessionLifetime)
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
		if err := s.svc.EndConsoleSession(c.Request().Context(), ck.Value); err != nil {
			return s.consoleError(c, err)
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
	case r == orchestrator.RoleAdmin:
		return c.Redirect(http.StatusSeeOther, consolePrefix+"/tenants")
	}
	return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeForbidden, "A %s key has nothing to see in the console.", r))
}
