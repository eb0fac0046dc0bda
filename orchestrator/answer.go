package orchestrator

import (
	"encoding/json"
	"errors"
	"net/http"
)

// The final answer of a keyed request (SPEC: Idempotency protocol) is a
// domain value: the status, headers and body stored for byte-identical
// replays. For a money request it is decided here from the request's
// Outcome (Claim.Answer): the payment, or the refund, as JSON; or, for a
// final refusal (Code.IsFinal), its problem document naming the payment.
// The statement that settles an authorization stores it with the
// payment (settleCompleteSQL); httpapi sends it as it is, and frames it
// with the protocol's own headers (Idempotent-Replayed,
// Idempotency-Key-Expires).

// problemType prefixes every problem's type: a stable URN per code.
const problemType = "urn:payorch:problem:"

// Problem is an RFC 9457 problem details document, with payorch's
// extensions: the body of every error answer (application/problem+json)
// and of every stored refusal.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Param  string `json:"param,omitempty"`
	// Fields names request fields (never their values) the problem is
	// about, e.g. those that differ on idempotency_key_reused.
	Fields    []string `json:"fields,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
	// PaymentID names the payment a business refusal is about (a declined
	// payment's id, for instance).
	PaymentID string `json:"payment_id,omitempty"`
}

// NewProblem is the problem document of e, answered to request
// requestID. An internal error shows no detail (its message and cause are
// for the logs).
func NewProblem(e *Error, requestID string) Problem {
	p := Problem{
		Type:      problemType + string(e.Code),
		Title:     e.Code.Title(),
		Status:    e.Code.Status(),
		Detail:    e.Message,
		Code:      string(e.Code),
		Param:     e.Param,
		Fields:    e.Fields,
		RequestID: requestID,
	}
	if p.Status == http.StatusInternalServerError {
		p.Detail = "internal error; quote request_id to support"
	}
	return p
}

// Media types of stored answers.
const (
	mediaJSON    = "application/json"
	mediaProblem = "application/problem+json"
)

// JSONAnswer is a final answer with status and v as its JSON body (one
// line, newline-terminated) and, when location is not empty, a Location
// header. Errors: v cannot be encoded.
func JSONAnswer(status int, v any, location string) (StoredResponse, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return StoredResponse{}, err
	}
	res := StoredResponse{Status: status, Body: append(body, '\n'), Header: map[string]string{"Content-Type": mediaJSON}}
	if location != "" {
		res.Header["Location"] = location
	}
	return res, nil
}

// RefusalAnswer is the final answer of a request that e refused (e's code
// being final), answered to request requestID: e's problem document,
// naming paymentID.
func RefusalAnswer(e *Error, requestID, paymentID string) StoredResponse {
	p := NewProblem(e, requestID)
	p.PaymentID = paymentID
	body, _ := json.Marshal(p) // a Problem always encodes
	return StoredResponse{Status: p.Status, Body: append(body, '\n'), Header: map[string]string{"Content-Type": mediaProblem}}
}

// PaymentLocation is the URL path of payment id (SPEC: GET
// /v1/payments/{id}), the Location of a new payment.
func PaymentLocation(id string) string { return "/v1/payments/" + id }

// moneyAnswers is the status of a money request's answer when it
// succeeds, and whether it carries the payment's Location (a new
// payment), by operation.
var moneyAnswers = map[string]struct {
	status   int
	location bool
}{
	OpAuthorize: {http.StatusCreated, true},
	OpCapture:   {http.StatusOK, false},
	OpCancel:    {http.StatusOK, false},
	OpRefund:    {http.StatusCreated, false},
	OpExtend:    {http.StatusOK, false},
	OpConfirm:   {http.StatusOK, false},
	OpIncrement: {http.StatusOK, false},
}

// Answer is the final answer of c's money request (c.Operation: one of
// OpAuthorize, OpCapture, OpCancel, OpRefund, OpExtend) about payment paymentID,
// given the Outcome and error the request's Service method returned:
// the refund or else the payment as JSON, with the operation's status
// (201, or 200 for capture and cancel) and, for a new payment, its
// Location; or, for a final refusal, its problem document. final is false
// when the outcome is not final (pending, or an error that is not a final
// refusal): nothing is stored, the key is released for a retry. Errors:
// the answer cannot be encoded.
func (c *Claim) Answer(paymentID string, out Outcome, err error) (res StoredResponse, final bool, aerr error) {
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || !e.Code.IsFinal() {
			return StoredResponse{}, false, nil
		}
		return RefusalAnswer(e, c.RequestID, paymentID), true, nil
	}
	if out.Pending {
		return StoredResponse{}, false, nil
	}
	kind, ok := moneyAnswers[c.Operation]
	if !ok {
		return StoredResponse{}, false, internalf("no money answer for operation %q", c.Operation)
	}
	var body any = out.Payment
	if out.Refund != nil {
		body = out.Refund
	}
	location := ""
	if kind.location {
		location = PaymentLocation(paymentID)
	}
	res, aerr = JSONAnswer(kind.status, body, location)
	return res, aerr == nil, aerr
}
