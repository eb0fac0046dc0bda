package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// list is the Stripe-style envelope of every list response.
type list[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

func newList[T any](data []T, hasMore bool) list[T] {
	if data == nil {
		data = []T{}
	}
	return list[T]{Object: "list", Data: data, HasMore: hasMore}
}

// me describes the caller's own key.
type me struct {
	APIKeyID string            `json:"api_key_id"`
	Role     orchestrator.Role `json:"role"`
	TenantID *int64            `json:"tenant_id"`
}

// getMe: GET /v1/me, any role.
func (s *Server) getMe(c echo.Context) error {
	p := principal(c)
	out := me{APIKeyID: p.KeyID, Role: p.Role}
	if p.TenantID != 0 {
		out.TenantID = &p.TenantID
	}
	return c.JSON(http.StatusOK, out)
}

// listTenants: GET /v1/tenants, admin.
func (s *Server) listTenants(c echo.Context) error {
	ts, err := s.svc.ListTenants(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(ts, false))
}

// listAPIKeys: GET /v1/api_keys[?tenant_id=N], admin.
func (s *Server) listAPIKeys(c echo.Context) error {
	var tenantID int64
	if raw := c.QueryParam("tenant_id"); raw != "" {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || id <= 0 {
			return orchestrator.ParamError("tenant_id", "tenant_id must be a positive integer")
		}
		tenantID = id
	}
	keys, err := s.svc.ListAPIKeys(c.Request().Context(), tenantID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(keys, false))
}
