package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookVerifier is implemented by a Provider whose webhooks payorch
// accepts (POST /webhooks/{connector}): it checks a delivery's signature
// with the connector's webhook secret and turns the provider's event into
// a WebhookEvent. It never calls the provider.
type WebhookVerifier interface {
	// ParseWebhook verifies body against its signature header(s) at now
	// (a signature older than WebhookTolerance is stale) and returns the
	// event it carries. A delivery that cannot be trusted (no secret
	// configured, a signature missing, bad, stale, or made with another
	// secret) is an error wrapping ErrWebhookSignature (or
	// ErrWebhookNoSecret); a trusted body that is not an event is an
	// error wrapping ErrWebhookMalformed.
	ParseWebhook(header http.Header, body []byte, now time.Time) (WebhookEvent, error)
}

// WebhookTolerance is how old a webhook signature's timestamp may be
// (Stripe's default, 300 s): an older delivery is refused as a replay.
const WebhookTolerance = 300 * time.Second

// Errors of ParseWebhook, for errors.Is.
var (
	// ErrWebhookNoSecret: the connector has no webhook secret configured,
	// so nothing it receives can be trusted.
	ErrWebhookNoSecret = errors.New("no webhook secret is configured for this connector")
	// ErrWebhookSignature: the signature is missing, malformed, stale or
	// does not match the body.
	ErrWebhookSignature = errors.New("webhook signature is missing, invalid or stale")
	// ErrWebhookMalformed: the signed body is not an event.
	ErrWebhookMalformed = errors.New("webhook body is not a provider event")
)

// WebhookKind is what a provider event means for a payment, in the
// providers' common terms.
type WebhookKind string

// Webhook kinds. A refund the provider reports that matches none of
// payorch's refunds is a refund created at the provider by someone else:
// the orchestrator decides that, not the adapter, which cannot know.
const (
	// WebhookAuthorized: the hold was placed.
	WebhookAuthorized WebhookKind = "authorized"
	// WebhookRequiresAction: the issuer asked for the cardholder's
	// authentication; the hold waits for the challenge (Stripe:
	// payment_intent.requires_action).
	WebhookRequiresAction WebhookKind = "requires_action"
	// WebhookAuthorizationFailed: an authorization that waited for the
	// cardholder failed (FailureCode: CodeAuthenticationFailed for a failed
	// challenge, else the decline code). Stripe:
	// payment_intent.payment_failed.
	WebhookAuthorizationFailed WebhookKind = "authorization_failed"
	// WebhookHoldCanceled: the hold was voided (by payorch's cancel, or by
	// someone at the provider).
	WebhookHoldCanceled WebhookKind = "hold_canceled"
	// WebhookHoldExpired: the hold lapsed uncaptured.
	WebhookHoldExpired WebhookKind = "hold_expired"
	// WebhookCaptureSucceeded: the hold was captured (AmountMinor).
	WebhookCaptureSucceeded WebhookKind = "capture_succeeded"
	// WebhookCaptureFailed: a capture was refused (FailureCode).
	WebhookCaptureFailed WebhookKind = "capture_failed"
	// WebhookRefundSucceeded: a refund (ObjectID) of AmountMinor succeeded.
	WebhookRefundSucceeded WebhookKind = "refund_succeeded"
	// WebhookRefundFailed: a refund (ObjectID) failed (FailureCode).
	WebhookRefundFailed WebhookKind = "refund_failed"
	// WebhookDisputeOpened: the cardholder disputed the payment (ObjectID
	// is the dispute, AmountMinor the disputed amount).
	WebhookDisputeOpened WebhookKind = "dispute_opened"
	// WebhookUnknown: an event payorch does not act on; it is stored all
	// the same.
	WebhookUnknown WebhookKind = "unknown"
)

// WebhookEvent is one provider event, normalized.
type WebhookEvent struct {
	// ID is the provider's event id: deliveries of one event share it.
	ID string
	// Type is the provider's own event type (payment_intent.canceled,
	// hold.expired).
	Type string
	Kind WebhookKind
	// HoldRef is the provider's reference of the hold the event concerns:
	// a payment's provider_ref. Empty when the event names none.
	HoldRef string
	// ObjectID is the event's own object: the refund or dispute id, else
	// the hold's reference.
	ObjectID string
	// AmountMinor is the amount the event is about (captured, refunded,
	// disputed); 0 when it names none.
	AmountMinor int64
	Currency    string
	// IdempotencyKey is the idempotency key of the request that caused
	// the event, when the provider says (Stripe: request.idempotency_key):
	// for payorch's own requests, the forwarded key of the operation.
	IdempotencyKey string
	// FailureCode says why a capture or refund failed.
	FailureCode string
	// Reason is a dispute's reason, or why a hold was canceled.
	Reason string
	// CreatedAt is when the provider created the event.
	CreatedAt time.Time
}

// SignWebhook signs body at t with secret the way Stripe does, and the
// fake provider too: "t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
// "<t>.<body>")>".
func SignWebhook(secret string, t time.Time, body []byte) string {
	return "t=" + strconv.FormatInt(t.Unix(), 10) + ",v1=" + hex.EncodeToString(webhookMAC(secret, t.Unix(), body))
}

func webhookMAC(secret string, t int64, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifyWebhookSignature checks a SignWebhook header against body at now:
// one of its v1 signatures must be secret's, and its timestamp no older
// (nor further ahead) than WebhookTolerance. Every failure wraps
// ErrWebhookSignature; an empty secret is ErrWebhookNoSecret.
func VerifyWebhookSignature(secret, header string, body []byte, now time.Time) error {
	if secret == "" {
		return ErrWebhookNoSecret
	}
	if header == "" {
		return fmt.Errorf("%w: no signature header", ErrWebhookSignature)
	}
	var (
		ts   int64
		sawT bool
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: malformed signature header", ErrWebhookSignature)
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: malformed timestamp", ErrWebhookSignature)
			}
			ts, sawT = n, true
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if !sawT || len(sigs) == 0 {
		return fmt.Errorf("%w: no timestamp or no v1 signature", ErrWebhookSignature)
	}
	if age := now.Sub(time.Unix(ts, 0)); age > WebhookTolerance || age < -WebhookTolerance {
		return fmt.Errorf("%w: timestamp outside the %s tolerance", ErrWebhookSignature, WebhookTolerance)
	}
	want := webhookMAC(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrWebhookSignature)
}
