package fake

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/payorch/payorch/providers"
)

// statusError classifies an answer with a non-2xx status and its body:
//
//	402                      KindDeclined, the decline code
//	401 (token missing)      KindNotExecuted provider_unavailable
//	409 (key in use), 429    KindNotExecuted
//	503 provider_unavailable KindNotExecuted (the fake guarantees it ran nothing)
//	other 5xx, 1xx, 3xx      KindUnknown
//	other 4xx                KindRejected, the body's code
func statusError(op Op, status int, body []byte) *providers.Error {
	ae := &APIError{StatusCode: status}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil {
		ae.Type, ae.Code, ae.Message, ae.Param, ae.hold = eb.Error.Type, eb.Error.Code, eb.Error.Message, eb.Error.Param, eb.Error.Hold
	}
	kind, code := providers.KindUnknown, ae.Code
	switch {
	case status == http.StatusPaymentRequired:
		kind = providers.KindDeclined
		if code == "" {
			code = providers.CodeCardDeclined
		}
	case status == http.StatusConflict:
		kind = providers.KindNotExecuted
		if code == "" {
			code = providers.CodeIdempotencyKeyInUse
		}
	case status == http.StatusUnauthorized:
		// The fake refused before doing anything: a configuration error
		// (PAYORCH_FAKE_TOKEN), never the payment's fault.
		kind, code = providers.KindNotExecuted, providers.CodeProviderUnavailable
	case status == http.StatusTooManyRequests:
		kind, code = providers.KindNotExecuted, providers.CodeProviderUnavailable
	case status == http.StatusServiceUnavailable && ae.Code == providers.CodeProviderUnavailable:
		kind = providers.KindNotExecuted
	case status >= 500:
		code = providers.CodeProviderInternalError
		if status == http.StatusGatewayTimeout {
			code = providers.CodeProviderTimeout
		}
	case status >= 400:
		kind = providers.KindRejected
		if code == "" {
			code = providers.CodeInvalidRequest
			if status == http.StatusNotFound {
				code = providers.CodeNotFound
			}
		}
	default:
		code = providers.CodeProviderInternalError
	}
	msg := ae.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &providers.Error{Kind: kind, Code: code, Message: fmt.Sprintf("fake %s: HTTP %d: %s", op, status, msg), Err: ae}
}
