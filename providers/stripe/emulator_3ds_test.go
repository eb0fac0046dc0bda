package stripe

import (
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// The emulator's 3-D Secure, as Stripe's test mode does it. A payment
// whose issuer requires authentication (or whose PaymentIntent was created
// with request_three_d_secure=any) is, at confirmation:
//
//   - with error_on_requires_action=true: declined, a 402 card_error
//     authentication_required (decline_code authentication_required), the
//     PaymentIntent back in requires_payment_method;
//   - with return_url: requires_action, next_action {type: redirect_to_url,
//     redirect_to_url: {url, return_url}}, no charge yet, and the event
//     payment_intent.requires_action.
//
// The test then plays the cardholder: completeChallenge makes the charge
// and moves the PaymentIntent to requires_capture (event
// payment_intent.amount_capturable_updated), failChallenge moves it back to
// requires_payment_method with last_payment_error
// payment_intent_authentication_failure and no charge (event
// payment_intent.payment_failed). A PaymentIntent in requires_action can be
// canceled, and is refused capture (payment_intent_unexpected_state).

// What an issuer does about authentication in Stripe's test mode.
const (
	// threeDSRequired: every payment is challenged.
	threeDSRequired = "required"
	// threeDSOptional: authentication is supported, not required; the
	// payment passes without a challenge (frictionless) unless
	// request_three_d_secure=any asks for one.
	threeDSOptional = "optional"
)

// emuThreeDS are Stripe's 3-D Secure test methods and numbers; any other
// card supports authentication without requiring it.
var emuThreeDS = map[string]string{
	"pm_card_threeDSecure2Required":  threeDSRequired,
	"4000000000003220":               threeDSRequired,
	"pm_card_authenticationRequired": threeDSRequired,
	"4000002760003184":               threeDSRequired,
	"pm_card_threeDSecureOptional":   threeDSOptional,
	"4000000000003055":               threeDSOptional,
}

// challenge leaves pi waiting for the cardholder, as a confirmation with
// return_url does. Without return_url Stripe's server-side confirmation
// would answer next_action use_stripe_sdk; the adapter always sends
// return_url or error_on_requires_action, so that is a defect here.
func (e *emulator) challenge(pi *emuIntent, f url.Values, key string) answer {
	if f.Get("return_url") == "" {
		e.t.Errorf("emulator: PaymentIntent %s confirmed with neither return_url nor error_on_requires_action", pi.id)
	}
	pi.status, pi.returnURL = "requires_action", f.Get("return_url")
	e.event("payment_intent.requires_action", pi, key)
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

// nextAction is pi's next_action: Stripe's redirect to its hosted 3-D
// Secure page, on the emulator's host.
func (e *emulator) nextAction(pi *emuIntent) any {
	if pi.status != "requires_action" {
		return nil
	}
	q := url.Values{"payment_intent": {pi.id}, "payment_intent_client_secret": {pi.id + "_secret_emulated"},
		"source": {"payatt_" + pi.id}}
	return map[string]any{"type": "redirect_to_url", "redirect_to_url": map[string]any{
		"url": e.srv.URL + "/3d_secure_2/hosted?" + q.Encode(), "return_url": pi.returnURL}}
}

// challengeURL is the challenge page of PaymentIntent id, as next_action
// shows it.
func (e *emulator) challengeURL(id string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	na, _ := e.nextAction(e.intents[id]).(map[string]any)
	if na == nil {
		return ""
	}
	return na["redirect_to_url"].(map[string]any)["url"].(string)
}

// completeChallenge is the cardholder passing the challenge of
// PaymentIntent id: the issuer authorizes, the hold is placed.
func (e *emulator) completeChallenge(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pi := e.waiting(id)
	if pi == nil {
		return
	}
	ch := &emuCharge{id: e.newID("ch"), intent: pi.id, currency: pi.currency, amount: pi.amount, created: now(),
		card: pi.card, status: "succeeded"}
	ch.captureBefore = time.Unix(ch.created, 0).Add(holdLife).Unix()
	ch.flex = grantFlex(pi)
	e.charges[ch.id] = ch
	pi.charge, pi.status, pi.capturable = ch.id, "requires_capture", pi.amount
	e.event("payment_intent.amount_capturable_updated", pi, "")
}

// failChallenge is the cardholder failing (or canceling) the challenge of
// PaymentIntent id: no charge, the PaymentIntent back in
// requires_payment_method with Stripe's payment_intent_authentication_failure.
func (e *emulator) failChallenge(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pi := e.waiting(id)
	if pi == nil {
		return
	}
	pi.lastError = map[string]any{
		"type": "invalid_request_error", "code": "payment_intent_authentication_failure",
		"doc_url": "https://stripe.com/docs/error-codes/payment-intent-authentication-failure",
		"message": "The provided PaymentMethod has failed authentication. You can provide payment_method_data or " +
			"a new PaymentMethod to attempt to fulfill this PaymentIntent again.",
		"payment_method": e.paymentMethodJSON(pi),
	}
	pi.status, pi.paymentMethod = "requires_payment_method", ""
	e.event("payment_intent.payment_failed", pi, "")
}

// waiting is PaymentIntent id if it waits for the cardholder. Called with
// mu held.
func (e *emulator) waiting(id string) *emuIntent {
	pi := e.intents[id]
	if pi == nil || pi.status != "requires_action" {
		e.t.Errorf("emulator: no challenge waits on PaymentIntent %s", id)
		return nil
	}
	return pi
}

// paymentMethodJSON is pi's payment method as Stripe shows it expanded.
func (e *emulator) paymentMethodJSON(pi *emuIntent) map[string]any {
	card := map[string]any{"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": time.Now().Year() + 2}
	if c := pi.card; c != nil {
		card = map[string]any{"brand": c.brand, "last4": c.last4, "exp_month": c.expMonth, "exp_year": c.expYear}
	}
	return map[string]any{"id": pi.paymentMethod, "object": "payment_method", "type": "card", "card": card,
		"created": pi.created, "livemode": false}
}

// event records an event about pi, caused by the request with key ("" for
// none). Called with mu held.
func (e *emulator) event(typ string, pi *emuIntent, key string) {
	e.events = append(e.events, &emuEvent{id: e.newID("evt"), typ: typ, created: now(),
		object: e.intentJSON(pi, false), key: key})
}

// eventJSON is ev as Stripe sends it, to a webhook endpoint or in a list.
func eventJSON(ev *emuEvent) map[string]any {
	req := map[string]any{"id": nil, "idempotency_key": nil}
	if ev.key != "" {
		req = map[string]any{"id": "req_emulated", "idempotency_key": ev.key}
	}
	return map[string]any{"id": ev.id, "object": "event", "type": ev.typ, "created": ev.created,
		"api_version": "2023-10-16", "livemode": false, "pending_webhooks": 1, "request": req,
		"data": map[string]any{"object": ev.object}}
}

// eventBodies are the bodies Stripe would deliver for the events of type
// about PaymentIntent id, oldest first.
func (e *emulator) eventBodies(typ, id string) [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out [][]byte
	for _, ev := range e.events {
		if ev.typ == typ && ev.object["id"] == id {
			b, err := json.Marshal(eventJSON(ev))
			if err != nil {
				e.t.Errorf("emulator: encoding event: %v", err)
			}
			out = append(out, b)
		}
	}
	return out
}
