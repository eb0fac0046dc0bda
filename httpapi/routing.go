package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// The routing API (admin): a tenant's routing rules, versioned
// (orchestrator/routingversion.go). A PUT is not keyed: it is idempotent
// by itself (the rules already active store nothing).

// getRouting: GET /v1/tenants/{id}/routing (admin), the tenant's active
// routing version; version 0 is the built-in default of a tenant that has
// stored none. Errors: not_found.
func (s *Server) getRouting(c echo.Context) error {
	id, err := idParam(c, "tenant")
	if err != nil {
		return err
	}
	v, err := s.svc.Routing(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// putRouting: PUT /v1/tenants/{id}/routing (admin) with a RoutingRules
// body stores them as the tenant's next version, active at once: 200 with
// the version. Errors: validation_failed naming the field (an unknown or
// disabled connector is one), not_found, body_too_large, conflict.
func (s *Server) putRouting(c echo.Context) error {
	id, err := idParam(c, "tenant")
	if err != nil {
		return err
	}
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	var rules orchestrator.RoutingRules
	if err := decodeStrict(raw, &rules); err != nil {
		return err
	}
	v, err := s.svc.SetRouting(c.Request().Context(), id, rules, principal(c).KeyID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// listRoutingVersions: GET /v1/tenants/{id}/routing/versions?limit=&starting_after=
// (admin), the tenant's stored versions, newest first. Errors:
// validation_failed, not_found.
func (s *Server) listRoutingVersions(c echo.Context) error {
	id, err := idParam(c, "tenant")
	if err != nil {
		return err
	}
	q := c.QueryParams()
	var f orchestrator.RoutingVersionFilter
	if f.Limit, err = intParam(q.Get("limit"), "limit", 1, 100); err != nil {
		return err
	}
	if f.StartingAfter, err = intParam(q.Get("starting_after"), "starting_after", 1, 1<<31-1); err != nil {
		return err
	}
	vs, more, err := s.svc.RoutingVersions(c.Request().Context(), id, f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(vs, more))
}

// connectorList is the body of GET /v1/connectors.
type connectorList struct {
	Object string          `json:"object"`
	Data   []connectorJSON `json:"data"`
	// ScoresAt is when this instance last read the authorization rates,
	// nil when it has not (no auth_rate decision yet).
	ScoresAt *time.Time `json:"scores_at"`
}

// connectorJSON is a connector with, side by side, its health breaker and
// its standing in auth_rate routing, both as this instance sees them.
type connectorJSON struct {
	orchestrator.ConnectorHealth
	AuthRate orchestrator.ConnectorScore `json:"auth_rate"`
}

// listConnectors: GET /v1/connectors (admin, support), every configured
// connector with its error breaker's state and its authorization-rate
// score and eliminations in this instance.
func (s *Server) listConnectors(c echo.Context) error {
	scores, at := s.svc.AuthRateScores()
	byName := make(map[string]orchestrator.ConnectorScore, len(scores))
	for _, sc := range scores {
		byName[sc.Connector] = sc
	}
	out := connectorList{Object: "list", Data: []connectorJSON{}}
	if !at.IsZero() {
		at = at.UTC()
		out.ScoresAt = &at
	}
	for _, h := range s.svc.ConnectorHealth() {
		out.Data = append(out.Data, connectorJSON{ConnectorHealth: h, AuthRate: byName[h.Name]})
	}
	return c.JSON(http.StatusOK, out)
}
