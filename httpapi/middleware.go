package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// requestID gives every request an id: the client's X-Request-Id when it is
// short and plain, a new one otherwise. It is echoed in the response, put in
// every problem body, and attached to every log line of the request.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !validRequestID(id) {
			b := make([]byte, 12)
			_, _ = rand.Read(b)
			id = "req_" + hex.EncodeToString(b)
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		req := c.Request()
		c.SetRequest(req.WithContext(orchestrator.WithLogAttrs(req.Context(), slog.String("request_id", id))))
		return next(c)
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// accessLog writes one line per request when it ends, after the error (if
// any) has been turned into its response, so the status is the one sent:
// method, route, status, size, duration and, where known, the idempotency
// outcome and the problem code. The request's log attributes (request id,
// tenant, idempotency key, payment id) and trace ids come with the context.
func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		res := c.Response()
		level := slog.LevelInfo
		if res.Status >= 500 {
			level = slog.LevelError
		}
		attrs := []slog.Attr{
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.Int("status", res.Status),
			slog.Int64("bytes", res.Size),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if o, ok := c.Get(outcomeKey).(string); ok {
			attrs = append(attrs, slog.String("idempotency_outcome", o))
		}
		if code, ok := c.Get(errorCodeKey).(orchestrator.Code); ok {
			attrs = append(attrs, slog.String("code", string(code)))
		}
		s.logger.LogAttrs(c.Request().Context(), level, "http request", attrs...)
		return nil
	}
}

// requireJSON answers 415 to a request that carries a body that is not
// JSON. Bodiless POSTs (a cancel) pass, and bank statements, which check
// their own media types (createBankStatement).
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
		default:
			return next(c)
		}
		if isStatementUpload(c) {
			return next(c)
		}
		if req.ContentLength == 0 {
			return next(c)
		}
		mt, _, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
		if err != nil || !(mt == echo.MIMEApplicationJSON || strings.HasSuffix(mt, "+json")) {
			return &orchestrator.Error{Code: orchestrator.CodeUnsupportedMediaType, Param: "Content-Type",
				Message: "request body must be application/json"}
		}
		return next(c)
	}
}
