package httpapi

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// Provider webhooks in: POST /webhooks/{connector}. Providers call it, so
// it takes no API key; what it trusts is the signature, which the
// connector's adapter checks against the connector's webhook secret
// (orchestrator.Service.ReceiveWebhook). It needs no Idempotency-Key
// either: the provider's event id deduplicates.

// MaxWebhookBodyBytes bounds a provider webhook's body, 256 KiB: a
// provider's event carries its whole object, larger than our API's
// requests (MaxBodyBytes, which does not apply here).
const MaxWebhookBodyBytes = 256 << 10

// webhookPrefix is where provider webhooks are received.
const webhookPrefix = "/webhooks/"

// isProviderWebhook reports whether c is a provider webhook, which has
// its own body limit.
func isProviderWebhook(c echo.Context) bool {
	return strings.HasPrefix(c.Request().URL.Path, webhookPrefix)
}

// receiveWebhook serves POST /webhooks/{connector}: the raw body (at most
// MaxWebhookBodyBytes) and the headers go to the domain, which verifies
// and applies the event. 200 with the receipt for an accepted event,
// a duplicate or one about an object we do not know; 400 validation_failed
// (nothing stored) when it cannot be trusted; 413 body_too_large.
func (s *Server) receiveWebhook(c echo.Context) error {
	req := c.Request()
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, MaxWebhookBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &orchestrator.Error{Code: orchestrator.CodeBodyTooLarge, Message: "webhook body exceeds 256 KiB"}
		}
		return &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Param: "body", Message: "the webhook body could not be read", Err: err}
	}
	res, err := s.svc.ReceiveWebhook(req.Context(), c.Param("connector"), req.Header, body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}
