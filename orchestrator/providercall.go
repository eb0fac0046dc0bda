package orchestrator

import (
	"context"
	"time"

	"github.com/payorch/payorch/providers"
)

// providerCall is one provider call as a payment's history records it.
type providerCall struct {
	operation    string
	forwardedKey string
	outcome      string
	latencyMS    float64
	detail       map[string]any
	at           time.Time
}

// callProvider runs one provider call (runProviderCall) and appends it to
// the payment's history at once (recordCall).
func (s *Service) callProvider(ctx context.Context, p Payment, operation, fwd string, call func(context.Context) error) error {
	pc, err := s.runProviderCall(ctx, p, operation, fwd, call)
	s.recordCall(ctx, p, &pc)
	return err
}

// runProviderCall runs one provider call under the provider timeout, in a
// span of its own (operation, provider, forwarded key), records its
// duration and outcome in metrics and the log, and returns it for the
// payment's history: operation, forwarded key, outcome and latency.
func (s *Service) runProviderCall(ctx context.Context, p Payment, operation, fwd string, call func(context.Context) error) (providerCall, error) {
	sctx, span := s.tel.startProviderSpan(ctx, p, operation, fwd)
	cctx, cancel := context.WithTimeout(sctx, s.providerTimeout)
	start := time.Now()
	err := call(cctx)
	cancel()
	elapsed := time.Since(start)
	pc := providerCall{operation: operation, forwardedKey: fwd, outcome: "ok",
		latencyMS: float64(elapsed.Microseconds()) / 1000, detail: map[string]any{"provider": p.Provider}, at: s.now()}
	if err != nil {
		pc.outcome = providers.KindOf(err).String()
		if code := providers.CodeOf(err); code != "" {
			pc.detail["code"] = code
		}
	}
	if p.Attempt > 0 {
		pc.detail["attempt"] = p.Attempt
	}
	s.breakerRecord(p.Provider, err)
	s.tel.endProviderCall(sctx, span, p, operation, pc.outcome, err, elapsed)
	s.logger.InfoContext(sctx, "provider call", "payment_id", p.ID, "provider", p.Provider, "operation", operation,
		"forwarded_key", fwd, "outcome", pc.outcome, "latency_ms", pc.latencyMS)
	return pc, err
}

// recordCall appends a provider call to the payment's history, on its own.
// Best effort: the call already happened, and a failure is logged. A nil
// call does nothing.
func (s *Service) recordCall(ctx context.Context, p Payment, pc *providerCall) {
	if pc == nil {
		return
	}
	const q = `
		INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms, detail, created_at)
		VALUES (@tenant_id, @payment_id, 'provider_call', @operation, @forwarded_key, @outcome, @latency_ms, @detail, @at)`
	_, err := s.pool.Exec(ctx, q, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "operation": pc.operation,
		"forwarded_key": pc.forwardedKey, "outcome": pc.outcome, "latency_ms": pc.latencyMS, "detail": pc.detail, "at": pc.at})
	if err != nil {
		s.logger.ErrorContext(ctx, "provider call not recorded", "payment_id", p.ID, "operation", pc.operation, "error", err)
	}
}

// withCall adds to args the named arguments of the provider call row of
// a settling statement (settleAuthorizeSQL, settleOperationSQL):
// @call_operation, @call_forwarded_key, @call_outcome, @call_latency_ms,
// @call_detail and @call_at, all NULL (no row) for a nil call.
func withCall(pc *providerCall, args NamedArgs) NamedArgs {
	if pc == nil {
		args["call_operation"], args["call_forwarded_key"], args["call_outcome"] = nil, nil, nil
		args["call_latency_ms"], args["call_detail"], args["call_at"] = nil, nil, nil
		return args
	}
	args["call_operation"], args["call_forwarded_key"], args["call_outcome"] = pc.operation, pc.forwardedKey, pc.outcome
	args["call_latency_ms"], args["call_detail"], args["call_at"] = pc.latencyMS, pc.detail, pc.at
	return args
}

// callNotRecorded logs a provider call whose recording statement failed.
// Whether that statement committed is not known (the connection may have
// died after the commit): writing the call again could record it twice, so
// it goes to the log only.
func (s *Service) callNotRecorded(ctx context.Context, p Payment, call *providerCall, err error) {
	if call == nil {
		return
	}
	s.logger.ErrorContext(ctx, "provider call not recorded", "payment_id", p.ID, "operation", call.operation,
		"forwarded_key", call.forwardedKey, "outcome", call.outcome, "latency_ms", call.latencyMS, "error", err)
}

func nullIfEmpty(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}
