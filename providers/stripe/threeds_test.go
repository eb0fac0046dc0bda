package stripe

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/payorch/payorch/providers"
)

const testReturnURL = "https://shop.example/return?order=17"

// threeDSReq is an authorization of amount with pm by a shopper who is
// there to authenticate (a return URL).
func threeDSReq(amount int64, pm string) providers.AuthorizeRequest {
	req := authReq(amount)
	req.PaymentMethod, req.ReturnURL = pm, testReturnURL
	return req
}

// mustChallenge authorizes req and wants the hold waiting for the
// cardholder at the challenge the emulator shows.
func mustChallenge(t *testing.T, e *emulator, c *Client, req providers.AuthorizeRequest) providers.Hold {
	t.Helper()
	h, err := c.Authorize(t.Context(), req)
	if err != nil || h.Status != providers.StatusRequiresAction {
		t.Fatalf("Authorize: %+v, %v; want requires_action", h, err)
	}
	if want := e.challengeURL(h.Ref); h.NextActionURL == "" || h.NextActionURL != want {
		t.Fatalf("NextActionURL %q, want the challenge's %q", h.NextActionURL, want)
	}
	if !h.CaptureBefore.IsZero() || h.CapturedMinor != 0 || h.AmountMinor != req.AmountMinor {
		t.Fatalf("a hold waiting for the cardholder: %+v", h)
	}
	return h
}

// TestChallengeIsRequiresActionWithItsURL: each of Stripe's test methods
// and numbers that require authentication, confirmed with a return_url,
// waits for the cardholder at next_action.redirect_to_url: not an error,
// no money held, Lookup says the same, a capture is refused.
func TestChallengeIsRequiresActionWithItsURL(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	reqs := map[string]providers.AuthorizeRequest{}
	for _, pm := range []string{"pm_card_threeDSecure2Required", "pm_card_authenticationRequired"} {
		reqs[pm] = threeDSReq(2500, pm)
	}
	for _, number := range []string{"4000000000003220", "4000002760003184"} {
		req := cardAuthReq(2500, number)
		req.ReturnURL = testReturnURL
		reqs[number] = req
	}
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := mustChallenge(t, e, c, req)
			confirm := firstWrite(t, e, req.Key+keyConfirm).Form
			if confirm.Get("return_url") != testReturnURL || confirm.Has("error_on_requires_action") {
				t.Errorf("confirmation sent return_url %q, error_on_requires_action %q", confirm.Get("return_url"),
					confirm.Get("error_on_requires_action"))
			}
			if create := firstWrite(t, e, req.Key+keyCreate).Form; create.Has("payment_method_options[card][request_three_d_secure]") {
				t.Error("request_three_d_secure sent without RequestThreeDS")
			}
			got, err := c.Lookup(t.Context(), h.Ref)
			if err != nil || got != h {
				t.Errorf("Lookup: %+v, %v; want %+v", got, err, h)
			}
			_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref})
			wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
		})
	}
}

// TestChallengeReplaysUnderTheSameKey: a retry during the challenge gets
// the same PaymentIntent and the same challenge, each request executed
// once; a retry after the cardholder completed or failed it answers how it
// ended, not the stored requires_action.
func TestChallengeReplaysUnderTheSameKey(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	for _, tc := range []struct {
		name   string
		finish func(ref string)
		status providers.Status
		// declined is the decline code the retry answers, "" for none.
		declined string
	}{
		{"Completed", e.completeChallenge, providers.StatusAuthorized, ""},
		{"Failed", e.failChallenge, providers.StatusDeclined, providers.CodeAuthenticationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := threeDSReq(3100, "pm_card_threeDSecure2Required")
			first := mustChallenge(t, e, c, req)
			again, err := c.Authorize(t.Context(), req)
			if err != nil || again != first {
				t.Fatalf("retry during the challenge: %+v, %v; want %+v", again, err, first)
			}
			if cr, co := e.executions(req.Key+keyCreate), e.executions(req.Key+keyConfirm); cr != 1 || co != 1 {
				t.Fatalf("create executed %d times, confirm %d; want 1 each", cr, co)
			}
			tc.finish(first.Ref)
			after, err := c.Authorize(t.Context(), req)
			if tc.declined == "" && err != nil {
				t.Fatalf("retry after the challenge: %v", err)
			}
			if tc.declined != "" {
				wantKind(t, err, providers.KindDeclined, tc.declined)
			}
			if after.Ref != first.Ref || after.Status != tc.status || after.NextActionURL != "" {
				t.Fatalf("retry after the challenge: %+v; want %s", after, tc.status)
			}
			if co := e.executions(req.Key + keyConfirm); co != 1 {
				t.Fatalf("confirm executed %d times, want 1", co)
			}
		})
	}
}

// TestCompletedChallengeIsAuthorized: after the cardholder passed the
// challenge, Lookup reads the hold with the charge's capture_before, and
// it captures.
func TestCompletedChallengeIsAuthorized(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	h := mustChallenge(t, e, c, threeDSReq(4200, "pm_card_threeDSecure2Required"))
	e.completeChallenge(h.Ref)
	got, err := c.Lookup(t.Context(), h.Ref)
	if err != nil || got.Status != providers.StatusAuthorized || got.AmountMinor != 4200 || got.NextActionURL != "" {
		t.Fatalf("Lookup: %+v, %v", got, err)
	}
	if want := e.captureBefore(h.Ref); got.CaptureBefore.IsZero() || !got.CaptureBefore.Equal(want) {
		t.Errorf("CaptureBefore %s, want the charge's %s", got.CaptureBefore, want)
	}
	cp, err := c.Capture(t.Context(), providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref})
	if err != nil || cp.Status != providers.StatusCaptured || cp.CapturedMinor != 4200 {
		t.Fatalf("Capture: %+v, %v", cp, err)
	}
}

// TestFailedChallengeIsDeclinedAuthenticationFailed: Stripe moves the
// PaymentIntent back to requires_payment_method with last_payment_error
// payment_intent_authentication_failure; Lookup reads a decline,
// authentication_failed.
func TestFailedChallengeIsDeclinedAuthenticationFailed(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	req := cardAuthReq(900, "4000000000003220")
	req.ReturnURL = testReturnURL
	h := mustChallenge(t, e, c, req)
	e.failChallenge(h.Ref)
	got, err := c.Lookup(t.Context(), h.Ref)
	if err != nil || got.Status != providers.StatusDeclined || got.DeclineCode != providers.CodeAuthenticationFailed ||
		got.NextActionURL != "" || got.CapturedMinor != 0 {
		t.Fatalf("Lookup: %+v, %v", got, err)
	}
}

// TestCancelWhileWaitingForTheCardholder: an abandoned challenge's
// PaymentIntent is canceled (Stripe allows it in requires_action), and
// stays canceled.
func TestCancelWhileWaitingForTheCardholder(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	h := mustChallenge(t, e, c, threeDSReq(1500, "pm_card_authenticationRequired"))
	req := providers.CancelRequest{Key: fwdKey("cancel"), Ref: h.Ref}
	got, err := c.Cancel(t.Context(), req)
	if err != nil || got.Status != providers.StatusCanceled || got.NextActionURL != "" {
		t.Fatalf("Cancel: %+v, %v", got, err)
	}
	if again, err := c.Cancel(t.Context(), req); err != nil || again != got {
		t.Fatalf("retried Cancel: %+v, %v; want %+v", again, err, got)
	}
	if n := e.executions(req.Key); n != 1 {
		t.Errorf("cancel executed %d times, want 1", n)
	}
	if got, err := c.Lookup(t.Context(), h.Ref); err != nil || got.Status != providers.StatusCanceled {
		t.Fatalf("Lookup: %+v, %v", got, err)
	}
}

// TestAuthenticationRequiredWithoutReturnURL: nobody is there to
// authenticate (no return URL): the confirmation sends
// error_on_requires_action and the issuer's demand is a decline,
// authentication_required, as the hold and Lookup say too.
func TestAuthenticationRequiredWithoutReturnURL(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	pmReq := authReq(1300)
	pmReq.PaymentMethod = "pm_card_authenticationRequired"
	for name, req := range map[string]providers.AuthorizeRequest{
		"Method": pmReq, "Card": cardAuthReq(1300, "4000002760003184"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, err := c.Authorize(t.Context(), req)
			wantKind(t, err, providers.KindDeclined, providers.CodeAuthenticationRequired)
			if h.Status != providers.StatusDeclined || h.DeclineCode != providers.CodeAuthenticationRequired || h.Ref == "" {
				t.Fatalf("declined hold %+v", h)
			}
			confirm := firstWrite(t, e, req.Key+keyConfirm).Form
			if confirm.Get("error_on_requires_action") != "true" || confirm.Has("return_url") {
				t.Errorf("confirmation sent error_on_requires_action %q, return_url %q",
					confirm.Get("error_on_requires_action"), confirm.Get("return_url"))
			}
			got, err := c.Lookup(t.Context(), h.Ref)
			if err != nil || got.Status != providers.StatusDeclined || got.DeclineCode != providers.CodeAuthenticationRequired {
				t.Fatalf("Lookup: %+v, %v", got, err)
			}
		})
	}
}

// TestRequestThreeDSecure: request_three_d_secure=any goes with the
// creation only when asked, and makes a card that would pass without a
// challenge (pm_card_threeDSecureOptional: frictionless) take one; asked
// without a return URL it is refused before sending; asked under a key
// first used without it, Stripe refuses the key.
func TestRequestThreeDSecure(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)

	plain := threeDSReq(800, "pm_card_threeDSecureOptional")
	h, err := c.Authorize(t.Context(), plain)
	if err != nil || h.Status != providers.StatusAuthorized {
		t.Fatalf("frictionless Authorize: %+v, %v", h, err)
	}
	if create := firstWrite(t, e, plain.Key+keyCreate).Form; create.Has("payment_method_options[card][request_three_d_secure]") {
		t.Error("request_three_d_secure sent without RequestThreeDS")
	}

	asked := threeDSReq(800, "pm_card_threeDSecureOptional")
	asked.RequestThreeDS, asked.ExtendedAuthorization = true, true
	mustChallenge(t, e, c, asked)
	wantWrite(t, firstWrite(t, e, asked.Key+keyCreate), "/v1/payment_intents", asked.Key+keyCreate, map[string]string{
		"amount": "800", "currency": "eur", "capture_method": "manual", "payment_method": "pm_card_threeDSecureOptional",
		"payment_method_types[0]": "card", "description": "order 17",
		"metadata[payment_id]": asked.PaymentID, "metadata[tenant_id]": "42",
		"payment_method_options[card][request_extended_authorization]": "if_available",
		"payment_method_options[card][request_three_d_secure]":         "any",
	})

	noReturn := authReq(800)
	noReturn.RequestThreeDS = true
	before := len(e.recorded(""))
	_, err = c.Authorize(t.Context(), noReturn)
	wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
	if n := len(e.recorded("")) - before; n != 0 {
		t.Errorf("a refused authorization sent %d requests", n)
	}

	// The retry with authentication after an authentication_required
	// decline needs a key of its own.
	reused := plain
	reused.RequestThreeDS = true
	_, err = c.Authorize(t.Context(), reused)
	wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
}

// TestCardChallengeResumedWithoutCVC: a card's authorization resumed
// during the challenge, without the CVC the vault erased, is refused its
// key by Stripe and settled from the PaymentIntent: the card it was
// confirmed with (its payment method: no charge yet) is this one, so the
// answer is the challenge it waits on. Another card under the key stays a
// mismatch.
func TestCardChallengeResumedWithoutCVC(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	req := cardAuthReq(2100, "4000000000003220")
	req.ReturnURL = testReturnURL
	first := mustChallenge(t, e, c, req)

	resumed := req
	noCVC := *req.Card
	noCVC.CVC = ""
	resumed.Card = &noCVC
	got, err := c.Authorize(t.Context(), resumed)
	if err != nil || got != first {
		t.Fatalf("resumed without CVC: %+v, %v; want %+v", got, err, first)
	}

	other := resumed
	otherCard := noCVC
	otherCard.Number, otherCard.Last4 = "4000002760003184", "3184"
	other.Card = &otherCard
	_, err = c.Authorize(t.Context(), other)
	wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
	if n := e.executions(req.Key + keyConfirm); n != 1 {
		t.Errorf("confirm executed %d times, want 1", n)
	}
}

// TestHoldOfNextActions: only a redirect_to_url next action gives a URL;
// any other (Stripe.js's use_stripe_sdk, card_await_notification) is still
// requires_action, without one. Stripe-shaped PaymentIntents, decoded by
// stripe-go.
func TestHoldOfNextActions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, nextAction, url string }{
		{"RedirectToURL", `{"type":"redirect_to_url","redirect_to_url":{"url":"https://hooks.stripe.com/3d_secure_2/hosted?payment_intent=pi_1","return_url":"https://shop.example/r"}}`,
			"https://hooks.stripe.com/3d_secure_2/hosted?payment_intent=pi_1"},
		{"UseStripeSDK", `{"type":"use_stripe_sdk","use_stripe_sdk":{"type":"three_d_secure_redirect","stripe_js":"https://hooks.stripe.com/redirect/authenticate/src_1","source":"src_1"}}`, ""},
		{"CardAwaitNotification", `{"type":"card_await_notification","card_await_notification":{"charge_attempt_at":1764000000,"customer_approval_required":true}}`, ""},
		{"Missing", `null`, ""},
	} {
		var pi stripego.PaymentIntent
		body := `{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"eur","status":"requires_action","created":1764000000,"next_action":` + tc.nextAction + `}`
		if err := json.Unmarshal([]byte(body), &pi); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if h := holdOf(&pi); h.Status != providers.StatusRequiresAction || h.NextActionURL != tc.url {
			t.Errorf("%s: %s %q, want requires_action %q", tc.name, h.Status, h.NextActionURL, tc.url)
		}
	}
}

// TestWebhooksOfAChallenge: the events Stripe sends about a challenge, as
// the emulator shapes them, signed and parsed: requires_action (caused by
// the confirmation: its key), amount_capturable_updated after a completed
// challenge and payment_failed after a failed one (caused by the
// cardholder: no key), and payment_failed of a plain decline.
func TestWebhooksOfAChallenge(t *testing.T) {
	t.Parallel()
	const secret = "whsec_emulated"
	e := newEmulator(t)
	c, err := New(Config{SecretKey: e.secret, APIBase: e.srv.URL, Timeout: 5 * time.Second, WebhookSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	parse := func(typ, ref string) providers.WebhookEvent {
		t.Helper()
		bodies := e.eventBodies(typ, ref)
		if len(bodies) != 1 {
			t.Fatalf("%d %s events about %s, want 1", len(bodies), typ, ref)
		}
		sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: bodies[0], Secret: secret, Timestamp: time.Now()})
		ev, err := c.ParseWebhook(http.Header{SignatureHeader: {sp.Header}}, bodies[0], time.Now())
		if err != nil {
			t.Fatalf("ParseWebhook %s: %v", typ, err)
		}
		if ev.Type != typ || ev.HoldRef != ref || ev.ObjectID != ref || ev.Currency != "EUR" {
			t.Errorf("%s: %+v", typ, ev)
		}
		return ev
	}

	passed := threeDSReq(5100, "pm_card_threeDSecure2Required")
	h := mustChallenge(t, e, c, passed)
	ev := parse("payment_intent.requires_action", h.Ref)
	if ev.Kind != providers.WebhookRequiresAction || ev.AmountMinor != 5100 || ev.IdempotencyKey != passed.Key+keyConfirm {
		t.Errorf("requires_action: %+v", ev)
	}
	e.completeChallenge(h.Ref)
	if ev := parse("payment_intent.amount_capturable_updated", h.Ref); ev.Kind != providers.WebhookAuthorized ||
		ev.AmountMinor != 5100 || ev.IdempotencyKey != "" {
		t.Errorf("amount_capturable_updated: %+v", ev)
	}

	failed := mustChallenge(t, e, c, threeDSReq(5200, "pm_card_threeDSecure2Required"))
	e.failChallenge(failed.Ref)
	if ev := parse("payment_intent.payment_failed", failed.Ref); ev.Kind != providers.WebhookAuthorizationFailed ||
		ev.FailureCode != providers.CodeAuthenticationFailed || ev.AmountMinor != 5200 || ev.IdempotencyKey != "" {
		t.Errorf("payment_failed after the challenge: %+v", ev)
	}

	declinedReq := authReq(5300)
	declinedReq.PaymentMethod = "pm_card_chargeDeclinedInsufficientFunds"
	declined, err := c.Authorize(t.Context(), declinedReq)
	wantKind(t, err, providers.KindDeclined, "insufficient_funds")
	if ev := parse("payment_intent.payment_failed", declined.Ref); ev.Kind != providers.WebhookAuthorizationFailed ||
		ev.FailureCode != "insufficient_funds" || ev.IdempotencyKey != declinedReq.Key+keyConfirm {
		t.Errorf("payment_failed of a decline: %+v", ev)
	}
}

// TestReportListsChallengesAsRequiresAction: a PaymentIntent waiting for
// the cardholder is reported requires_action, not as unconfirmed.
func TestReportListsChallengesAsRequiresAction(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	from := time.Now().Add(-time.Minute)
	h := mustChallenge(t, e, c, threeDSReq(700, "pm_card_threeDSecure2Required"))
	var rows []providers.ReportRow
	err := c.Report(t.Context(), providers.ReportRequest{From: from, To: time.Now().Add(time.Minute)},
		func(r providers.ReportRow) error { rows = append(rows, r); return nil })
	if err != nil || len(rows) != 1 {
		t.Fatalf("Report: %d rows, %v", len(rows), err)
	}
	if r := rows[0]; r.Ref != h.Ref || r.Status != providers.StatusRequiresAction || r.AmountMinor != 700 || r.CapturedMinor != 0 {
		t.Errorf("row %+v", r)
	}
}
