package fake

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/payorch/payorch/providers"
)

// 3-D Secure: how an issuer treats the cardholder's authentication, the
// challenge a confirmation can start instead of placing the hold, and its
// completion (by the challenge page, challenge.go, or the admin API).

// threeDS is how a card's issuer treats authentication, Stripe's test
// methods and numbers keeping their meaning.
type threeDS string

const (
	// threeDSNone: the issuer authenticates only when asked to
	// (request_three_d_secure). Every card without a row in the tables
	// below.
	threeDSNone threeDS = ""
	// threeDSRequired: the issuer always challenges; with no cardholder
	// there (no return_url) the payment is declined
	// authentication_required. pm_card_threeDSecure2Required,
	// 4000000000003220.
	threeDSRequired threeDS = "required"
	// threeDSOptional: the issuer authenticates without a challenge
	// (frictionless) unless asked to challenge. pm_card_threeDSecureOptional,
	// 4000000000003055.
	threeDSOptional threeDS = "optional"
	// threeDSIssuerRequired: the issuer insists on authentication and
	// declines a payment sent without request_three_d_secure
	// authentication_required, cardholder there or not.
	// pm_card_authenticationRequired, 4000002760003184.
	threeDSIssuerRequired threeDS = "issuer_required"
)

// Stripe's 3-D Secure test card numbers.
const (
	TestCardThreeDSRequired        = "4000000000003220"
	TestCardThreeDSOptional        = "4000000000003055"
	TestCardAuthenticationRequired = "4000002760003184"
)

// threeDSMethods are Stripe's 3-D Secure test payment methods; each also
// approves once authenticated (paymentMethods lists them with no decline).
var threeDSMethods = map[string]threeDS{
	"pm_card_threeDSecure2Required":  threeDSRequired,
	"pm_card_threeDSecureOptional":   threeDSOptional,
	"pm_card_authenticationRequired": threeDSIssuerRequired,
}

// threeDSCards are Stripe's 3-D Secure test card numbers.
var threeDSCards = map[string]threeDS{
	TestCardThreeDSRequired:        threeDSRequired,
	TestCardThreeDSOptional:        threeDSOptional,
	TestCardAuthenticationRequired: threeDSIssuerRequired,
}

// decide is what the issuer does at confirmation: challenge the
// cardholder, or decline (code), or neither (authorize at once). request
// is request_three_d_secure, which validation only lets through with a
// returnURL. A card that declines declines before any challenge (decided
// by the caller), so a challenge is never followed by a card decline.
func (k threeDS) decide(returnURL string, request bool) (challenge bool, decline string) {
	switch {
	case k == threeDSRequired && returnURL == "":
		return false, providers.CodeAuthenticationRequired
	case k == threeDSRequired:
		return true, ""
	case k == threeDSIssuerRequired && !request:
		return false, providers.CodeAuthenticationRequired
	}
	// Stripe's request_three_d_secure=any challenges every test card that
	// supports 3-D Secure; the fake treats every card so.
	return request, ""
}

// Results of a completed challenge: the redirect_status the shopper's
// browser is sent back with.
const (
	authSucceeded = "succeeded"
	authFailed    = "failed"
)

// maxReturnURL bounds return_url.
const maxReturnURL = 2048

// checkReturnURL validates a return_url and request_three_d_secure, which
// needs one: authentication needs a cardholder to send back.
func checkReturnURL(returnURL string, request bool) *apiError {
	if returnURL == "" {
		if request {
			return invalid("request_three_d_secure", "request_three_d_secure needs a return_url: the cardholder must come back from the challenge")
		}
		return nil
	}
	u, err := url.Parse(returnURL)
	if len(returnURL) > maxReturnURL || err != nil || (u.Scheme != "http" && u.Scheme != "https") || !cspSafeHost(u.Host) || u.User != nil {
		return invalid("return_url", "return_url must be an absolute http(s) URL without credentials, at most %d characters", maxReturnURL)
	}
	return nil
}

// nextActionJSON is the wire form of a challenge waiting for the
// cardholder (Stripe's next_action.redirect_to_url).
type nextActionJSON struct {
	Type      string `json:"type"`
	URL       string `json:"url"`
	ReturnURL string `json:"return_url"`
}

// publicBase is the base URL of the challenge pages: Config.PublicURL, else
// the scheme and Host the request reached the fake at (the confirmation
// is sent by payorch with the token, so its Host is one payorch reaches
// the fake by).
func (s *Server) publicBase(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimRight(s.cfg.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// challengeLocked makes h wait for the cardholder: a fresh unguessable
// token in the URL of its challenge page. No money is held. Called with
// s.mu held.
func (s *Server) challengeLocked(h *hold, base, key string) {
	h.status = providers.StatusRequiresAction
	h.captureBefore = time.Time{}
	h.confirmKey = key
	h.challengeToken = NewToken()
	h.nextActionURL = base + "/3ds/" + url.PathEscape(h.ref) + "?" + url.Values{"token": {h.challengeToken}}.Encode()
}

// challengeOf returns the hold whose challenge token is token, nil when
// none is: an unknown hold and a wrong token look the same. Called with
// s.mu held.
func (s *Server) challengeOf(ref, token string) *hold {
	h := s.holdLocked(ref)
	if h == nil || h.challengeToken == "" || subtle.ConstantTimeCompare([]byte(h.challengeToken), []byte(token)) != 1 {
		return nil
	}
	return h
}

// completeChallengeLocked moves a hold waiting for the cardholder, once:
// to authorized (with a capture_before, like any authorization) when
// complete, else to declined authentication_failed. It reports whether it
// moved the hold; a hold that left requires_action (completed, failed,
// canceled) stays as it is. The move is logged as an authenticate
// operation and announced by a webhook, both carrying the key of the
// confirmation that started the challenge. Called with s.mu held.
func (s *Server) completeChallengeLocked(now time.Time, h *hold, complete bool) bool {
	if h.status != providers.StatusRequiresAction {
		return false
	}
	op := Operation{Operation: OpAuthenticate, IdempotencyKey: h.confirmKey, Ref: h.ref,
		PaymentID: h.metadata[metaPaymentID], AmountMinor: h.amount, At: now}
	ev := Event{IdempotencyKey: h.confirmKey, Data: EventData{HoldRef: h.ref, PaymentID: h.metadata[metaPaymentID],
		ObjectID: h.ref, AmountMinor: h.amount, Currency: h.currency}}
	if complete {
		h.status, h.captureBefore, h.authResult = providers.StatusAuthorized, now.Add(s.cfg.HoldLifetime), authSucceeded
		s.grantLocked(h)
		op.Outcome, ev.Type = OutcomeSucceeded, EventHoldAuthorized
	} else {
		h.status, h.declineCode, h.authResult = providers.StatusDeclined, providers.CodeAuthenticationFailed, authFailed
		op.Outcome, ev.Type, ev.Data.FailureCode = providers.CodeAuthenticationFailed, EventHoldPaymentFailed, providers.CodeAuthenticationFailed
	}
	h.touch(now)
	op = s.logOpLocked(op)
	s.emitLocked(ev)
	s.persistLocked()
	s.log.Info("fake provider: challenge completed", "ref", h.ref, "result", h.authResult, "seq", op.Seq)
	return true
}

// returnTo is h's return_url with the outcome of its challenge appended
// (payment_intent, redirect_status, as Stripe does), the URL's own query
// kept as it is.
func (h *hold) returnTo() string {
	u, err := url.Parse(h.returnURL)
	if err != nil { // validated when given; a state file edited by hand
		return ""
	}
	extra := url.Values{"payment_intent": {h.ref}, "redirect_status": {h.authResult}}.Encode()
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += extra
	return u.String()
}

// authenticateParams is the body of POST /_admin/holds/{ref}/authenticate.
type authenticateParams struct {
	// Result is "complete" or "fail", the challenge page's two buttons.
	Result string `json:"result"`
}

// Challenge results, as the page's buttons and the admin API name them.
const (
	resultComplete = "complete"
	resultFail     = "fail"
)

// handleAuthenticate serves POST /_admin/holds/{ref}/authenticate: what a
// click on the challenge page does, without the redirect. A hold not
// waiting for its cardholder is a 400 state_conflict and does not change.
func (s *Server) handleAuthenticate(w http.ResponseWriter, r *http.Request) {
	var p authenticateParams
	if e := decodeBody(w, r, &p); e != nil {
		writeError(w, e)
		return
	}
	if p.Result != resultComplete && p.Result != resultFail {
		writeError(w, invalid("result", "result must be %q or %q, got %q", resultComplete, resultFail, p.Result))
		return
	}
	v, e := s.authenticate(r.PathValue("ref"), p.Result == resultComplete)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// authenticate completes or fails the challenge of hold ref and returns
// the hold as it then is.
func (s *Server) authenticate(ref string, complete bool) (holdJSON, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holdLocked(ref)
	if h == nil {
		return holdJSON{}, notFound("hold", ref)
	}
	now := s.now()
	if !s.completeChallengeLocked(now, h, complete) {
		return holdJSON{}, rejected(providers.CodeStateConflict, "only a hold waiting for authentication can be authenticated; this one is %s", h.view(now).Status)
	}
	return h.view(now), nil
}
