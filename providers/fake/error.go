package fake

import (
	"fmt"
	"net/http"

	"github.com/payorch/payorch/providers"
)

// Error types carried in the "type" field of an error body, as Stripe names
// them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeAPI            = "api_error"
)

// errorBody is the wire form of every error: {"error": {...}}.
type errorBody struct {
	Error wireError `json:"error"`
}

// wireError is the inside of an error body.
type wireError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	// Hold is the declined hold, on a 402.
	Hold *holdJSON `json:"hold,omitempty"`
}

// apiError is an error the server answers with.
type apiError struct {
	status int
	wireError
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.Code, e.Message) }

func invalid(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, wireError: wireError{
		Type: typeInvalidRequest, Code: providers.CodeInvalidRequest,
		Message: fmt.Sprintf(format, args...), Param: param,
	}}
}

func rejected(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, wireError: wireError{
		Type: typeInvalidRequest, Code: code, Message: fmt.Sprintf(format, args...),
	}}
}

func notFound(what, ref string) *apiError {
	return &apiError{status: http.StatusNotFound, wireError: wireError{
		Type: typeInvalidRequest, Code: providers.CodeNotFound,
		Message: fmt.Sprintf("no such %s: %q", what, ref),
	}}
}

func declined(code string, h *holdJSON) *apiError {
	return &apiError{status: http.StatusPaymentRequired, wireError: wireError{
		Type: typeCard, Code: code, Message: "the card was declined", Hold: h,
	}}
}

func unavailable(status int) *apiError {
	return &apiError{status: status, wireError: wireError{
		Type: typeAPI, Code: providers.CodeProviderUnavailable,
		Message: "the provider is unavailable; nothing was executed, retry with the same key",
	}}
}

// APIError is an error answer of the fake provider as the Client received
// it. It is the Err of the *providers.Error the Client returns.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Type, Code, Message and Param are the fields of the error body; Code
	// is empty when the body was not the fake's error JSON.
	Type, Code, Message, Param string
	// hold is the declined hold of a 402.
	hold *holdJSON
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("fake provider: HTTP %d", e.StatusCode)
	}
	return fmt.Sprintf("fake provider: HTTP %d %s: %s", e.StatusCode, e.Code, e.Message)
}
