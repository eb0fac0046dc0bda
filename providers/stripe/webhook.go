package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/payorch/payorch/providers"
)

var _ providers.WebhookVerifier = (*Client)(nil)

// SignatureHeader is the header Stripe signs its webhooks in.
const SignatureHeader = "Stripe-Signature"

// stripeObject is the part of an event's data.object the adapter reads:
// a PaymentIntent, a Charge, a Refund or a Dispute.
type stripeObject struct {
	ID                 string `json:"id"`
	Object             string `json:"object"`
	PaymentIntent      any    `json:"payment_intent"`
	Amount             int64  `json:"amount"`
	AmountReceived     int64  `json:"amount_received"`
	AmountCaptured     int64  `json:"amount_captured"`
	Currency           string `json:"currency"`
	Status             string `json:"status"`
	CancellationReason string `json:"cancellation_reason"`
	FailureReason      string `json:"failure_reason"`
	Reason             string `json:"reason"`
	// LastPaymentError is a PaymentIntent's last_payment_error: why its
	// last attempt failed.
	LastPaymentError *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	} `json:"last_payment_error"`
}

// failureCode is why a PaymentIntent's attempt failed, as holdOf stores a
// decline (declineCode): authentication_failed for a failed challenge, else
// the decline code or the error code.
func (o stripeObject) failureCode() string {
	if o.LastPaymentError == nil {
		return declineCode(nil)
	}
	return declineCode(&stripego.Error{Code: stripego.ErrorCode(o.LastPaymentError.Code),
		DeclineCode: stripego.DeclineCode(o.LastPaymentError.DeclineCode)})
}

// intentRef is the PaymentIntent an object belongs to: the object itself
// for a PaymentIntent, else its payment_intent (an id, or the expanded
// object).
func (o stripeObject) intentRef() string {
	if o.Object == "payment_intent" {
		return o.ID
	}
	switch v := o.PaymentIntent.(type) {
	case string:
		return v
	case map[string]any:
		id, _ := v["id"].(string)
		return id
	}
	return ""
}

// ParseWebhook verifies a Stripe webhook with stripe-go's webhook package
// (Stripe-Signature, the account's webhook secret, a tolerance of
// providers.WebhookTolerance measured on the wall clock: stripe-go reads
// it itself, so now is not used) and normalizes its event:
//
//	payment_intent.amount_capturable_updated   authorized (a hold placed, a challenge completed included)
//	payment_intent.requires_action             requires_action (the cardholder's challenge awaits)
//	payment_intent.payment_failed              authorization_failed, FailureCode authentication_failed
//	                                           (payment_intent_authentication_failure), else the
//	                                           last_payment_error's decline_code or code
//	payment_intent.canceled                    hold_expired (cancellation_reason automatic), else hold_canceled
//	charge.expired                             hold_expired
//	payment_intent.succeeded, charge.captured  capture_succeeded
//	refund.created, refund.updated             refund_succeeded (status succeeded), refund_failed (failed, canceled)
//	refund.failed                              refund_failed
//	charge.dispute.created                     dispute_opened
//	anything else                              unknown
//
// The API version of the endpoint may differ from stripe-go's: only the
// few fields above are read, which every version has.
func (c *Client) ParseWebhook(header http.Header, body []byte, _ time.Time) (providers.WebhookEvent, error) {
	if c.webhookSecret == "" {
		return providers.WebhookEvent{}, providers.ErrWebhookNoSecret
	}
	ev, err := webhook.ConstructEventWithOptions(body, header.Get(SignatureHeader), c.webhookSecret,
		webhook.ConstructEventOptions{Tolerance: providers.WebhookTolerance, IgnoreAPIVersionMismatch: true})
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return providers.WebhookEvent{}, fmt.Errorf("%w: %v", providers.ErrWebhookSignature, err)
	case err != nil:
		return providers.WebhookEvent{}, fmt.Errorf("%w: %v", providers.ErrWebhookMalformed, err)
	case ev.ID == "" || ev.Type == "" || ev.Data == nil:
		return providers.WebhookEvent{}, fmt.Errorf("%w: no id, type or data", providers.ErrWebhookMalformed)
	}
	var obj stripeObject
	if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
		return providers.WebhookEvent{}, fmt.Errorf("%w: data.object: %v", providers.ErrWebhookMalformed, err)
	}
	out := providers.WebhookEvent{ID: ev.ID, Type: string(ev.Type), Kind: providers.WebhookUnknown,
		HoldRef: obj.intentRef(), ObjectID: obj.ID, Currency: strings.ToUpper(obj.Currency),
		CreatedAt: time.Unix(ev.Created, 0).UTC()}
	if ev.Request != nil {
		out.IdempotencyKey = ev.Request.IdempotencyKey
	}
	switch string(ev.Type) {
	case "payment_intent.amount_capturable_updated":
		out.Kind, out.AmountMinor = providers.WebhookAuthorized, obj.Amount
	case "payment_intent.requires_action":
		out.Kind, out.AmountMinor = providers.WebhookRequiresAction, obj.Amount
	case "payment_intent.payment_failed":
		out.Kind, out.AmountMinor, out.FailureCode = providers.WebhookAuthorizationFailed, obj.Amount, obj.failureCode()
	case "payment_intent.canceled":
		out.Kind, out.Reason = providers.WebhookHoldCanceled, obj.CancellationReason
		if obj.CancellationReason == "automatic" {
			out.Kind = providers.WebhookHoldExpired
		}
	case "charge.expired":
		out.Kind = providers.WebhookHoldExpired
	case "payment_intent.succeeded":
		out.Kind, out.AmountMinor = providers.WebhookCaptureSucceeded, obj.AmountReceived
	case "charge.captured":
		out.Kind, out.AmountMinor = providers.WebhookCaptureSucceeded, obj.AmountCaptured
	case "refund.created", "refund.updated", "refund.failed":
		out.AmountMinor = obj.Amount
		switch {
		case ev.Type == "refund.failed" || obj.Status == "failed" || obj.Status == "canceled":
			out.Kind, out.FailureCode = providers.WebhookRefundFailed, obj.FailureReason
		case obj.Status == "succeeded":
			out.Kind = providers.WebhookRefundSucceeded
		}
	case "charge.dispute.created":
		out.Kind, out.AmountMinor, out.Reason = providers.WebhookDisputeOpened, obj.Amount, obj.Reason
	}
	return out, nil
}
