package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// Publishable keys (role publishable, ppk_…) live in shoppers' browsers,
// so anyone can read one. A publishable key may do one thing: create a
// payment method (POST /v1/payment_methods), and only as a browser on one
// of its tenant's browser origins sends it (CORS), or from the card form
// this server serves. It can never read anything back: every other route
// refuses it (authenticate), whatever roles that route allows.
//
// Card testers use such keys to try stolen numbers, so the creates of
// publishable keys are throttled twice: per publishable key and per client
// address (an IPv4 address, an IPv6 /64), in token buckets that refill over
// a minute. Per instance, like every limit of this package: with N
// instances behind a balancer a client gets up to N times the allowance.

// routePaymentMethods is the one route a publishable key may use.
const routePaymentMethods = "/v1/payment_methods"

// The headers a browser may send cross-origin, and the answer's headers a
// page may read.
const (
	corsAllowHeaders  = "Authorization, Content-Type, Idempotency-Key, X-Request-Id"
	corsExposeHeaders = "Idempotent-Replayed, Idempotency-Key-Expires, Location, Retry-After, X-Request-Id"
	// corsMaxAge is how long a browser may reuse a preflight's answer, in
	// seconds.
	corsMaxAge = "600"
)

// Default throttles of publishable-key creates, per minute.
const (
	defaultPublishableKeyLimit    = 300
	defaultPublishableClientLimit = 20
)

// newPublishableLimiter is a limiter of n creates a minute (0: def),
// or nil when n is negative (off).
func newPublishableLimiter(n, def int, now func() time.Time) *rateLimiter {
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = def
	}
	return newRateLimiter(float64(n)/60, n, now)
}

// publishableAllowed refuses a publishable key anything but creating a
// payment method. Errors: forbidden.
func publishableAllowed(c echo.Context, p orchestrator.Principal) error {
	if p.Role != orchestrator.RolePublishable || c.Request().Method == http.MethodPost && c.Path() == routePaymentMethods {
		return nil
	}
	return orchestrator.Errorf(orchestrator.CodeForbidden,
		"a publishable key may only create payment methods (POST %s); use a secret key for anything else", routePaymentMethods)
}

// browserGate lets a publishable key's create through only from an
// allowed origin and within its throttles, before anything is claimed; a
// secret key's request passes untouched (no CORS headers: a secret key
// never belongs in a browser). The origin is checked first, so a request
// from a page that is not the tenant's uses up nobody's allowance, and an
// allowed cross-origin request gets Access-Control-Allow-Origin on
// whatever it is answered, a 429 or a validation error included, so the
// page can read why. Errors: forbidden, rate_limited, not_found (the
// key's tenant is gone).
func (s *Server) browserGate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p := principal(c)
		if p.Role != orchestrator.RolePublishable {
			return next(c)
		}
		origin := c.Request().Header.Get(echo.HeaderOrigin)
		h := c.Response().Header()
		h.Add(echo.HeaderVary, echo.HeaderOrigin)
		if origin == "" {
			return orchestrator.Errorf(orchestrator.CodeForbidden,
				"a publishable key is for browsers: send the request from a page on one of the tenant's browser origins")
		}
		if origin != s.selfOrigin(c) {
			origins, err := s.svc.BrowserOrigins(c.Request().Context(), p.TenantID)
			if err != nil {
				return err
			}
			if !slices.Contains(origins, origin) {
				return orchestrator.Errorf(orchestrator.CodeForbidden,
					"this origin is not one of the tenant's browser origins (PUT /v1/tenants/{id}/browser_origins)")
			}
			h.Set(echo.HeaderAccessControlAllowOrigin, origin)
			h.Set(echo.HeaderAccessControlExposeHeaders, corsExposeHeaders)
		}
		if err := s.throttlePublishable(c, p); err != nil {
			return err
		}
		return next(c)
	}
}

// throttlePublishable takes one create from the client address's bucket
// and one from the key's, or neither. Errors: rate_limited.
func (s *Server) throttlePublishable(c echo.Context, p orchestrator.Principal) error {
	var refund func()
	if s.ppkClients != nil {
		var wait time.Duration
		if refund, wait = s.ppkClients.take(signInClient(c.RealIP())); refund == nil {
			return &orchestrator.Error{Code: orchestrator.CodeRateLimited, RetryAfter: wait,
				Message: "too many payment methods created from your network address; retry after the Retry-After delay"}
		}
	}
	if s.ppkKeys != nil {
		if ok, wait := s.ppkKeys.allow(p.KeyID); !ok {
			if refund != nil {
				refund() // the address's token was not used
			}
			return &orchestrator.Error{Code: orchestrator.CodeRateLimited, RetryAfter: wait,
				Message: "too many payment methods created with this publishable key; retry after the Retry-After delay"}
		}
	}
	return nil
}

// selfOrigin is this server's own origin, as the browser sees it: that of
// Config.PublicURL, else the request's scheme and Host. The card form this
// server serves posts from it.
func (s *Server) selfOrigin(c echo.Context) string {
	if u := s.cfg.PublicURL; u != nil {
		return orchestrator.OriginOfURL(u.Scheme + "://" + u.Host)
	}
	return orchestrator.OriginOfURL(c.Scheme() + "://" + c.Request().Host)
}

// preflightPaymentMethods: OPTIONS /v1/payment_methods, without
// authentication (browsers send no credentials on a preflight). A
// preflight cannot say which tenant the key is of, so any origin may send
// the POST (with the headers it needs); the POST itself is refused unless
// its origin is one of its key's tenant's (browserGate). A plain OPTIONS
// (no Origin) learns the methods. Errors: forbidden (a preflight for
// another method or header).
func (s *Server) preflightPaymentMethods(c echo.Context) error {
	h := c.Response().Header()
	h.Set(echo.HeaderAllow, "OPTIONS, GET, POST")
	origin := c.Request().Header.Get(echo.HeaderOrigin)
	if origin == "" {
		return c.NoContent(http.StatusNoContent)
	}
	h.Add(echo.HeaderVary, echo.HeaderOrigin)
	h.Add(echo.HeaderVary, echo.HeaderAccessControlRequestMethod)
	h.Add(echo.HeaderVary, echo.HeaderAccessControlRequestHeaders)
	if m := c.Request().Header.Get(echo.HeaderAccessControlRequestMethod); m != http.MethodPost {
		return orchestrator.Errorf(orchestrator.CodeForbidden, "browsers may only POST to %s", routePaymentMethods)
	}
	allowed := strings.Split(strings.ToLower(corsAllowHeaders), ", ")
	for _, name := range strings.Split(c.Request().Header.Get(echo.HeaderAccessControlRequestHeaders), ",") {
		if name = strings.ToLower(strings.TrimSpace(name)); name != "" && !slices.Contains(allowed, name) {
			return &orchestrator.Error{Code: orchestrator.CodeForbidden, Param: echo.HeaderAccessControlRequestHeaders,
				Message: "browsers may send only " + corsAllowHeaders + " to " + routePaymentMethods}
		}
	}
	h.Set(echo.HeaderAccessControlAllowOrigin, origin)
	h.Set(echo.HeaderAccessControlAllowMethods, http.MethodPost)
	h.Set(echo.HeaderAccessControlAllowHeaders, corsAllowHeaders)
	h.Set(echo.HeaderAccessControlMaxAge, corsMaxAge)
	return c.NoContent(http.StatusNoContent)
}
