package orchestrator

// The data of an event is the API's object as the change left it: a
// payment's events carry a Payment, a capture's, cancel's or refund's an
// Operation, payment.disputed a Dispute, webhook_endpoint.disabled a
// webhook endpoint (orchestrator/webhooks), and the staff events a
// reconciliation run (reconcile). The trigger
// functions store each object's fields (events.object, jsonb, written on
// the hot path of every payment); what the API and webhooks serve is that
// snapshot decoded into the very Go type the API answers with and encoded
// again by it (renderEventData), so an event's data and a GET of its
// object cannot differ in fields or formats (times in UTC, "Z"), and an
// event stored before a field existed comes out in today's shape, the
// field at the value every object of that time had (the column's
// default; migration 00018 filled in the rest).

import (
	"encoding/json"
	"strings"
	"time"
)

// Operation is a capture, cancel or refund of a payment as the API shows
// it: the answer of POST /v1/payments/{id}/refunds (a refund), and the
// data of the capture.…, cancel.… and refund.… events. Object is its kind.
type Operation struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	PaymentID   string  `json:"payment_id"`
	Status      string  `json:"status"`
	AmountMinor int64   `json:"amount_minor"`
	Currency    string  `json:"currency"`
	ProviderRef *string `json:"provider_ref"`
	// FailureCode is the provider's code of a failed operation.
	FailureCode    *string   `json:"failure_code"`
	IdempotencyKey string    `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Dispute is a dispute a provider reported on a payment: the data of a
// payment.disputed event.
type Dispute struct {
	ID          string    `json:"id"`
	Object      string    `json:"object"`
	PaymentID   string    `json:"payment_id"`
	Connector   string    `json:"connector"`
	ProviderRef string    `json:"provider_ref"`
	AmountMinor int64     `json:"amount_minor"`
	Currency    string    `json:"currency"`
	Reason      string    `json:"reason"`
	CreatedAt   time.Time `json:"created_at"`
}

// EventObject names the object an event of type typ carries: payment,
// operation (capture, cancel, refund, increment), dispute, webhook_endpoint or
// reconciliation_run.
func EventObject(typ string) string {
	kind, _, _ := strings.Cut(typ, ".")
	switch {
	case typ == EventPaymentDisputed:
		return "dispute"
	case kind == "payment":
		return "payment"
	case kind == string(opCapture) || kind == string(opCancel) || kind == string(opRefund) || kind == string(opIncrement):
		return "operation"
	case typ == EventEndpointDisabled:
		return "webhook_endpoint"
	case kind == "reconciliation":
		return "reconciliation_run"
	}
	return ""
}

// eventRenderers decode a stored object of another package's type (the
// reconciliation run, the webhook endpoint: reconcile and
// orchestrator/webhooks import orchestrator, not the reverse) and return
// the value to encode. Set by RegisterEventRenderer at init.
var eventRenderers = map[string]func(stored []byte) (any, error){}

// RegisterEventRenderer makes render the renderer of the events carrying
// object (EventObject), for an object whose API type lives in a package
// orchestrator cannot import. Call it from an init function only.
func RegisterEventRenderer(object string, render func(stored []byte) (any, error)) {
	eventRenderers[object] = render
}

// renderEventData returns the data of an event of type typ whose stored
// object is stored: the object decoded into its API type and encoded by
// it. An object of no known type is returned as stored.
func renderEventData(typ string, stored []byte) (json.RawMessage, error) {
	var v any
	switch obj := EventObject(typ); obj {
	case "payment":
		// An object older than on_expiry (00011) is of a payment that has
		// none, the column's default; extended_authorization's default,
		// false, is the zero value.
		p := Payment{OnExpiry: OnExpiryNone}
		if err := json.Unmarshal(stored, &p); err != nil {
			return nil, err
		}
		p.normalize()
		v = p
	case "operation":
		var op Operation
		if err := json.Unmarshal(stored, &op); err != nil {
			return nil, err
		}
		op.CreatedAt, op.UpdatedAt = op.CreatedAt.UTC(), op.UpdatedAt.UTC()
		v = op
	case "dispute":
		var d Dispute
		if err := json.Unmarshal(stored, &d); err != nil {
			return nil, err
		}
		d.CreatedAt = d.CreatedAt.UTC()
		v = d
	default:
		render := eventRenderers[obj]
		if render == nil {
			return stored, nil
		}
		var err error
		if v, err = render(stored); err != nil {
			return nil, err
		}
	}
	return json.Marshal(v)
}
