package httpapi

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// The card form: a page a merchant embeds in an iframe, or links to, on
// which the shopper types a card. The page's own script sends the card
// straight from the browser to POST /v1/payment_methods with the tenant's
// publishable key, and hands back only the new method's id: by
// window.parent.postMessage({type: "payorch.payment_method", id}, origin)
// when embedded by the page at origin, or by sending the browser to
// return_url?payment_method=vpm_…. The card never passes through the
// merchant's page or server, nor through this page's own request: its
// fields have no name (a native submission carries nothing) and its
// Content-Security-Policy forbids form submissions, loads nothing but
// itself and lets only its nonce'd script and style run.
//
// GET /card_form?key=ppk_…&origin=https://shop.example&return_url=https://shop.example/done
// key is required; origin and return_url (at least one) must be of the
// tenant's browser origins. Only origin may frame the form
// (frame-ancestors); without origin nobody may. A refusal (a page with
// no field and no script saying why) anyone may.

//go:embed cardform/card_form.html
var cardFormFiles embed.FS

var cardFormPage = template.Must(template.ParseFS(cardFormFiles, "cardform/card_form.html"))

// routeCardForm is the card form's path.
const routeCardForm = "/card_form"

// cardFormData is what the page template gets.
type cardFormData struct {
	Nonce     string
	Key       string
	Origin    string
	ReturnURL string
	// Error, when set, is shown instead of the form.
	Error     string
	RequestID string
}

// cardForm: GET /card_form (no Authorization: the publishable key is in
// the query, as the merchant's page writes it). Errors are HTML pages:
// 400 (parameters), 401 (unknown key), 403 (a secret key, an origin or
// return_url not of the tenant's), 429 (too many failed keys from the
// address), 503 (no vault).
func (s *Server) cardForm(c echo.Context) error {
	nonce := newNonce()
	h := c.Response().Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	data := cardFormData{Nonce: nonce, RequestID: h.Get(echo.HeaderXRequestID)}
	frameAncestors := "'none'"
	status, err := s.cardFormCheck(c, &data)
	switch {
	case err != nil:
		// A refusal has no field and no script: any page may show it, so
		// the merchant integrating the form sees why in its frame.
		frameAncestors = "*"
		data = cardFormData{Nonce: nonce, RequestID: data.RequestID, Error: err.Error()}
		c.Set(errorCodeKey, cardFormCode(status))
	case data.Origin != "":
		frameAncestors = data.Origin
	}
	if frameAncestors == "'none'" {
		h.Set("X-Frame-Options", "DENY")
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+
		"'; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors "+frameAncestors)
	var buf bytes.Buffer
	if err := cardFormPage.Execute(&buf, data); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// cardFormError is why the card form is refused, as the page says it.
type cardFormError string

func (e cardFormError) Error() string { return string(e) }

// cardFormCode is the problem code of a refused card form's status, for
// the access log and metrics.
func cardFormCode(status int) orchestrator.Code {
	switch status {
	case http.StatusUnauthorized:
		return orchestrator.CodeUnauthorized
	case http.StatusForbidden:
		return orchestrator.CodeForbidden
	case http.StatusTooManyRequests:
		return orchestrator.CodeRateLimited
	case http.StatusServiceUnavailable:
		return orchestrator.CodeUnavailable
	case http.StatusInternalServerError:
		return orchestrator.CodeInternal
	}
	return orchestrator.CodeValidationFailed
}

// cardFormCheck checks the card form's parameters and fills data, or
// returns the status and error to show. A key that is not a publishable
// key is refused before it is looked at (and never shown): a secret key
// must not sit in a page's URL.
func (s *Server) cardFormCheck(c echo.Context, data *cardFormData) (int, error) {
	if s.vault == nil {
		return http.StatusServiceUnavailable, cardFormError("Card payments are not set up on this server.")
	}
	q := c.QueryParams()
	key := q.Get("key")
	if !strings.HasPrefix(key, "ppk_") || !orchestrator.KeyShaped(key) {
		return http.StatusBadRequest, cardFormError("The card form needs a publishable key (key=ppk_…).")
	}
	client := signInClient(c.RealIP())
	if s.authFailureWait(client) > 0 {
		return http.StatusTooManyRequests, cardFormError("Too many invalid keys from your network address. Try again later.")
	}
	p, err := s.svc.Authenticate(c.Request().Context(), key)
	switch orchestrator.ErrorCode(err) {
	case "":
	case orchestrator.CodeUnauthorized:
		s.authFailed(client, key)
		return http.StatusUnauthorized, cardFormError("This card form's key is not valid.")
	default:
		s.logger.ErrorContext(c.Request().Context(), "card form: authenticate", "error", err)
		return http.StatusInternalServerError, cardFormError("Something went wrong on our side.")
	}
	if p.Role != orchestrator.RolePublishable {
		return http.StatusForbidden, cardFormError("The card form needs a publishable key (key=ppk_…).")
	}
	origins, err := s.svc.BrowserOrigins(c.Request().Context(), p.TenantID)
	if err != nil {
		s.logger.ErrorContext(c.Request().Context(), "card form: browser origins", "error", err)
		return http.StatusInternalServerError, cardFormError("Something went wrong on our side.")
	}
	origin, returnURL := q.Get("origin"), q.Get("return_url")
	if origin == "" && returnURL == "" {
		return http.StatusBadRequest, cardFormError("The card form needs origin (the embedding page's) or return_url.")
	}
	if origin != "" && !slices.Contains(origins, origin) {
		return http.StatusForbidden, cardFormError("This page's origin is not allowed to use this card form.")
	}
	if returnURL != "" && !slices.Contains(origins, orchestrator.OriginOfURL(returnURL)) {
		return http.StatusForbidden, cardFormError("The return address is not allowed for this card form.")
	}
	data.Key, data.Origin, data.ReturnURL = key, origin, returnURL
	return http.StatusOK, nil
}

// newNonce is a fresh CSP nonce: 128 random bits.
func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
