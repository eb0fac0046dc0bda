package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// createPaymentRequest is the body of POST /v1/payments.
type createPaymentRequest struct {
	AmountMinor   minorUnits        `json:"amount_minor"`
	Currency      string            `json:"currency"`
	Provider      string            `json:"provider"`
	PaymentMethod string            `json:"payment_method"`
	Description   string            `json:"description"`
	Metadata      map[string]string `json:"metadata"`
	// OnExpiry: capture, cancel or none (the default).
	OnExpiry string `json:"on_expiry"`
	// RequestExtendedAuthorization asks for the provider's longest hold.
	RequestExtendedAuthorization strictBool `json:"request_extended_authorization"`
	// ReturnURL is where the shopper comes back after a 3-D Secure
	// challenge; without it a payment that needs one fails.
	ReturnURL string `json:"return_url"`
	// The flexible-hold features to ask the connector for.
	RequestIncrementalAuthorization strictBool `json:"request_incremental_authorization"`
	RequestMulticapture             strictBool `json:"request_multicapture"`
	RequestOvercapture              strictBool `json:"request_overcapture"`
}

// amountRequest is the body of refund and increment.
type amountRequest struct {
	AmountMinor minorUnits `json:"amount_minor"`
}

// incrementRequest is the body of increment: the hold's new total, or by
// how much to raise it.
type incrementRequest struct {
	AmountMinor   minorUnits    `json:"amount_minor"`
	IncreaseMinor increaseUnits `json:"increase_minor"`
}

// captureRequest is the body of capture: final_capture false leaves the
// rest of a multicapture hold capturable.
type captureRequest struct {
	AmountMinor  minorUnits   `json:"amount_minor"`
	FinalCapture finalCapture `json:"final_capture"`
}

// finalCapture is capture's final_capture: true or false (never null).
type finalCapture struct{ set, value bool }

func (f *finalCapture) UnmarshalJSON(b []byte) error {
	var v strictBool
	if err := v.UnmarshalJSON(b); err != nil {
		return &fieldError{"final_capture", "final_capture must be true or false"}
	}
	f.set, f.value = true, bool(v)
	return nil
}

// emptyRequest is the body of cancel: nothing, or {}.
type emptyRequest struct{}

// createPayment: POST /v1/payments (merchant).
func (s *Server) createPayment(c echo.Context) error {
	var req createPaymentRequest
	key, fp, err := keyedRequest(c, orchestrator.OpAuthorize, nil, &req)
	if err != nil {
		return err
	}
	if !req.AmountMinor.set {
		return orchestrator.ParamError("amount_minor", "amount_minor is required")
	}
	p := principal(c)
	in := orchestrator.AuthorizeInput{
		TenantID: p.TenantID, Key: key, AmountMinor: req.AmountMinor.value, Currency: req.Currency,
		Provider: req.Provider, PaymentMethod: req.PaymentMethod, Description: req.Description, Metadata: req.Metadata,
		OnExpiry: orchestrator.OnExpiry(req.OnExpiry), ExtendedAuthorization: bool(req.RequestExtendedAuthorization),
		ReturnURL:                       req.ReturnURL,
		RequestIncrementalAuthorization: bool(req.RequestIncrementalAuthorization),
		RequestMulticapture:             bool(req.RequestMulticapture),
		RequestOvercapture:              bool(req.RequestOvercapture),
	}
	if err := in.Validate(s.svc); err != nil {
		return err
	}
	id := orchestrator.PaymentID(p.TenantID, key)
	c.SetRequest(c.Request().WithContext(orchestrator.WithLogAttrs(c.Request().Context(), slog.String("payment_id", id))))
	in.Fingerprint = fp
	return s.idempotent(c, orchestrator.OpAuthorize, key, fp, func(ctx context.Context, claim *orchestrator.Claim) (result, error) {
		out, err := s.svc.Authorize(ctx, claim, in)
		return moneyResult(claim, id, out, err)
	})
}

// moneyResult is the result of a money request's execution about payment
// id: the domain's final answer (orchestrator.Claim.Answer; nothing more
// when the settling write stored it already), or, when the provider's
// answer is unknown, 202 with the payment (or refund) and the payment's
// Location, not stored.
func moneyResult(claim *orchestrator.Claim, id string, out orchestrator.Outcome, err error) (result, error) {
	if claim.Completed() != nil {
		return result{paymentID: id}, err
	}
	if err == nil && out.Pending {
		res := result{paymentID: id, status: http.StatusAccepted, body: out.Payment, location: orchestrator.PaymentLocation(id)}
		if out.Refund != nil {
			res.body = out.Refund
		}
		return res, nil
	}
	stored, final, aerr := claim.Answer(id, out, err)
	if aerr != nil {
		return result{}, aerr
	}
	if !final {
		return result{paymentID: id}, err
	}
	return finalResult(stored, id), err
}

// capturePayment: POST /v1/payments/{id}/capture (merchant).
func (s *Server) capturePayment(c echo.Context) error {
	return s.paymentOperation(c, orchestrator.OpCapture, (*orchestrator.Service).Capture)
}

// cancelPayment: POST /v1/payments/{id}/cancel (merchant).
func (s *Server) cancelPayment(c echo.Context) error {
	return s.paymentOperation(c, orchestrator.OpCancel, (*orchestrator.Service).Cancel)
}

// refundPayment: POST /v1/payments/{id}/refunds (merchant).
func (s *Server) refundPayment(c echo.Context) error {
	return s.paymentOperation(c, orchestrator.OpRefund, (*orchestrator.Service).Refund)
}

// extendPayment: POST /v1/payments/{id}/extend (merchant).
func (s *Server) extendPayment(c echo.Context) error {
	return s.paymentOperation(c, orchestrator.OpExtend, (*orchestrator.Service).Extend)
}

// incrementPayment: POST /v1/payments/{id}/increment (merchant): raise
// the hold to amount_minor in all, or by increase_minor.
func (s *Server) incrementPayment(c echo.Context) error {
	return s.paymentOperation(c, orchestrator.OpIncrement, (*orchestrator.Service).Increment)
}

// confirmPayment: POST /v1/payments/{id}/confirm (merchant): the
// shopper is back from a 3-D Secure challenge.
func (s *Server) confirmPayment(c echo.Context) error {
	return s.paymentOperation(c, orchestrator.OpConfirm, (*orchestrator.Service).Confirm)
}

type operationFunc func(*orchestrator.Service, context.Context, *orchestrator.Claim, orchestrator.OperationInput) (orchestrator.Outcome, error)

// paymentOperation is the one handler shape of capture, cancel, refund,
// extend, increment and confirm.
func (s *Server) paymentOperation(c echo.Context, op string, do operationFunc) error {
	id := c.Param("id")
	var req captureRequest
	var dst any = &req
	switch op {
	case orchestrator.OpCancel, orchestrator.OpExtend, orchestrator.OpConfirm:
		dst = &emptyRequest{}
	case orchestrator.OpRefund:
		dst = &amountRequest{}
	case orchestrator.OpIncrement:
		dst = &incrementRequest{}
	}
	key, fp, err := keyedRequest(c, op, map[string]string{"id": id}, dst)
	if err != nil {
		return err
	}
	var increase minorUnits
	switch r := dst.(type) {
	case *amountRequest:
		req.AmountMinor = r.AmountMinor
	case *incrementRequest:
		req.AmountMinor, increase = r.AmountMinor, r.IncreaseMinor.minorUnits
		if increase.set && (increase.value <= 0 || increase.value > orchestrator.MaxAmountMinor) {
			return orchestrator.ParamError("increase_minor", "increase_minor must be a whole number from 1 to %d",
				int64(orchestrator.MaxAmountMinor))
		}
		if increase.set == r.AmountMinor.set {
			return orchestrator.ParamError("amount_minor", "give amount_minor (the hold's new total) or increase_minor (by how much), one of them")
		}
	}
	amount := req.AmountMinor
	notFinal := req.FinalCapture.set && !req.FinalCapture.value
	if amount.set && (amount.value <= 0 || amount.value > orchestrator.MaxAmountMinor) {
		return orchestrator.ParamError("amount_minor", "amount_minor must be a whole number from 1 to %d (omit it for the whole amount)",
			int64(orchestrator.MaxAmountMinor))
	}
	if !validID(id) {
		return &orchestrator.Error{Code: orchestrator.CodeNotFound, Message: "no payment " + strconv.Quote(id)}
	}
	p := principal(c)
	c.SetRequest(c.Request().WithContext(orchestrator.WithLogAttrs(c.Request().Context(), slog.String("payment_id", id))))
	return s.idempotent(c, op, key, fp, func(ctx context.Context, claim *orchestrator.Claim) (result, error) {
		out, err := do(s.svc, ctx, claim, orchestrator.OperationInput{
			TenantID: p.TenantID, PaymentID: id, Key: key, AmountMinor: amount.value, NotFinal: notFinal,
			IncreaseMinor: increase.value})
		return moneyResult(claim, id, out, err)
	})
}

// validID is a cheap shape check before any query: a payment id is pay_
// and 32 hex digits.
func validID(id string) bool {
	if len(id) != 36 || id[:4] != "pay_" {
		return false
	}
	for _, r := range id[4:] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// getPayment: GET /v1/payments/{id} (merchant: own; support, finance: any).
func (s *Server) getPayment(c echo.Context) error {
	id := c.Param("id")
	if !validID(id) {
		return &orchestrator.Error{Code: orchestrator.CodeNotFound, Message: "no payment " + strconv.Quote(id)}
	}
	p, err := s.svc.GetPayment(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

// paymentEvents: GET /v1/payments/{id}/events.
func (s *Server) paymentEvents(c echo.Context) error {
	id := c.Param("id")
	if !validID(id) {
		return &orchestrator.Error{Code: orchestrator.CodeNotFound, Message: "no payment " + strconv.Quote(id)}
	}
	evs, err := s.svc.PaymentEvents(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(evs, false))
}

// paymentAttempts: GET /v1/payments/{id}/attempts.
func (s *Server) paymentAttempts(c echo.Context) error {
	id := c.Param("id")
	if !validID(id) {
		return &orchestrator.Error{Code: orchestrator.CodeNotFound, Message: "no payment " + strconv.Quote(id)}
	}
	as, err := s.svc.Attempts(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(as, false))
}

// paymentOperations: GET /v1/payments/{id}/operations, the payment's
// captures (each part and the final one), increments, cancels and
// refunds, oldest first. Same roles as getPayment.
func (s *Server) paymentOperations(c echo.Context) error {
	id := c.Param("id")
	if !validID(id) {
		return &orchestrator.Error{Code: orchestrator.CodeNotFound, Message: "no payment " + strconv.Quote(id)}
	}
	ops, err := s.svc.PaymentOperations(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(ops, false))
}

// readScope is the read scope of the caller, narrowed to one tenant by a
// tenant_id query parameter (support and finance; a merchant always reads
// its own tenant, and only that: its tenant_id is refused). A tenant_id
// scope holds that tenant's objects only, not the staff ones.
func readScope(c echo.Context) (orchestrator.Scope, error) {
	pr := principal(c)
	sc := orchestrator.ScopeOf(pr)
	raw := c.QueryParam("tenant_id")
	if raw == "" {
		return sc, nil
	}
	if pr.Role == orchestrator.RoleMerchant {
		return sc, orchestrator.ParamError("tenant_id", "a merchant key reads its own tenant only; omit tenant_id")
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return sc, orchestrator.ParamError("tenant_id", "tenant_id must be a positive integer")
	}
	return orchestrator.Scope{TenantID: id}, nil
}

// listPayments: GET /v1/payments, by idempotency key or as a
// cursor-paginated list.
func (s *Server) listPayments(c echo.Context) error {
	sc, err := readScope(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	if key, ok := q["idempotency_key"]; ok {
		if err := orchestrator.ValidateIdempotencyKey(key[0], true); err != nil {
			return orchestrator.ParamError("idempotency_key", "idempotency_key must be 1 to 255 printable ASCII characters")
		}
		ps, err := s.svc.PaymentsByKey(c.Request().Context(), sc, key[0])
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, newList(ps, false))
	}
	var f orchestrator.ListFilter
	if v := q.Get("status"); v != "" {
		st := orchestrator.Status(v)
		if !st.Known() {
			return orchestrator.ParamError("status", "unknown status %q", v)
		}
		f.Status = st
	}
	for name, dst := range map[string]**time.Time{"created_gte": &f.CreatedGTE, "created_lt": &f.CreatedLT,
		"expiring_before": &f.ExpiringBefore} {
		if v := q.Get(name); v != "" {
			t, err := parseTimeParam(v)
			if err != nil {
				return orchestrator.ParamError(name, "%s must be an RFC 3339 time or Unix seconds, from %s to %s",
					name, minTimeParam.Format(time.RFC3339), maxTimeParam.Format(time.RFC3339))
			}
			*dst = &t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return orchestrator.ParamError("limit", "limit must be 1 to 100")
		}
		f.Limit = n
	}
	if v := q.Get("starting_after"); v != "" {
		if !validID(v) {
			return orchestrator.ParamError("starting_after", "starting_after must be a payment id")
		}
		f.StartingAfter = v
	}
	ps, more, err := s.svc.ListPayments(c.Request().Context(), sc, f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(ps, more))
}

// The range of time parameters: the Unix epoch to the last second of year
// 9999 (what RFC 3339 can spell), well inside what PostgreSQL's timestamptz
// and Go's time.Time hold.
var (
	minTimeParam = time.Unix(0, 0).UTC()
	maxTimeParam = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// parseTimeParam reads an RFC 3339 time or Unix seconds within
// [minTimeParam, maxTimeParam].
func parseTimeParam(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		n, nerr := strconv.ParseInt(v, 10, 64)
		if nerr != nil || n < minTimeParam.Unix() || n > maxTimeParam.Unix() {
			return time.Time{}, errors.New("not a time in range")
		}
		t = time.Unix(n, 0)
	}
	if t.Before(minTimeParam) || t.After(maxTimeParam) {
		return time.Time{}, errors.New("time out of range")
	}
	return t.UTC(), nil
}
