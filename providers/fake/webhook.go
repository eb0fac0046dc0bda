package fake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
)

// The fake provider's webhooks: what it sends (Event, signed like
// Stripe's in SignatureHeader) and how the Client reads them
// (ParseWebhook). The sending side is webhooksend.go.

// SignatureHeader carries a webhook's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>", Stripe's
// scheme (providers.SignWebhook).
const SignatureHeader = "Fake-Signature"

// Event types the fake provider sends.
const (
	EventHoldAuthorized  = "hold.authorized"
	EventHoldCaptured    = "hold.captured"
	EventCaptureFailed   = "capture.failed"
	EventHoldCanceled    = "hold.canceled"
	EventHoldExpired     = "hold.expired"
	EventRefundSucceeded = "refund.succeeded"
	EventRefundFailed    = "refund.failed"
	EventDisputeCreated  = "dispute.created"
	// EventHoldRequiresAction: the confirmation challenged the cardholder
	// (3-D Secure); nothing is held until the challenge is completed, then
	// hold.authorized follows, or hold.payment_failed.
	EventHoldRequiresAction = "hold.requires_action"
	// EventHoldPaymentFailed: an authorization that waited for the
	// cardholder failed; failure_code says why (authentication_failed).
	EventHoldPaymentFailed = "hold.payment_failed"
	// EventHoldAmountUpdated: an increment raised the hold; amount_minor
	// is the new total (Stripe's payment_intent.amount_capturable_updated).
	// payorch settles an increment by its own answer or a lookup, so it
	// maps to providers.WebhookUnknown.
	EventHoldAmountUpdated = "hold.amount_updated"
)

// eventKinds maps the fake's event types to the providers' kinds.
var eventKinds = map[string]providers.WebhookKind{
	EventHoldAuthorized:     providers.WebhookAuthorized,
	EventHoldCaptured:       providers.WebhookCaptureSucceeded,
	EventCaptureFailed:      providers.WebhookCaptureFailed,
	EventHoldCanceled:       providers.WebhookHoldCanceled,
	EventHoldExpired:        providers.WebhookHoldExpired,
	EventRefundSucceeded:    providers.WebhookRefundSucceeded,
	EventRefundFailed:       providers.WebhookRefundFailed,
	EventDisputeCreated:     providers.WebhookDisputeOpened,
	EventHoldRequiresAction: providers.WebhookRequiresAction,
	EventHoldPaymentFailed:  providers.WebhookAuthorizationFailed,
	EventHoldAmountUpdated:  providers.WebhookUnknown,
}

// Event is one webhook of the fake provider, as sent.
type Event struct {
	// ID is the event's id ("fevt_…"): a duplicate delivery repeats it.
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"`
	// IdempotencyKey is the key of the request that caused the event,
	// when one did (Stripe's request.idempotency_key).
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	Data           EventData `json:"data"`
}

// EventData is what an Event is about.
type EventData struct {
	// HoldRef is the hold's reference.
	HoldRef   string `json:"hold_ref"`
	PaymentID string `json:"payment_id,omitempty"`
	// ObjectID is the refund's or dispute's reference, else the hold's.
	ObjectID    string `json:"object_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	FailureCode string `json:"failure_code,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// WithWebhookSecret returns a copy of c that verifies webhooks with
// secret (the server's Config.WebhookSecret).
func (c *Client) WithWebhookSecret(secret string) *Client {
	cc := *c
	cc.webhookSecret = secret
	return &cc
}

var _ providers.WebhookVerifier = (*Client)(nil)

// ParseWebhook verifies a webhook of the fake provider (SignatureHeader,
// the secret of WithWebhookSecret, providers.WebhookTolerance at now) and
// normalizes its Event.
func (c *Client) ParseWebhook(header http.Header, body []byte, now time.Time) (providers.WebhookEvent, error) {
	if err := providers.VerifyWebhookSignature(c.webhookSecret, header.Get(SignatureHeader), body, now); err != nil {
		return providers.WebhookEvent{}, err
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return providers.WebhookEvent{}, fmt.Errorf("%w: %v", providers.ErrWebhookMalformed, err)
	}
	if ev.ID == "" || ev.Type == "" {
		return providers.WebhookEvent{}, fmt.Errorf("%w: no id or type", providers.ErrWebhookMalformed)
	}
	kind, ok := eventKinds[ev.Type]
	if !ok {
		kind = providers.WebhookUnknown
	}
	return providers.WebhookEvent{ID: ev.ID, Type: ev.Type, Kind: kind, HoldRef: ev.Data.HoldRef, ObjectID: ev.Data.ObjectID,
		AmountMinor: ev.Data.AmountMinor, Currency: ev.Data.Currency, IdempotencyKey: ev.IdempotencyKey,
		FailureCode: ev.Data.FailureCode, Reason: ev.Data.Reason, CreatedAt: ev.CreatedAt}, nil
}
