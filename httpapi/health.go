package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// healthz answers 200 while the process is up.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the database is reachable and its schema is at
// the newest embedded migration, 503 otherwise.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	status := map[string]string{"database": "ok", "migrations": "ok"}
	ready := true
	if err := s.svc.Pool().Ping(ctx); err != nil {
		status["database"] = "unreachable"
		ready = false
	}
	if s.migrator != nil && ready {
		cur, target, err := s.migrator.Versions(ctx)
		switch {
		case err != nil:
			status["migrations"] = "unknown"
			ready = false
		case cur != target:
			status["migrations"] = "pending"
			ready = false
		}
	}
	code := http.StatusOK
	status["status"] = "ready"
	if !ready {
		code = http.StatusServiceUnavailable
		status["status"] = "not_ready"
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(code, status)
}
