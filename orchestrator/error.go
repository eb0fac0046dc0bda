package orchestrator

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code is a stable machine-readable error code, the `code` member of every
// problem+json body.
type Code string

// The error codes of the API (SPEC: Errors).
const (
	CodeIdempotencyKeyMissing   Code = "idempotency_key_missing"
	CodeIdempotencyKeyInvalid   Code = "idempotency_key_invalid"
	CodeIdempotencyKeyReused    Code = "idempotency_key_reused"
	CodeIdempotencyKeyInUse     Code = "idempotency_key_in_use"
	CodeValidationFailed        Code = "validation_failed"
	CodePaymentDeclined         Code = "payment_declined"
	CodePaymentStateConflict    Code = "payment_state_conflict"
	CodeAmountExceedsAuthorized Code = "amount_exceeds_authorized"
	// CodeAmountExceedsLimit: an increment above what the connector allows
	// the hold to be raised to, or a capture above its overcapture maximum
	// (flexhold.go).
	CodeAmountExceedsLimit   Code = "amount_exceeds_limit"
	CodeNotSupported         Code = "not_supported"
	CodeNotFound             Code = "not_found"
	CodeConflict             Code = "conflict"
	CodeMethodNotAllowed     Code = "method_not_allowed"
	CodeUnauthorized         Code = "unauthorized"
	CodeForbidden            Code = "forbidden"
	CodeBodyTooLarge         Code = "body_too_large"
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	CodeProviderUnavailable  Code = "provider_unavailable"
	CodeRateLimited          Code = "rate_limited"
	CodeUnavailable          Code = "service_unavailable"
	CodeInternal             Code = "internal"
)

// codeInfo is the one table of what each code says to a client: the HTTP
// status of its answer, a short fixed title, and whether it is a final
// refusal. httpapi's error handler and the stored answers of keyed
// requests (answer.go) read it.
var codeInfo = map[Code]struct {
	status int
	title  string
	// final: a business refusal (a decline, a state conflict, an amount
	// over what is authorized or left), the request's final answer,
	// stored and replayed like a success (SPEC: Idempotency protocol).
	final bool
}{
	CodeIdempotencyKeyMissing:   {http.StatusBadRequest, "Idempotency-Key header missing", false},
	CodeIdempotencyKeyInvalid:   {http.StatusBadRequest, "Idempotency-Key header invalid", false},
	CodeIdempotencyKeyReused:    {http.StatusConflict, "Idempotency key reused with a different request", false},
	CodeIdempotencyKeyInUse:     {http.StatusConflict, "Idempotency key in use", false},
	CodeValidationFailed:        {http.StatusBadRequest, "Validation failed", false},
	CodePaymentDeclined:         {http.StatusPaymentRequired, "Payment declined", true},
	CodePaymentStateConflict:    {http.StatusConflict, "Payment state conflict", true},
	CodeAmountExceedsAuthorized: {http.StatusUnprocessableEntity, "Amount exceeds authorized", true},
	CodeAmountExceedsLimit:      {http.StatusUnprocessableEntity, "Amount exceeds limit", true},
	CodeNotSupported:            {http.StatusUnprocessableEntity, "Not supported", true},
	CodeNotFound:                {http.StatusNotFound, "Not found", false},
	CodeConflict:                {http.StatusConflict, "Conflict", false},
	CodeMethodNotAllowed:        {http.StatusMethodNotAllowed, "Method not allowed", false},
	CodeUnauthorized:            {http.StatusUnauthorized, "Unauthorized", false},
	CodeForbidden:               {http.StatusForbidden, "Forbidden", false},
	CodeBodyTooLarge:            {http.StatusRequestEntityTooLarge, "Request body too large", false},
	CodeUnsupportedMediaType:    {http.StatusUnsupportedMediaType, "Unsupported media type", false},
	CodeProviderUnavailable:     {http.StatusServiceUnavailable, "Payment provider unavailable", false},
	CodeRateLimited:             {http.StatusTooManyRequests, "Too many requests", false},
	CodeUnavailable:             {http.StatusServiceUnavailable, "Service unavailable", false},
	CodeInternal:                {http.StatusInternalServerError, "Internal error", false},
}

// Status is the HTTP status of an answer refused with c; 500 for a code
// not in the table.
func (c Code) Status() int {
	if info, ok := codeInfo[c]; ok {
		return info.status
	}
	return http.StatusInternalServerError
}

// Title is a short, fixed, human summary of c; "" for a code not in the
// table.
func (c Code) Title() string { return codeInfo[c].title }

// IsFinal reports whether a request refused with c has its final answer
// (a decline, a state conflict, an amount over what is authorized or
// left): stored and replayed like a success. Every other error is not
// stored, and the key is released for a retry.
func (c Code) IsFinal() bool { return codeInfo[c].final }

// Error is the one application error type. Its Message is safe to show to a
// client; Err (the cause) is for logs only and never leaves the process.
type Error struct {
	Code    Code
	Message string
	// Param names the offending request field or header, if any.
	Param string
	// Fields lists field names (never values) that the error is about, e.g.
	// the top-level fields that differ on idempotency_key_reused.
	Fields []string
	// RetryAfter, when positive, tells the client when to try again.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted client-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ParamError returns a validation_failed *Error about one request field.
func ParamError(param, format string, args ...any) *Error {
	return &Error{Code: CodeValidationFailed, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the Code of the first *Error in err's chain, CodeInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Internalf wraps an unexpected failure: the client sees only "internal",
// unless the database refused to store an answer it could lose
// (AsUnavailable: a 503 to retry). The packages built on the domain
// (orchestrator/webhooks) answer their failures with it, so httpapi maps
// them as it maps the domain's.
func Internalf(format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	if e := AsUnavailable(err); e != nil {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// internalf is Internalf, as this package's code calls it.
func internalf(format string, args ...any) *Error { return Internalf(format, args...) }
