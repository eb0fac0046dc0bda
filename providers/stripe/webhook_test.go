package stripe

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/payorch/payorch/providers"
)

// TestParseWebhook verifies Stripe's signature with stripe-go's own test
// signer, no network, and normalizes the events payorch acts on.
func TestParseWebhook(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_secret"
	c, err := New(Config{SecretKey: "sk_test_1", WebhookSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	payload := func(typ, object string) []byte {
		return []byte(fmt.Sprintf(`{"id":"evt_1","object":"event","api_version":"2020-08-27","created":1764000000,"type":%q,`+
			`"request":{"id":"req_1","idempotency_key":"po_abc"},"data":{"object":%s}}`, typ, object))
	}
	signed := func(body []byte, secret string, at time.Time) http.Header {
		sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
		h := http.Header{}
		h.Set(SignatureHeader, sp.Header)
		return h
	}

	t.Run("Kinds", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			typ, object string
			want        providers.WebhookEvent
		}{
			{"payment_intent.requires_action", `{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"eur","status":"requires_action",` +
				`"next_action":{"type":"redirect_to_url","redirect_to_url":{"url":"https://hooks.stripe.com/3d_secure_2/hosted?payment_intent=pi_1","return_url":"https://shop.example/r"}}}`,
				providers.WebhookEvent{Kind: providers.WebhookRequiresAction, HoldRef: "pi_1", ObjectID: "pi_1", Currency: "EUR", AmountMinor: 1000}},
			{"payment_intent.amount_capturable_updated", `{"id":"pi_1","object":"payment_intent","amount":1000,"amount_capturable":1000,"currency":"eur","status":"requires_capture"}`,
				providers.WebhookEvent{Kind: providers.WebhookAuthorized, HoldRef: "pi_1", ObjectID: "pi_1", Currency: "EUR", AmountMinor: 1000}},
			{"payment_intent.payment_failed", `{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"eur","status":"requires_payment_method",` +
				`"last_payment_error":{"type":"invalid_request_error","code":"payment_intent_authentication_failure","message":"The provided PaymentMethod has failed authentication."}}`,
				providers.WebhookEvent{Kind: providers.WebhookAuthorizationFailed, HoldRef: "pi_1", ObjectID: "pi_1", Currency: "EUR", AmountMinor: 1000,
					FailureCode: providers.CodeAuthenticationFailed}},
			{"payment_intent.payment_failed", `{"id":"pi_1","object":"payment_intent","amount":1000,"status":"requires_payment_method",` +
				`"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"}}`,
				providers.WebhookEvent{Kind: providers.WebhookAuthorizationFailed, HoldRef: "pi_1", ObjectID: "pi_1", AmountMinor: 1000, FailureCode: "insufficient_funds"}},
			{"payment_intent.payment_failed", `{"id":"pi_1","object":"payment_intent","amount":1000,"status":"requires_payment_method",` +
				`"last_payment_error":{"type":"card_error","code":"authentication_required","decline_code":"authentication_required"}}`,
				providers.WebhookEvent{Kind: providers.WebhookAuthorizationFailed, HoldRef: "pi_1", ObjectID: "pi_1", AmountMinor: 1000,
					FailureCode: providers.CodeAuthenticationRequired}},
			{"payment_intent.payment_failed", `{"id":"pi_1","object":"payment_intent","amount":1000,"status":"requires_payment_method",` +
				`"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline"}}`,
				providers.WebhookEvent{Kind: providers.WebhookAuthorizationFailed, HoldRef: "pi_1", ObjectID: "pi_1", AmountMinor: 1000, FailureCode: providers.CodeCardDeclined}},
			{"payment_intent.canceled", `{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"eur","cancellation_reason":"automatic"}`,
				providers.WebhookEvent{Kind: providers.WebhookHoldExpired, HoldRef: "pi_1", ObjectID: "pi_1", Currency: "EUR", Reason: "automatic"}},
			{"payment_intent.canceled", `{"id":"pi_1","object":"payment_intent","cancellation_reason":"requested_by_customer"}`,
				providers.WebhookEvent{Kind: providers.WebhookHoldCanceled, HoldRef: "pi_1", ObjectID: "pi_1", Reason: "requested_by_customer"}},
			{"charge.expired", `{"id":"ch_1","object":"charge","payment_intent":"pi_1","currency":"usd"}`,
				providers.WebhookEvent{Kind: providers.WebhookHoldExpired, HoldRef: "pi_1", ObjectID: "ch_1", Currency: "USD"}},
			{"payment_intent.succeeded", `{"id":"pi_1","object":"payment_intent","amount":1000,"amount_received":800}`,
				providers.WebhookEvent{Kind: providers.WebhookCaptureSucceeded, HoldRef: "pi_1", ObjectID: "pi_1", AmountMinor: 800}},
			{"charge.captured", `{"id":"ch_1","object":"charge","payment_intent":{"id":"pi_1"},"amount_captured":700}`,
				providers.WebhookEvent{Kind: providers.WebhookCaptureSucceeded, HoldRef: "pi_1", ObjectID: "ch_1", AmountMinor: 700}},
			{"refund.created", `{"id":"re_1","object":"refund","payment_intent":"pi_1","amount":300,"status":"succeeded"}`,
				providers.WebhookEvent{Kind: providers.WebhookRefundSucceeded, HoldRef: "pi_1", ObjectID: "re_1", AmountMinor: 300}},
			{"refund.updated", `{"id":"re_1","object":"refund","payment_intent":"pi_1","amount":300,"status":"failed","failure_reason":"lost_or_stolen_card"}`,
				providers.WebhookEvent{Kind: providers.WebhookRefundFailed, HoldRef: "pi_1", ObjectID: "re_1", AmountMinor: 300, FailureCode: "lost_or_stolen_card"}},
			{"charge.dispute.created", `{"id":"dp_1","object":"dispute","payment_intent":"pi_1","amount":1000,"reason":"fraudulent"}`,
				providers.WebhookEvent{Kind: providers.WebhookDisputeOpened, HoldRef: "pi_1", ObjectID: "dp_1", AmountMinor: 1000, Reason: "fraudulent"}},
			{"customer.created", `{"id":"cus_1","object":"customer"}`,
				providers.WebhookEvent{Kind: providers.WebhookUnknown, ObjectID: "cus_1"}},
		} {
			body := payload(tc.typ, tc.object)
			got, err := c.ParseWebhook(signed(body, secret, time.Now()), body, time.Now())
			want := tc.want
			want.ID, want.Type, want.IdempotencyKey, want.CreatedAt = "evt_1", tc.typ, "po_abc", time.Unix(1764000000, 0).UTC()
			if err != nil || got != want {
				t.Errorf("%s %s:\n got  %+v %v\n want %+v", tc.typ, tc.object, got, err, want)
			}
		}
	})

	t.Run("UntrustedIsRefused", func(t *testing.T) {
		t.Parallel()
		body := payload("payment_intent.canceled", `{"id":"pi_1","object":"payment_intent"}`)
		for name, h := range map[string]http.Header{
			"Missing":     {},
			"OtherSecret": signed(body, "whsec_other", time.Now()),
			"Stale":       signed(body, secret, time.Now().Add(-10*time.Minute)),
			"Garbage":     {SignatureHeader: {"nonsense"}},
		} {
			if _, err := c.ParseWebhook(h, body, time.Now()); !errors.Is(err, providers.ErrWebhookSignature) {
				t.Errorf("%s: %v, want ErrWebhookSignature", name, err)
			}
		}
		tampered := append([]byte{}, body...)
		tampered[10] = 'X'
		if _, err := c.ParseWebhook(signed(body, secret, time.Now()), tampered, time.Now()); !errors.Is(err, providers.ErrWebhookSignature) {
			t.Errorf("tampered body: %v", err)
		}
		noSecret, _ := New(Config{SecretKey: "sk_test_1"})
		if _, err := noSecret.ParseWebhook(signed(body, "", time.Now()), body, time.Now()); !errors.Is(err, providers.ErrWebhookNoSecret) {
			t.Errorf("no secret: %v", err)
		}
		notEvent := []byte(`{"hello":"world"}`)
		if _, err := c.ParseWebhook(signed(notEvent, secret, time.Now()), notEvent, time.Now()); !errors.Is(err, providers.ErrWebhookMalformed) {
			t.Errorf("signed non-event: %v", err)
		}
	})
}
