package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/payorch/payorch/providers"
)

var _ providers.MoneyReporter = (*Client)(nil)

// BalanceTransactions streams GET /v1/balance_transactions for [req.From,
// req.To) to fn one balance transaction at a time, decoding as it reads:
// the charges (one per capture, each part of a multicapture hold
// included), refunds, disputes and payouts the fake booked in the window,
// each with the payout that paid it, if any yet. It returns fn's first
// error as is. A stream cut before its end marker, or whose end marker
// counts other lines than were read, is KindUnknown (those already passed
// to fn stand); an answer of the server is an error as for Report.
func (c *Client) BalanceTransactions(ctx context.Context, req providers.ReportRequest, fn func(providers.BalanceTransaction) error) error {
	return c.listBalance(ctx, windowQuery(req), fn)
}

// PayoutItems streams GET /v1/balance_transactions?payout=ID to fn, as
// BalanceTransactions does: the movements the payout paid out, its own
// (type payout) among them, drifts applied. A payout the fake never made
// is a KindRejected resource_missing error.
func (c *Client) PayoutItems(ctx context.Context, payoutID string, fn func(providers.BalanceTransaction) error) error {
	return c.listBalance(ctx, url.Values{"payout": {payoutID}}, fn)
}

// listBalance streams GET /v1/balance_transactions?q to fn.
func (c *Client) listBalance(ctx context.Context, q url.Values, fn func(providers.BalanceTransaction) error) error {
	var line struct {
		Object string `json:"object"`
		Count  int    `json:"count"`
		BalanceTransaction
	}
	return c.streamList(ctx, OpBalanceTransactions, "/v1/balance_transactions", q, objectBalanceTransaction, objectBalanceEnd,
		func(dec *json.Decoder) (string, int, error) {
			line.Object, line.Count, line.BalanceTransaction = "", 0, BalanceTransaction{}
			err := dec.Decode(&line)
			return line.Object, line.Count, err
		},
		func() error { return fn(line.BalanceTransaction.BalanceTransaction()) })
}

// windowQuery is req's window as a listing's query.
func windowQuery(req providers.ReportRequest) url.Values {
	return url.Values{
		"from": {req.From.UTC().Format(time.RFC3339Nano)},
		"to":   {req.To.UTC().Format(time.RFC3339Nano)},
	}
}

// Payouts streams GET /v1/payouts for [req.From, req.To) to fn, likewise:
// the payouts the fake made in the window (those due by its clock are
// made when asked), with their status by its clock.
func (c *Client) Payouts(ctx context.Context, req providers.ReportRequest, fn func(providers.Payout) error) error {
	var line struct {
		Object string `json:"object"`
		Count  int    `json:"count"`
		Payout
	}
	return c.streamList(ctx, OpPayouts, "/v1/payouts", windowQuery(req), objectPayout, objectPayoutEnd,
		func(dec *json.Decoder) (string, int, error) {
			line.Object, line.Count, line.Payout = "", 0, Payout{}
			err := dec.Decode(&line)
			return line.Object, line.Count, err
		},
		func() error { return fn(line.Payout.Payout()) })
}

// streamList reads a listing of JSON lines (GET path?q), each decoded whole by next
// (its object and, for the end marker, count): items of object item,
// each passed on by emit, then the end marker of object end with their
// count.
func (c *Client) streamList(ctx context.Context, op Op, path string, q url.Values, item, end string,
	next func(*json.Decoder) (object string, count int, err error), emit func() error) error {
	resp, err := c.send(ctx, op, http.MethodGet, path+"?"+q.Encode(), "", "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return statusError(op, resp.StatusCode, b)
	}
	dec := json.NewDecoder(resp.Body)
	for n := 0; ; {
		object, count, err := next(dec)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return providers.TransportError("fake", string(op), fmt.Errorf("listing cut after %d lines: %w", n, err), true)
		}
		switch object {
		case item:
			n++
			if err := emit(); err != nil {
				return err
			}
		case end:
			if count != n {
				return providers.TransportError("fake", string(op), fmt.Errorf("listing ended after %d lines but announced %d", n, count), true)
			}
			return nil
		default:
			return providers.TransportError("fake", string(op), fmt.Errorf("listing line of unknown object %q", object), true)
		}
	}
}

// MoneyDrift alters the server's money listings as d says and returns the
// drift as stored (an added item with its id and defaults). An invalid d
// is a KindRejected invalid_request error, a selector matching nothing a
// KindRejected resource_missing one.
func (c *Client) MoneyDrift(ctx context.Context, d MoneyDrift) (MoneyDrift, error) {
	var out MoneyDrift
	if err := c.call(ctx, opAdmin, http.MethodPost, "/_admin/money/drift", "", d, &out); err != nil {
		return MoneyDrift{}, err
	}
	return out, nil
}

// ClearMoneyDrift removes every money drift on the server.
func (c *Client) ClearMoneyDrift(ctx context.Context) error {
	return c.call(ctx, opAdmin, http.MethodDelete, "/_admin/money/drift", "", nil, nil)
}
