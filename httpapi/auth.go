package httpapi

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

const principalKey = "payorch.principal"

// authenticate turns `Authorization: Bearer <key>` into the request's
// Principal. A client address past its allowance of failed
// authentications is refused before its key is looked at; a publishable
// key anywhere but where it may create a payment method is refused.
// Errors: unauthorized, rate_limited, forbidden.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		client := signInClient(c.RealIP())
		if wait := s.authFailureWait(client); wait > 0 {
			return &orchestrator.Error{Code: orchestrator.CodeRateLimited, RetryAfter: wait,
				Message: "too many failed authentications from your network address; retry after the Retry-After delay"}
		}
		scheme, key, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
		key = strings.TrimSpace(key)
		if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
			return orchestrator.Errorf(orchestrator.CodeUnauthorized, "a valid API key is required: Authorization: Bearer <key>")
		}
		req := c.Request()
		p, err := s.svc.Authenticate(req.Context(), key)
		if err != nil {
			if orchestrator.ErrorCode(err) == orchestrator.CodeUnauthorized {
				s.authFailed(client, key)
			}
			return err
		}
		attrs := []slog.Attr{slog.String("api_key_id", p.KeyID), slog.String("role", string(p.Role))}
		if p.TenantID != 0 {
			attrs = append(attrs, slog.Int64("tenant_id", p.TenantID))
		}
		c.SetRequest(req.WithContext(orchestrator.WithLogAttrs(req.Context(), attrs...)))
		c.Set(principalKey, p)
		// Here rather than in each route's roles, so that no route, present
		// or future, can let a public key read.
		if err := publishableAllowed(c, p); err != nil {
			return err
		}
		return next(c)
	}
}

// principal returns the authenticated caller; only valid behind
// authenticate.
func principal(c echo.Context) orchestrator.Principal {
	p, _ := c.Get(principalKey).(orchestrator.Principal)
	return p
}

// requireRole lets through only callers with one of roles. Errors:
// forbidden.
func requireRole(roles ...orchestrator.Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if p := principal(c); !slices.Contains(roles, p.Role) {
				return orchestrator.Errorf(orchestrator.CodeForbidden, "a %s key may not do this", p.Role)
			}
			return next(c)
		}
	}
}
