package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// Events: the outbox's events, read through the API. A
// merchant reads its tenant's, support every tenant's, finance every
// tenant's and the staff events (reconciliation.run.…), which have no
// tenant.

// listEvents: GET /v1/events, newest first, cursor-paginated; tenant_id
// (support, finance) narrows it to one tenant's events.
func (s *Server) listEvents(c echo.Context) error {
	sc, err := readScope(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	f := orchestrator.EventFilter{Type: q.Get("type")}
	if v := q.Get("payment_id"); v != "" {
		if !validID(v) {
			return orchestrator.ParamError("payment_id", "payment_id must be a payment id")
		}
		f.PaymentID = v
	}
	if v := q.Get("delivered"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return orchestrator.ParamError("delivered", "delivered must be true or false")
		}
		f.Delivered = &b
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return orchestrator.ParamError("limit", "limit must be 1 to 100")
		}
		f.Limit = n
	}
	f.StartingAfter = q.Get("starting_after")
	evs, more, err := s.svc.ListEvents(c.Request().Context(), sc, f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(evs, more))
}

// getEvent: GET /v1/events/{id}.
func (s *Server) getEvent(c echo.Context) error {
	ev, err := s.svc.GetEvent(c.Request().Context(), orchestrator.ScopeOf(principal(c)), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ev)
}
