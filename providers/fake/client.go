package fake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/payorch/payorch/providers"
)

// maxAnswerBytes bounds an answer the Client reads whole (not the report).
const maxAnswerBytes = 1 << 20

// defaultResponseHeaderTimeout bounds the wait for an answer when NewClient
// builds the http.Client.
const defaultResponseHeaderTimeout = 30 * time.Second

// Client is a providers.Provider that talks to a fake provider Server over
// HTTP. Every error it returns is a *providers.Error (see the Provider
// methods for the kinds); answers of the server carry an *APIError as Err.
type Client struct {
	base  string
	hc    *http.Client
	token string
	// webhookSecret verifies the server's webhooks (webhook.go).
	webhookSecret string
}

var (
	_ providers.Provider      = (*Client)(nil)
	_ providers.Incrementer   = (*Client)(nil)
	_ providers.FlexibleHolds = (*Client)(nil)
)

// NewClient returns a Client for the fake provider at baseURL
// ("http://127.0.0.1:8081"). A nil hc gets an http.Client that waits at most
// 30 s for an answer's headers; bound each call with its context too.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = defaultResponseHeaderTimeout
		hc = &http.Client{Transport: t}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

// WithToken returns a copy of c that sends token as its bearer secret
// (Config.Token of the server it talks to).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// BaseURL returns the base URL of the fake provider c talks to.
func (c *Client) BaseURL() string { return c.base }

// Name returns "fake".
func (c *Client) Name() string { return "fake" }

// paymentMethodRE is the shape of the fake's payment methods: Stripe's
// (pm_ then letters, digits and underscores), since the fake answers to
// Stripe's test methods (pm_card_visa, pm_card_chargeDeclined, …). The
// server refuses a method of this shape it does not know.
var paymentMethodRE = regexp.MustCompile(`^pm_[A-Za-z0-9_]{1,100}$`)

// CheckPaymentMethod accepts a payment method of paymentMethodRE's shape.
func (c *Client) CheckPaymentMethod(pm string) error {
	if !paymentMethodRE.MatchString(pm) {
		return errors.New("payment_method must look like pm_card_visa")
	}
	return nil
}

// Authorize places a hold with POST /v1/holds. It calls req.OnReference with
// the reference once the fake has answered (approved or declined), before
// returning; an error from it returns KindUnknown wrapping that error (the
// hold exists: retry with the same key to settle). A decline is KindDeclined
// with the decline code (card_declined, insufficient_funds), and the
// declined hold is returned with it. Other errors: KindRejected
// (invalid_request, idempotency_key_mismatch), KindNotExecuted
// (idempotency_key_in_use, provider_unavailable, connection failures),
// KindUnknown (timeout, provider_error).
//
// With req.Card set, the card is sent in place of req.PaymentMethod (the
// vaulted method's id, which the fake knows nothing of). Card data the fake
// refuses (invalid_number, incorrect_number, invalid_expiry_month,
// invalid_expiry_year, invalid_cvc) is KindDeclined with that code and no
// hold. Every error is scrubbed of the card (providers.ScrubError), the
// *APIError it carries included. A retry without the CVC (the vault erased
// it) is the same request to the fake: it replays the first answer.
//
// 3-D Secure: req.ReturnURL and req.RequestThreeDS go with the create and
// the confirmation. When the issuer challenges the cardholder, the hold
// comes back with Status StatusRequiresAction and NextActionURL (the
// fake's challenge page), and a nil error: nothing is held until the
// challenge is completed, which a webhook or a Lookup tells. A retry with
// the same key replays that answer, URL included, and never starts a
// second challenge. An issuer that insists on authentication the request
// did not allow is KindDeclined authentication_required.
func (c *Client) Authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Hold, error) {
	h, err := c.authorize(ctx, req)
	if req.Card != nil {
		err = scrubbed(err, req.Card)
	}
	return h, err
}

// authorize is Authorize before its error is scrubbed.
func (c *Client) authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Hold, error) {
	in := authorizeParamsOf(req)
	// Create first (nothing is held yet), hand the reference over, then
	// confirm: a lost confirmation answer is settled by one Lookup. Both
	// carry the same key; the provider scopes keys by route.
	var created holdJSON
	if err := c.call(ctx, OpCreate, http.MethodPost, "/v1/holds", req.Key, in, &created); err != nil {
		return providers.Hold{}, err
	}
	if req.OnReference != nil {
		if cbErr := req.OnReference(ctx, created.Ref); cbErr != nil {
			return providers.Hold{}, &providers.Error{
				Kind: providers.KindNotExecuted, Code: providers.CodeProviderInternalError,
				Message: fmt.Sprintf("fake authorize: hold %s created but OnReference failed; not confirmed", created.Ref),
				Err:     cbErr,
			}
		}
	}
	// The 3-D Secure parameters go with the confirmation too, so that its
	// key's fingerprint covers them: a retry that changed them is a
	// mismatch, never a second challenge.
	var v holdJSON
	confirm := confirmParams{ReturnURL: req.ReturnURL, RequestThreeDS: req.RequestThreeDS, flexAsk: in.flexAsk}
	err := c.call(ctx, OpAuthorize, http.MethodPost, holdPath(created.Ref, "/confirm"), req.Key, confirm, &v)
	if err != nil {
		var ae *APIError
		if providers.KindOf(err) != providers.KindDeclined || !errors.As(err, &ae) || ae.hold == nil {
			return providers.Hold{}, err
		}
		v = *ae.hold
	}
	return v.hold(), err
}

// authorizeParamsOf is the body of the create request for req.
func authorizeParamsOf(req providers.AuthorizeRequest) authorizeParams {
	in := authorizeParams{
		AmountMinor:    req.AmountMinor,
		Currency:       req.Currency,
		PaymentMethod:  req.PaymentMethod,
		Description:    req.Description,
		ReturnURL:      req.ReturnURL,
		RequestThreeDS: req.RequestThreeDS,
		flexAsk: flexAsk{
			IncrementalAuthorization: req.RequestIncrementalAuthorization,
			Multicapture:             req.RequestMulticapture,
			Overcapture:              req.RequestOvercapture,
		},
	}
	if c := req.Card; c != nil {
		in.PaymentMethod = ""
		in.Card = &cardParams{Number: c.Number, ExpMonth: c.ExpMonth, ExpYear: c.ExpYear, CVC: c.CVC, HolderName: c.HolderName}
	}
	if req.PaymentID != "" || req.TenantID != 0 {
		in.Metadata = map[string]string{}
		if req.PaymentID != "" {
			in.Metadata[metaPaymentID] = req.PaymentID
		}
		if req.TenantID != 0 {
			in.Metadata[metaTenantID] = strconv.FormatInt(req.TenantID, 10)
		}
	}
	return in
}

// scrubbed returns err without the card in its text: the message and code
// of the *APIError it carries (an answer that quotes the request), then the
// whole error (providers.ScrubError).
func scrubbed(err error, card *providers.Card) error {
	if pe, ok := err.(*providers.Error); ok {
		if ae, ok := pe.Err.(*APIError); ok {
			clean := *ae
			clean.Message = providers.ScrubCard(ae.Message, card)
			clean.Code = providers.ScrubCard(ae.Code, card)
			cp := *pe
			cp.Err = &clean
			err = &cp
		}
	}
	return providers.ScrubError(err, card)
}

// Capture captures req.AmountMinor (what remains of the authorized
// amount when zero) of a hold with POST /v1/holds/{ref}/capture, and
// releases the rest; with req.NotFinal (final_capture false, a hold
// granted multicapture) the hold stays authorized, CapturedMinor the sum
// so far. Refusals are KindRejected: resource_missing, state_conflict,
// hold_expired, amount_too_large (past the authorized amount, or with
// overcapture Flex.MaxCapturableMinor, in all), not_supported (NotFinal
// without multicapture), invalid_request (NotFinal with a zero amount),
// idempotency_key_mismatch.
func (c *Client) Capture(ctx context.Context, req providers.CaptureRequest) (providers.Hold, error) {
	if err := needRef(OpCapture, req.Ref); err != nil {
		return providers.Hold{}, err
	}
	in := captureParams{AmountMinor: req.AmountMinor}
	if req.NotFinal {
		final := false
		in.FinalCapture = &final
	}
	var v holdJSON
	if err := c.call(ctx, OpCapture, http.MethodPost, holdPath(req.Ref, "/capture"), req.Key, in, &v); err != nil {
		return providers.Hold{}, err
	}
	return v.hold(), nil
}

// IncrementAuthorization raises an authorized hold to req.AmountMinor in
// all (the new total) with POST /v1/holds/{ref}/increment. The fake
// applies a key once: a retry with the same key and amount replays the
// first answer and never raises the hold twice, so a lost answer is
// settled by retrying with the key or by a Lookup. A decline is
// KindDeclined card_declined, returned with the hold as it still is.
// Refusals are KindRejected: not_supported (not granted incremental
// authorization), state_conflict (not authorized), invalid_request (not
// above the current amount), amount_too_large (past Flex.MaxAmountMinor),
// resource_missing, idempotency_key_mismatch.
func (c *Client) IncrementAuthorization(ctx context.Context, req providers.IncrementRequest) (providers.Hold, error) {
	if err := needRef(OpIncrement, req.Ref); err != nil {
		return providers.Hold{}, err
	}
	var v holdJSON
	err := c.call(ctx, OpIncrement, http.MethodPost, holdPath(req.Ref, "/increment"), req.Key, incrementParams{AmountMinor: req.AmountMinor}, &v)
	if err != nil {
		var ae *APIError
		if providers.KindOf(err) != providers.KindDeclined || !errors.As(err, &ae) || ae.hold == nil {
			return providers.Hold{}, err
		}
		v = *ae.hold
	}
	return v.hold(), err
}

// FlexibleHolds reports that the fake can ask for all three features;
// each hold's Flex says what its card was granted (every approving card
// but pm_card_flexUnavailable and TestCardFlexUnavailable gets what it
// asked for).
func (c *Client) FlexibleHolds() providers.FlexSupport {
	return providers.FlexSupport{IncrementalAuthorization: true, Multicapture: true, Overcapture: true}
}

// Cancel voids an authorized hold, or ends a challenge nobody completed
// (a hold in requires_action: nothing was held), with POST
// /v1/holds/{ref}/cancel. Refusals are KindRejected: resource_missing,
// state_conflict, idempotency_key_mismatch.
func (c *Client) Cancel(ctx context.Context, req providers.CancelRequest) (providers.Hold, error) {
	if err := needRef(OpCancel, req.Ref); err != nil {
		return providers.Hold{}, err
	}
	var v holdJSON
	if err := c.call(ctx, OpCancel, http.MethodPost, holdPath(req.Ref, "/cancel"), req.Key, cancelParams{}, &v); err != nil {
		return providers.Hold{}, err
	}
	return v.hold(), nil
}

// ExtendHold gives an authorized hold a new deadline (a full hold lifetime
// from now) with POST /v1/holds/{ref}/extend. Refusals are KindRejected:
// resource_missing, state_conflict, hold_expired.
func (c *Client) ExtendHold(ctx context.Context, req providers.ExtendRequest) (providers.Hold, error) {
	if err := needRef(OpExtend, req.Ref); err != nil {
		return providers.Hold{}, err
	}
	var v holdJSON
	if err := c.call(ctx, OpExtend, http.MethodPost, holdPath(req.Ref, "/extend"), req.Key, extendParams{}, &v); err != nil {
		return providers.Hold{}, err
	}
	return v.hold(), nil
}

// Refund refunds req.AmountMinor (the rest when zero) of a captured hold
// with POST /v1/holds/{ref}/refunds. Refusals are KindRejected:
// resource_missing, state_conflict, amount_too_large,
// idempotency_key_mismatch.
func (c *Client) Refund(ctx context.Context, req providers.RefundRequest) (providers.Refund, error) {
	if err := needRef(OpRefund, req.Ref); err != nil {
		return providers.Refund{}, err
	}
	var v refundJSON
	if err := c.call(ctx, OpRefund, http.MethodPost, holdPath(req.Ref, "/refunds"), req.Key, refundParams{AmountMinor: req.AmountMinor}, &v); err != nil {
		return providers.Refund{}, err
	}
	return v.refund(), nil
}

// Lookup reads a hold with GET /v1/holds/{ref}; an unknown reference is
// KindRejected with resource_missing. A hold waiting for its cardholder
// is StatusRequiresAction with its NextActionURL; one whose challenge
// failed is StatusDeclined with DeclineCode authentication_failed.
func (c *Client) Lookup(ctx context.Context, ref string) (providers.Hold, error) {
	if err := needRef(OpLookup, ref); err != nil {
		return providers.Hold{}, err
	}
	var v holdJSON
	if err := c.call(ctx, OpLookup, http.MethodGet, holdPath(ref, ""), "", nil, &v); err != nil {
		return providers.Hold{}, err
	}
	return v.hold(), nil
}

// Report streams GET /v1/report for [req.From, req.To) to fn one row at a
// time, decoding as it reads. It returns fn's first error as is. A stream
// cut before its end marker, or whose end marker counts other rows than
// were read, is KindUnknown (rows already passed to fn stand).
func (c *Client) Report(ctx context.Context, req providers.ReportRequest, fn func(providers.ReportRow) error) error {
	q := url.Values{
		"from": {req.From.UTC().Format(time.RFC3339Nano)},
		"to":   {req.To.UTC().Format(time.RFC3339Nano)},
	}
	resp, err := c.send(ctx, OpReport, http.MethodGet, "/v1/report?"+q.Encode(), "", "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return statusError(OpReport, resp.StatusCode, b)
	}
	dec := json.NewDecoder(resp.Body)
	for n := 0; ; {
		var line struct {
			Object string `json:"object"`
			Row
			Rows int `json:"rows"`
		}
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return providers.TransportError("fake", string(OpReport), fmt.Errorf("report cut after %d rows: %w", n, err), true)
		}
		switch line.Object {
		case objectReportRow:
			n++
			if err := fn(line.Row.ReportRow()); err != nil {
				return err
			}
		case objectReportEnd:
			if line.Rows != n {
				return providers.TransportError("fake", string(OpReport), fmt.Errorf("report ended after %d rows but announced %d", n, line.Rows), true)
			}
			return nil
		default:
			return providers.TransportError("fake", string(OpReport), fmt.Errorf("report line of unknown object %q", line.Object), true)
		}
	}
}

// needRef refuses an empty reference before anything is sent.
func needRef(op Op, ref string) error {
	if ref == "" {
		return &providers.Error{Kind: providers.KindRejected, Code: providers.CodeInvalidRequest,
			Message: fmt.Sprintf("fake %s: empty hold reference", op)}
	}
	return nil
}

// holdPath is the path of a hold, plus suffix.
func holdPath(ref, suffix string) string {
	return "/v1/holds/" + url.PathEscape(ref) + suffix
}

// call sends in as JSON (nil: no body) and decodes a 2xx answer into out
// (nil: discard), classifying every failure.
func (c *Client) call(ctx context.Context, op Op, method, path, key string, in, out any) error {
	var body io.Reader
	contentType := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeInvalidRequest,
				Message: fmt.Sprintf("fake %s: encoding request: %v", op, err), Err: err}
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := c.send(ctx, op, method, path, key, contentType, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if resp.StatusCode/100 != 2 {
		return statusError(op, resp.StatusCode, b)
	}
	if readErr != nil {
		return providers.TransportError("fake", string(op), readErr, true)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return providers.TransportError("fake", string(op), fmt.Errorf("undecodable answer: %w", err), true)
		}
	}
	return nil
}

// send performs one request. A failure before a connection was obtained is
// KindNotExecuted, any later one KindUnknown.
func (c *Client) send(ctx context.Context, op Op, method, path, key, contentType string, body io.Reader) (*http.Response, error) {
	var gotConn atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, c.base+path, body)
	if err != nil {
		return nil, &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeInvalidRequest,
			Message: fmt.Sprintf("fake %s: building request: %v", op, err), Err: err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "payorch-fake-client")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, providers.TransportError("fake", string(op), err, gotConn.Load())
	}
	return resp, nil
}
