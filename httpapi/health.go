package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// healthz answers 200 while the process is up.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the database is reachable and its schema is at
// the newest embedded migration (orchestrator.Service.Ready), 503
// otherwise.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	status := map[string]string{"database": "ok", "migrations": "ok"}
	err := s.svc.Ready(ctx)
	switch {
	case errors.Is(err, orchestrator.ErrDatabaseUnreachable):
		status["database"] = "unreachable"
	case errors.Is(err, orchestrator.ErrSchemaUnknown):
		status["migrations"] = "unknown"
	case errors.Is(err, orchestrator.ErrMigrationsPending):
		status["migrations"] = "pending"
	}
	ready := err == nil
	code := http.StatusOK
	status["status"] = "ready"
	if !ready {
		code = http.StatusServiceUnavailable
		status["status"] = "not_ready"
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(code, status)
}
