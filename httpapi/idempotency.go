package httpapi

import (
	"context"
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
	// final is the final answer, stored for replays and sent: a success
	// or a final refusal (orchestrator.Claim.Answer, JSONAnswer). Nil
	// when the outcome is not final: pending (status, body and location
	// are sent, nothing is stored) or an error (returned). Either way the
	// key's lease is released.
	final *orchestrator.StoredResponse
	// paymentID is the payment the answer is about, if any.
	paymentID string
	// The answer when the provider's answer is unknown (202).
	status   int
	body     any
	location string
}

// finalResult is the result of an execution whose answer is final.
func finalResult(stored orchestrator.StoredResponse, paymentID string) result {
	return result{final: &stored, paymentID: paymentID}
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
		TenantID: p.TenantID, Scope: p.IdempotencyScope(), Operation: op, Key: key, Fingerprint: fp,
		RequestID: c.Response().Header().Get(echo.HeaderXRequestID)})
	outcome := idempotencyOutcome(begin, err)
	s.recordIdempotency(ctx, c, op, outcome)
	if !begin.ExpiresAt.IsZero() {
		c.Response().Header().Set(headerKeyExpires, begin.ExpiresAt.UTC().Format(http.TimeFormat))
	}
	if err != nil {
		return err
	}
	if r := begin.Replay; r != nil {
		return sendReplay(c, r)
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
	if code := orchestrator.ErrorCode(execErr); code.IsFinal() {
		c.Set(errorCodeKey, code) // a refusal stored as the final answer
	}

	stored := claim.Completed() // stored with the outcome's own write
	if stored == nil && res.final != nil {
		err := s.svc.CompleteIdempotent(xctx, claim, res.paymentID, *res.final)
		switch {
		case errors.Is(err, orchestrator.ErrLeaseLost):
			// Another request took the key over: answer what it stored
			// (or 409 until it has), never this execution's result,
			// which no replay would give.
			s.logger.WarnContext(ctx, "idempotency lease lost before completion; answering with the key's stored answer")
			theirs, err := s.svc.AnswerAfterLeaseLost(xctx, claim)
			if err != nil {
				return err
			}
			execResult = "stored"
			c.Response().Header().Set(headerIdempotentReplayed, "true")
			return s.sendStored(c, theirs)
		case err != nil:
			return err
		}
		stored = res.final
	}
	if stored != nil {
		execResult = "stored"
		return s.sendStored(c, *stored)
	}
	if err := s.svc.ReleaseIdempotent(xctx, claim); err != nil {
		s.logger.ErrorContext(ctx, "release idempotency key", "error", err)
	}
	if execErr != nil {
		return execErr
	}
	execResult = "pending" // answer 202, keep nothing
	if res.location != "" {
		c.Response().Header().Set(echo.HeaderLocation, res.location)
	}
	return c.JSON(res.status, res.body)
}

// sendReplay answers a replayed key with its stored answer, headers and
// all, marked Idempotent-Replayed.
func sendReplay(c echo.Context, r *orchestrator.StoredResponse) error {
	h := c.Response().Header()
	for k, v := range r.Header {
		h.Set(k, v)
	}
	h.Set(headerIdempotentReplayed, "true")
	return c.Blob(r.Status, r.Header[echo.HeaderContentType], r.Body)
}

// sendStored answers with a stored response as it was stored.
func (s *Server) sendStored(c echo.Context, stored orchestrator.StoredResponse) error {
	h := c.Response().Header()
	for k, v := range stored.Header {
		h.Set(k, v)
	}
	return c.Blob(stored.Status, stored.Header[echo.HeaderContentType], stored.Body)
}
