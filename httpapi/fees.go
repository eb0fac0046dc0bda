package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/reconcile"
)

// getFeeSchedule: GET /v1/connectors/{name}/fees (admin), the connector's
// active fee schedule. Errors: not_found (no such connector, or none
// stored).
func (s *Server) getFeeSchedule(c echo.Context) error {
	v, err := s.rec.FeeSchedule(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// putFeeSchedule: PUT /v1/connectors/{name}/fees (admin) with a
// FeeSchedule body stores it as the connector's next version, active at
// once: 200 with the version. Errors: validation_failed naming the
// field, not_found, body_too_large, conflict.
func (s *Server) putFeeSchedule(c echo.Context) error {
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	var fs reconcile.FeeSchedule
	if err := decodeStrict(raw, &fs); err != nil {
		return err
	}
	v, err := s.rec.SetFeeSchedule(c.Request().Context(), c.Param("name"), fs, principal(c).KeyID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// listFeeScheduleVersions: GET /v1/connectors/{name}/fees/versions
// ?limit=&starting_after= (admin), newest first.
func (s *Server) listFeeScheduleVersions(c echo.Context) error {
	q := c.QueryParams()
	limit, err := intParam(q.Get("limit"), "limit", 1, 100)
	if err != nil {
		return err
	}
	after, err := intParam(q.Get("starting_after"), "starting_after", 1, 1<<31-1)
	if err != nil {
		return err
	}
	vs, more, err := s.rec.FeeScheduleVersions(c.Request().Context(), c.Param("name"), limit, after)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(vs, more))
}
