package httpapi

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// Problem is an RFC 9457 problem details body, with payorch's extensions
// (orchestrator.Problem: the domain decides stored refusals too, from the
// same table of codes).
type Problem = orchestrator.Problem

// problemFor turns any error into the Problem a client may see and, for
// internal errors, reports that the detail must be logged.
func problemFor(err error) (*orchestrator.Error, bool) {
	var appErr *orchestrator.Error
	if errors.As(err, &appErr) {
		return appErr, appErr.Code == orchestrator.CodeInternal
	}
	if e := orchestrator.AsUnavailable(err); e != nil {
		return e, false
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		e := &orchestrator.Error{Err: err}
		switch he.Code {
		case http.StatusNotFound:
			e.Code, e.Message = orchestrator.CodeNotFound, "no such resource"
		case http.StatusMethodNotAllowed:
			e.Code, e.Message = orchestrator.CodeMethodNotAllowed, "method not allowed on this resource"
		case http.StatusRequestEntityTooLarge:
			e.Code, e.Message = orchestrator.CodeBodyTooLarge, "request body exceeds 64 KiB"
		case http.StatusUnsupportedMediaType:
			e.Code, e.Message = orchestrator.CodeUnsupportedMediaType, "request body must be application/json"
		case http.StatusBadRequest:
			e.Code, e.Message = orchestrator.CodeValidationFailed, "malformed request"
		case http.StatusUnauthorized:
			e.Code, e.Message = orchestrator.CodeUnauthorized, "a valid API key is required"
		case http.StatusForbidden:
			e.Code, e.Message = orchestrator.CodeForbidden, "not allowed"
		case http.StatusServiceUnavailable:
			e.Code, e.Message = orchestrator.CodeUnavailable, "service unavailable"
		default:
			e.Code, e.Message = orchestrator.CodeInternal, "internal error"
			return e, true
		}
		return e, false
	}
	return &orchestrator.Error{Code: orchestrator.CodeInternal, Message: "internal error", Err: err}, true
}

// handleError is Echo's central error handler: every error becomes
// application/problem+json; only internal errors are logged with detail.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	e, internal := problemFor(err)
	c.Set(errorCodeKey, e.Code)
	if internal {
		s.logger.ErrorContext(c.Request().Context(), "internal error", "error", err)
	} else if e.Err != nil {
		s.logger.WarnContext(c.Request().Context(), "request failed", "code", e.Code, "error", e.Err)
	}
	p := s.problem(c, e)
	h := c.Response().Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if e.Code == orchestrator.CodeUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="payorch"`)
	}
	writeProblem(c, p)
}

// problem builds the body for e; internal errors get no detail.
func (s *Server) problem(c echo.Context, e *orchestrator.Error) Problem {
	return orchestrator.NewProblem(e, c.Response().Header().Get(echo.HeaderXRequestID))
}

func writeProblem(c echo.Context, p Problem) {
	body, _ := json.Marshal(p)
	r := c.Response()
	r.Header().Set(echo.HeaderContentType, "application/problem+json")
	r.Header().Set("Cache-Control", "no-store")
	r.WriteHeader(p.Status)
	if c.Request().Method != http.MethodHead {
		_, _ = r.Write(append(body, '\n'))
	}
}
