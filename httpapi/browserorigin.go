package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// The browser origins API (admin): the web origins whose pages may use a
// tenant's publishable keys (orchestrator/browserorigin.go). A PUT replaces
// the list; it is idempotent by itself, so not keyed.

// browserOrigins is the body of PUT and the answer of both methods.
type browserOrigins struct {
	TenantID int64    `json:"tenant_id,omitempty"`
	Origins  []string `json:"origins"`
}

// getBrowserOrigins: GET /v1/tenants/{id}/browser_origins (admin).
// Errors: not_found.
func (s *Server) getBrowserOrigins(c echo.Context) error {
	id, err := idParam(c, "tenant")
	if err != nil {
		return err
	}
	origins, err := s.svc.BrowserOrigins(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, browserOrigins{TenantID: id, Origins: origins})
}

// putBrowserOrigins: PUT /v1/tenants/{id}/browser_origins (admin) with
// {"origins": [...]} replaces the tenant's origins ([] for none): 200 with
// them as stored (normalised). http://loopback origins are refused unless
// Config.AllowHTTPLoopbackOrigins. Errors: validation_failed naming
// origins[i], not_found, body_too_large.
func (s *Server) putBrowserOrigins(c echo.Context) error {
	id, err := idParam(c, "tenant")
	if err != nil {
		return err
	}
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	var req struct {
		Origins *[]string `json:"origins"`
	}
	if err := decodeStrict(raw, &req); err != nil {
		return err
	}
	if req.Origins == nil {
		return orchestrator.ParamError("origins", "origins is required: a list of origins, [] for none")
	}
	origins, err := s.svc.SetBrowserOrigins(c.Request().Context(), id, *req.Origins, s.cfg.AllowHTTPLoopbackOrigins)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, browserOrigins{TenantID: id, Origins: origins})
}
