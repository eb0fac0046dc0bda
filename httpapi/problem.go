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

// problemType prefixes every problem's `type`: a stable URN per code.
const problemType = "urn:payorch:problem:"

// problemStatus is the one code → HTTP status table.
var problemStatus = map[orchestrator.Code]int{
	orchestrator.CodeIdempotencyKeyMissing:   http.StatusBadRequest,
	orchestrator.CodeIdempotencyKeyInvalid:   http.StatusBadRequest,
	orchestrator.CodeIdempotencyKeyReused:    http.StatusConflict,
	orchestrator.CodeIdempotencyKeyInUse:     http.StatusConflict,
	orchestrator.CodeValidationFailed:        http.StatusBadRequest,
	orchestrator.CodePaymentDeclined:         http.StatusPaymentRequired,
	orchestrator.CodePaymentStateConflict:    http.StatusConflict,
	orchestrator.CodeAmountExceedsAuthorized: http.StatusUnprocessableEntity,
	orchestrator.CodeNotFound:                http.StatusNotFound,
	orchestrator.CodeConflict:                http.StatusConflict,
	orchestrator.CodeMethodNotAllowed:        http.StatusMethodNotAllowed,
	orchestrator.CodeUnauthorized:            http.StatusUnauthorized,
	orchestrator.CodeForbidden:               http.StatusForbidden,
	orchestrator.CodeBodyTooLarge:            http.StatusRequestEntityTooLarge,
	orchestrator.CodeUnsupportedMediaType:    http.StatusUnsupportedMediaType,
	orchestrator.CodeProviderUnavailable:     http.StatusServiceUnavailable,
	orchestrator.CodeRateLimited:             http.StatusTooManyRequests,
	orchestrator.CodeUnavailable:             http.StatusServiceUnavailable,
	orchestrator.CodeInternal:                http.StatusInternalServerError,
}

// problemTitle is a short, fixed, human summary per code.
var problemTitle = map[orchestrator.Code]string{
	orchestrator.CodeIdempotencyKeyMissing:   "Idempotency-Key header missing",
	orchestrator.CodeIdempotencyKeyInvalid:   "Idempotency-Key header invalid",
	orchestrator.CodeIdempotencyKeyReused:    "Idempotency key reused with a different request",
	orchestrator.CodeIdempotencyKeyInUse:     "Idempotency key in use",
	orchestrator.CodeValidationFailed:        "Validation failed",
	orchestrator.CodePaymentDeclined:         "Payment declined",
	orchestrator.CodePaymentStateConflict:    "Payment state conflict",
	orchestrator.CodeAmountExceedsAuthorized: "Amount exceeds authorized",
	orchestrator.CodeNotFound:                "Not found",
	orchestrator.CodeConflict:                "Conflict",
	orchestrator.CodeMethodNotAllowed:        "Method not allowed",
	orchestrator.CodeUnauthorized:            "Unauthorized",
	orchestrator.CodeForbidden:               "Forbidden",
	orchestrator.CodeBodyTooLarge:            "Request body too large",
	orchestrator.CodeUnsupportedMediaType:    "Unsupported media type",
	orchestrator.CodeProviderUnavailable:     "Payment provider unavailable",
	orchestrator.CodeRateLimited:             "Too many requests",
	orchestrator.CodeUnavailable:             "Service unavailable",
	orchestrator.CodeInternal:                "Internal error",
}

// Problem is an RFC 9457 problem details body, with payorch's extensions.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Param  string `json:"param,omitempty"`
	// Fields names request fields (never their values) the problem is
	// about, e.g. those that differ on idempotency_key_reused.
	Fields    []string `json:"fields,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
	// PaymentID names the payment a business refusal is about (a declined
	// payment's id, for instance).
	PaymentID string `json:"payment_id,omitempty"`
}

// problemFor turns any error into the Problem a client may see and, for
// internal errors, reports that the detail must be logged.
func problemFor(err error) (*orchestrator.Error, bool) {
	var appErr *orchestrator.Error
	if errors.As(err, &appErr) {
		return appErr, appErr.Code == orchestrator.CodeInternal
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
	status, ok := problemStatus[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	p := Problem{
		Type:      problemType + string(e.Code),
		Title:     problemTitle[e.Code],
		Status:    status,
		Detail:    e.Message,
		Code:      string(e.Code),
		Param:     e.Param,
		Fields:    e.Fields,
		RequestID: c.Response().Header().Get(echo.HeaderXRequestID),
	}
	if status == http.StatusInternalServerError {
		p.Detail = "internal error; quote request_id to support"
	}
	return p
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
