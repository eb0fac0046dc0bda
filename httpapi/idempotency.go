package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/payorch/payorch/orchestrator"
)

// Idempotency headers (SPEC: Idempotency protocol).
const (
	headerIdempotencyKey     = "Idempotency-Key"
	headerIdempotentReplayed = "Idempotent-Replayed"
	headerKeyExpires         = "Idempotency-Key-Expires"
)

// result is what one execution of a keyed request answers.
type result struct {
	status    int
	body      any
	location  string
	paymentID string
	// pending: the provider's answer is unknown; not stored, lock released.
	pending bool
}

// storedCodes are the business refusals stored as final answers; every
// other error is not stored and the key's lock is released.
var storedCodes = map[orchestrator.Code]bool{
	orchestrator.CodePaymentDeclined:         true,
	orchestrator.CodePaymentStateConflict:    true,
	orchestrator.CodeAmountExceedsAuthorized: true,
}

// idempotencyKey validates the Idempotency-Key header. Errors:
// idempotency_key_missing, idempotency_key_invalid.
func idempotencyKey(c echo.Context) (string, error) {
	vals, present := c.Request().Header[headerIdempotencyKey]
	key := ""
	if present {
		if len(vals) != 1 {
			return "", &orchestrator.Error{Code: orchestrator.CodeIdempotencyKeyInvalid, Param: headerIdempotencyKey,
				Message: "send exactly one Idempotency-Key header"}
		}
		key = vals[0]
	}
	return key, orchestrator.ValidateIdempotencyKey(key, present)
}

// keyedRequest reads what every keyed POST starts with: its
// Idempotency-Key, its body decoded strictly into dst, and the request's
// fingerprint (op, pathParams, canonical body). A body holding anything
// PostgreSQL could not store (NUL, invalid UTF-8, at any depth) or a
// numeral too long to parse cheaply is refused here, naming its top-level
// field, before anything is claimed or parsed further. Errors:
// idempotency_key_missing, idempotency_key_invalid, body_too_large,
// validation_failed.
func keyedRequest(c echo.Context, op string, pathParams map[string]string, dst any) (string, orchestrator.Fingerprint, error) {
	var fp orchestrator.Fingerprint
	key, err := idempotencyKey(c)
	if err != nil {
		return "", fp, err
	}
	raw, err := readBody(c)
	if err != nil {
		return "", fp, err
	}
	if err := decodeStrict(raw, dst); err != nil {
		return "", fp, err
	}
	if fp, err = orchestrator.NewFingerprint(op, pathParams, raw); err != nil {
		return "", fp, bodyError(err)
	}
	return key, fp, nil
}

// idempotent runs one keyed POST under the idempotency protocol: claim the
// key (or replay, or refuse), execute, store a final answer byte for byte
// or release the key, and answer. The execution does not stop when the
// client goes away: it runs to the end of the lease so money is never left
// half-moved by a disconnect.
func (s *Server) idempotent(c echo.Context, op, key string, fp orchestrator.Fingerprint,
	exec func(ctx context.Context, claim *orchestrator.Claim) (result, error)) error {
	p := principal(c)
	req := c.Request()
	ctx := orchestrator.WithLogAttrs(req.Context(), slog.String("idempotency_key", key))
	c.SetRequest(req.WithContext(ctx))

	begin, err := s.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{
		TenantID: p.TenantID, Scope: p.IdempotencyScope(), Operation: op, Key: key, Fingerprint: fp})
	outcome := idempotencyOutcome(begin, err)
	s.recordIdempotency(ctx, c, op, outcome)
	if !begin.ExpiresAt.IsZero() {
		c.Response().Header().Set(headerKeyExpires, begin.ExpiresAt.UTC().Format(http.TimeFormat))
	}
	if err != nil {
		return err
	}
	if r := begin.Replay; r != nil {
		h := c.Response().Header()
		for k, v := range r.Header {
			h.Set(k, v)
		}
		h.Set(headerIdempotentReplayed, "true")
		return c.Blob(r.Status, r.Header[echo.HeaderContentType], r.Body)
	}
	claim := begin.Claim

	// First executions are timed from the claim to the stored (or not)
	// answer; result is stored, pending (202, nothing kept) or failed.
	execStart, execResult := time.Now(), "failed"
	if outcome == OutcomeNew {
		defer func() {
			s.tel.firstExecution.Record(ctx, time.Since(execStart).Seconds(), metric.WithAttributes(
				attribute.String("operation", op), attribute.String("result", execResult)))
		}()
	}
	xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ExecutionTimeout)
	defer cancel()
	res, execErr := exec(xctx, claim)

	if done := claim.Completed(); done != nil { // stored with the outcome's own write
		execResult = "stored"
		return s.sendStored(c, *done)
	}
	stored, storable, err := s.storedResponse(c, res, execErr)
	switch {
	case err != nil:
		_ = s.svc.ReleaseIdempotent(xctx, claim)
		return err
	case storable:
	case execErr == nil: // pending: answer 202, keep nothing
		execResult = "pending"
		if err := s.svc.ReleaseIdempotent(xctx, claim); err != nil {
			s.logger.ErrorContext(ctx, "release idempotency key", "error", err)
		}
		if res.location != "" {
			c.Response().Header().Set(echo.HeaderLocation, res.location)
		}
		return c.JSON(res.status, res.body)
	default:
		if err := s.svc.ReleaseIdempotent(xctx, claim); err != nil {
			s.logger.ErrorContext(ctx, "release idempotency key", "error", err)
		}
		return execErr
	}
	if err := s.svc.CompleteIdempotent(xctx, claim, res.paymentID, stored); err != nil {
		if !errors.Is(err, orchestrator.ErrLeaseLost) {
			return err
		}
		s.logger.WarnContext(ctx, "idempotency lease lost before completion; answering with this execution's result")
	}
	execResult = "stored"
	return s.sendStored(c, stored)
}

// sendStored answers with a stored response as it was stored.
func (s *Server) sendStored(c echo.Context, stored orchestrator.StoredResponse) error {
	h := c.Response().Header()
	for k, v := range stored.Header {
		h.Set(k, v)
	}
	return c.Blob(stored.Status, stored.Header[echo.HeaderContentType], stored.Body)
}

// storedResponse renders an execution's final answer as it is stored for
// replays: storable is false for answers that are not stored (pending,
// 5xx and other errors outside storedCodes).
func (s *Server) storedResponse(c echo.Context, res result, execErr error) (stored orchestrator.StoredResponse, storable bool, err error) {
	switch {
	case execErr == nil && !res.pending:
		body, err := json.Marshal(res.body)
		if err != nil {
			return stored, false, err
		}
		stored = orchestrator.StoredResponse{Status: res.status, Body: append(body, '\n'),
			Header: map[string]string{echo.HeaderContentType: echo.MIMEApplicationJSON}}
		if res.location != "" {
			stored.Header[echo.HeaderLocation] = res.location
		}
		return stored, true, nil
	case execErr != nil && storedCodes[orchestrator.ErrorCode(execErr)]:
		var appErr *orchestrator.Error
		errors.As(execErr, &appErr)
		c.Set(errorCodeKey, appErr.Code)
		prob := s.problem(c, appErr)
		prob.PaymentID = res.paymentID
		body, _ := json.Marshal(prob)
		return orchestrator.StoredResponse{Status: prob.Status, Body: append(body, '\n'),
			Header: map[string]string{echo.HeaderContentType: "application/problem+json"}}, true, nil
	}
	return stored, false, nil
}
