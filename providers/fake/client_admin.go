package fake

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/url"

	"github.com/payorch/payorch/providers"
)

// opAdmin names admin calls in errors.
const opAdmin Op = "admin"

// Operations lists the operations the fake executed, all of them when key
// is empty, else those carrying the idempotency key.
func (c *Client) Operations(ctx context.Context, key string) ([]Operation, error) {
	path := "/_admin/operations"
	if key != "" {
		path += "?" + url.Values{"idempotency_key": {key}}.Encode()
	}
	var out operationList
	if err := c.call(ctx, opAdmin, http.MethodGet, path, "", nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// InjectFault arms f on the server. An invalid f is a KindRejected
// invalid_request error.
func (c *Client) InjectFault(ctx context.Context, f Fault) error {
	return c.call(ctx, opAdmin, http.MethodPost, "/_admin/faults", "", f, nil)
}

// Faults lists the armed faults, Count being the calls each has left (0:
// until cleared).
func (c *Client) Faults(ctx context.Context) ([]Fault, error) {
	var out faultList
	if err := c.call(ctx, opAdmin, http.MethodGet, "/_admin/faults", "", nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// ClearFaults disarms every fault on the server.
func (c *Client) ClearFaults(ctx context.Context) error {
	return c.call(ctx, opAdmin, http.MethodDelete, "/_admin/faults", "", nil, nil)
}

// Drift alters the server's report output as d says. An invalid d is a
// KindRejected invalid_request error, a selector matching no hold a
// KindRejected resource_missing one.
func (c *Client) Drift(ctx context.Context, d Drift) error {
	return c.call(ctx, opAdmin, http.MethodPost, "/_admin/report/drift", "", d, nil)
}

// ClearDrift removes every drift on the server.
func (c *Client) ClearDrift(ctx context.Context) error {
	return c.call(ctx, opAdmin, http.MethodDelete, "/_admin/report/drift", "", nil, nil)
}

// Seed streams holds to the server as JSON lines, without holding them all
// in memory, and returns how many it stored. Seeding is not atomic: on an
// invalid hold (KindRejected invalid_request) the ones before it stay.
func (c *Client) Seed(ctx context.Context, holds iter.Seq[SeedHold]) (int, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		bw := bufio.NewWriterSize(pw, 64<<10)
		enc := json.NewEncoder(bw)
		for sh := range holds {
			if err := enc.Encode(sh); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(bw.Flush())
	}()
	resp, err := c.send(ctx, opAdmin, http.MethodPost, "/_admin/holds", "", "application/x-ndjson", pr)
	// Unblock and wait for the writer before the iterator goes out of use.
	pr.Close()
	<-done
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if resp.StatusCode/100 != 2 {
		return 0, statusError(opAdmin, resp.StatusCode, b)
	}
	var out seedResult
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, providers.TransportError("fake", string(opAdmin), err, true)
	}
	return out.Seeded, nil
}

// InjectWebhookFault arms f on the webhooks the server sends. An invalid
// f, or a server sending none, is a KindRejected invalid_request error.
func (c *Client) InjectWebhookFault(ctx context.Context, f WebhookFault) error {
	return c.call(ctx, opAdmin, http.MethodPost, "/_admin/webhooks/faults", "", f, nil)
}

// ClearWebhookFaults disarms every webhook fault on the server.
func (c *Client) ClearWebhookFaults(ctx context.Context) error {
	return c.call(ctx, opAdmin, http.MethodDelete, "/_admin/webhooks/faults", "", nil, nil)
}

// WebhookDeliveries lists what happened to the webhooks the server sent.
func (c *Client) WebhookDeliveries(ctx context.Context) ([]WebhookDelivery, error) {
	var out deliveryList
	if err := c.call(ctx, opAdmin, http.MethodGet, "/_admin/webhooks", "", nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// OpenDispute simulates a dispute of a captured hold: the server books
// the withdrawal of the disputed amount (a balance transaction of type
// dispute, with the schedule's dispute fee) and returns the
// dispute.created event, which it sends when it has a webhook URL.
func (c *Client) OpenDispute(ctx context.Context, d Dispute) (Event, error) {
	var ev Event
	if err := c.call(ctx, opAdmin, http.MethodPost, "/_admin/disputes", "", d, &ev); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Authenticate completes (complete true) or fails the 3-D Secure
// challenge of a hold waiting for its cardholder, as the buttons of the
// challenge page do but without the redirect, and returns the hold:
// authorized, or declined authentication_failed. A hold not waiting for
// authentication (never challenged, already completed or failed,
// canceled) is KindRejected state_conflict and does not change; an
// unknown one KindRejected resource_missing.
func (c *Client) Authenticate(ctx context.Context, ref string, complete bool) (providers.Hold, error) {
	if err := needRef(opAdmin, ref); err != nil {
		return providers.Hold{}, err
	}
	p := authenticateParams{Result: resultFail}
	if complete {
		p.Result = resultComplete
	}
	var v holdJSON
	if err := c.call(ctx, opAdmin, http.MethodPost, "/_admin/holds/"+url.PathEscape(ref)+"/authenticate", "", p, &v); err != nil {
		return providers.Hold{}, err
	}
	return v.hold(), nil
}
