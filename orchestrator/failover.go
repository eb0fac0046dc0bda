package orchestrator

// Failover: trying a payment's next connector when its attempt on one
// certainly moved no money.
//
// A payment has a route, the connectors chosen for it when it was created
// (routing rules, or the one connector its request named), and one or more
// attempts along it. Attempt n has a forwarded key of its own (AttemptKey),
// so each connector sees one key, and a row in payment_attempts. The
// payment's provider and attempt are the attempt holding it: only that
// attempt's key is ever sent, by the request, a resumed request or the
// resolver.
//
// Why failing over cannot place two holds. The next attempt starts only
// when every provider call ever made with the current attempt's key
// certainly did not place a hold:
//
//   - A call is counted in payment_attempts.dispatched before it is sent
//     (the statement that starts the attempt counts its first call; every
//     other call is counted by dispatchSQL first, which also checks the
//     attempt is still the payment's). A call whose answer is certain not
//     to have executed (providers.KindNotExecuted: refused connection, 5xx
//     before execution, 429) is counted in not_executed when it is
//     recorded. The next attempt starts only when dispatched equals
//     not_executed once this call is counted: no call is in flight, none
//     ended with an unknown outcome (a timeout after sending), none was
//     lost in a crash between sending and recording (it stays counted in
//     dispatched only, forever). A declined call is the key's one
//     execution (the provider answers the same key with the same result),
//     so a soft decline needs no count: no call with that key holds money.
//     A reference the connector gave before refusing to confirm (Stripe
//     creates a PaymentIntent, then confirms it) names an object holding
//     no money, which no call will ever confirm once the payment moved on
//     (only the current attempt's key is sent); reconciliation expects it
//     (reconcile/attempts.go).
//   - The check and the switch to the next attempt are one transaction
//     holding the payment's row lock, which dispatchSQL and the settling
//     statements take too (always the payment's row first, then the
//     attempt's), so no call of the old attempt is counted, and no answer
//     of it settles the payment, after the switch: they find the attempt
//     changed and read the payment again.
//   - An authentication challenge (requires_action) settles the request:
//     no attempt follows it, so the shopper is never challenged twice
//     (authentication.go). An issuer's authentication_required decline,
//     certain like any decline, is retried once on the same connector
//     asking for authentication, as attempt n+1 with its own key.
//   - The resolver never starts a next attempt (it settles an unknown
//     outcome on the connector that may hold the money), and an unknown
//     outcome, a hard decline or a rejection never fails over.
//
// A crash, a lost lease or a concurrent duplicate can make a payment that
// could have failed over stay pending on its connector instead; it can
// never make it fail over when it should not.

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// AttemptKey is the key forwarded to the connector of attempt n of the
// payment made under the client key key: deterministic in (tenant, key,
// n), and different for each attempt. The first attempt's is the key
// payments have always been forwarded with.
func AttemptKey(tenantID int64, key string, n int) string {
	if n <= 1 {
		return providers.ForwardedKey(tenantID, OpAuthorize, key)
	}
	return providers.ForwardedKey(tenantID, OpAuthorize+"#attempt-"+strconv.Itoa(n), key)
}

// attemptKey is AttemptKey of p's current attempt.
func attemptKey(p Payment) string {
	return AttemptKey(p.TenantID, p.IdempotencyKey, p.Attempt)
}

// Attempt is one attempt of a payment on one connector.
type Attempt struct {
	Attempt      int    `json:"attempt" db:"attempt"`
	Connector    string `json:"connector" db:"connector"`
	ForwardedKey string `json:"forwarded_key" db:"forwarded_key"`
	// Outcome of the attempt's last provider call: nil while none has
	// answered; authorized, declined, rejected, not_executed or unknown.
	Outcome     *string  `json:"outcome" db:"outcome"`
	Code        *string  `json:"code" db:"code"`
	ProviderRef *string  `json:"provider_ref" db:"provider_ref"`
	LatencyMS   *float64 `json:"latency_ms" db:"latency_ms"`
	// Calls is how many provider calls were made with the attempt's key.
	Calls     int        `json:"calls" db:"dispatched"`
	StartedAt time.Time  `json:"started_at" db:"started_at"`
	EndedAt   *time.Time `json:"ended_at" db:"ended_at"`
	// Routing is why the attempt went to its connector; nil for attempts
	// made before payorch kept it.
	Routing *RoutingDecision `json:"routing" db:"routing"`
}

// Attempts returns a payment's attempts, first first. Errors: not_found.
func (s *Service) Attempts(ctx context.Context, sc Scope, id string) ([]Attempt, error) {
	p, err := s.GetPayment(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	const q = `
		SELECT attempt, connector, forwarded_key, outcome, code, provider_ref, latency_ms, dispatched, started_at, ended_at,
			routing
		FROM payment_attempts WHERE tenant_id = @tenant_id AND payment_id = @payment_id ORDER BY attempt`
	rows, _ := s.pool.Query(ctx, q, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID})
	as, err := pgx.CollectRows(rows, pgx.RowToStructByName[Attempt])
	if err != nil {
		return nil, internalf("read attempts of %s: %w", id, err)
	}
	return as, nil
}

// softDecline reports whether an authorization's answer is a decline this
// connector lists as soft (ConnectorOptions.SoftDeclines), and its code.
func (s *Service) softDecline(connector string, hold providers.Hold, callErr error) (string, bool) {
	code := ""
	switch {
	case callErr == nil && hold.Status == providers.StatusDeclined:
		code = hold.DeclineCode
	case providers.KindOf(callErr) == providers.KindDeclined:
		code = providers.CodeOf(callErr)
	default:
		return "", false
	}
	soft := s.connectors[connector].SoftDeclines
	if soft == nil {
		soft = DefaultSoftDeclines
	}
	return code, code != "" && slices.Contains(soft, code)
}

// notExecuted reports whether an authorization's answer says the call
// certainly did not execute. A key in use at the provider is excluded: it
// says another call with the key is in flight there.
func notExecuted(callErr error) bool {
	return providers.KindOf(callErr) == providers.KindNotExecuted &&
		providers.CodeOf(callErr) != providers.CodeIdempotencyKeyInUse
}

// nextConnector returns the connector of p's route after its current one
// that a next attempt may use (enabled, its breaker not open), or "" when
// there is none or p has had its attempts.
func (s *Service) nextConnector(p Payment) string {
	if p.Attempt >= s.maxAttempts {
		return ""
	}
	i := slices.Index(p.Route, p.Provider)
	if i < 0 {
		return ""
	}
	for _, name := range p.Route[i+1:] {
		if s.connectorEnabled(name) && s.breakerAllows(name) {
			return name
		}
	}
	return ""
}

// failOverCandidate says whether the answer of p's current attempt may
// send the request on to the next connector, and which: a request's
// (byRequest; the resolver never fails over) call that certainly did not
// execute, or a soft decline. The count check is failOver's.
func (s *Service) failOverCandidate(byRequest bool, p Payment, hold providers.Hold, callErr error) (next, reason string, ok bool) {
	if !byRequest {
		return "", "", false
	}
	if authenticationRetry(p, hold, callErr) && s.connectorEnabled(p.Provider) {
		// The same connector again, asking for authentication (the
		// issuer's condition), once: authentication.go.
		return p.Provider, providers.CodeAuthenticationRequired, true
	}
	code, soft := s.softDecline(p.Provider, hold, callErr)
	switch {
	case soft:
		reason = code
	case notExecuted(callErr):
		reason = providers.CodeOf(callErr)
		if reason == "" {
			reason = "not_executed"
		}
	default:
		return "", "", false
	}
	next = s.nextConnector(p)
	return next, reason, next != ""
}

// attemptOutcome is the payment_attempts outcome of an authorization's
// answer.
func attemptOutcome(hold providers.Hold, callErr error) string {
	switch {
	case callErr == nil && hold.Status == providers.StatusAuthorized:
		return "authorized"
	case callErr == nil && hold.Status == providers.StatusDeclined:
		return "declined"
	case callErr == nil && hold.Status == providers.StatusRequiresAction:
		return "requires_action"
	case callErr == nil:
		return "unknown"
	}
	return providers.KindOf(callErr).String()
}

// attemptCode is the code of an authorization's answer, if any.
func attemptCode(hold providers.Hold, callErr error) *string {
	if callErr == nil {
		return nullIfEmpty(hold.DeclineCode)
	}
	return nullIfEmpty(providers.CodeOf(callErr))
}

// dispatchSQL counts one more provider call with the key of the payment's
// attempt @attempt, before it is sent: only while that attempt is still
// the pending payment's (the payment's row is locked first, as every
// statement that changes its attempt does). No row: the payment moved
// on.
const dispatchSQL = `
	WITH p AS (
		SELECT tenant_id, id, attempt FROM payments
		WHERE tenant_id = @tenant_id AND id = @payment_id AND status = 'pending' AND attempt = @attempt
		FOR UPDATE
	)
	UPDATE payment_attempts a SET dispatched = a.dispatched + 1
	FROM p
	WHERE a.tenant_id = p.tenant_id AND a.payment_id = p.id AND a.attempt = p.attempt
	RETURNING a.dispatched`

// dispatch counts the call about to be made with p's current attempt key
// (dispatchSQL). false: p is no longer pending on that attempt.
func (s *Service) dispatch(ctx context.Context, p Payment) (bool, error) {
	tag, err := s.pool.Exec(ctx, dispatchSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "attempt": p.Attempt})
	if err != nil {
		return false, internalf("count provider call of %s: %w", p.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// recordAttemptCallSQL records an authorization call of a payment's
// attempt that left the payment as it was: its outcome on the attempt
// (counted in not_executed when @not_executed) and the call in the
// payment's history.
const recordAttemptCallSQL = `
	WITH a AS (
		UPDATE payment_attempts SET outcome = @outcome, code = @code, latency_ms = @call_latency_ms, ended_at = @call_at,
			not_executed = not_executed + CASE WHEN @not_executed::boolean THEN 1 ELSE 0 END
		WHERE tenant_id = @tenant_id AND payment_id = @payment_id AND attempt = @attempt
	)
	INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms, detail, created_at)
	VALUES (@tenant_id, @payment_id, 'provider_call', @call_operation, @call_forwarded_key, @call_outcome,
		@call_latency_ms, @call_detail, @call_at)`

// recordAttemptCall runs recordAttemptCallSQL for a call of p's current
// attempt. Best effort, like recordCall: a failure is logged.
func (s *Service) recordAttemptCall(ctx context.Context, p Payment, call *providerCall, hold providers.Hold, callErr error) {
	if call == nil {
		return
	}
	_, err := s.pool.Exec(ctx, recordAttemptCallSQL, withCall(call, NamedArgs{
		"tenant_id": p.TenantID, "payment_id": p.ID, "attempt": p.Attempt,
		"outcome": attemptOutcome(hold, callErr), "code": attemptCode(hold, callErr), "not_executed": notExecuted(callErr),
	}))
	if err != nil {
		s.callNotRecorded(ctx, p, call, err)
	}
}

// failOverSQL closes attempt @attempt with its last call's answer, moves
// the payment to attempt @attempt + 1 on @next (its reference is the new
// attempt's, none yet), starts that attempt with its first call counted,
// and records the call and the new attempt in the payment's history. Run
// by failOver only after its checks, under the payment's row lock.
const failOverSQL = `
	WITH closed AS (
		UPDATE payment_attempts SET outcome = @outcome, code = @code, provider_ref = coalesce(@provider_ref, provider_ref),
			latency_ms = @call_latency_ms, ended_at = @call_at,
			not_executed = not_executed + CASE WHEN @not_executed::boolean THEN 1 ELSE 0 END
		WHERE tenant_id = @tenant_id AND payment_id = @payment_id AND attempt = @attempt
	), p AS (
		UPDATE payments SET provider = @next, attempt = @attempt + 1, provider_ref = NULL,
			request_three_ds = request_three_ds OR @request_three_ds, updated_at = @now
		WHERE tenant_id = @tenant_id AND id = @payment_id AND status = 'pending' AND attempt = @attempt
		RETURNING ` + paymentColumns + `
	), started AS (
		INSERT INTO payment_attempts (tenant_id, payment_id, attempt, connector, forwarded_key, dispatched, started_at,
			routing)
		SELECT tenant_id, id, attempt, provider, @next_key, 1, @now, @next_routing FROM p
	), events AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms,
			detail, created_at)
		VALUES (@tenant_id, @payment_id, 'provider_call', @call_operation, @call_forwarded_key, @call_outcome,
			@call_latency_ms, @call_detail, @call_at),
		(@tenant_id, @payment_id, 'attempt_started', NULL, @next_key, NULL, NULL, @started_detail, @now)
	)
	SELECT ` + paymentColumns + `
	FROM p`

// failOver moves p to its next attempt, on next, after its current
// attempt's call (recorded here either way) certainly moved no money: see
// the top of this file. It returns the payment on its new attempt, or
// advanced false when the checks failed (the call is recorded, p is left
// as it was, and the caller answers from the call as if there were no
// next connector).
func (s *Service) failOver(ctx context.Context, p Payment, call *providerCall, hold providers.Hold, callErr error, next, reason string) (moved Payment, advanced bool, err error) {
	_, soft := s.softDecline(p.Provider, hold, callErr)
	// A decline, soft or authentication_required, certainly placed no hold.
	authRetry := authenticationRetry(p, hold, callErr)
	soft = soft || authRetry
	now := s.now()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cur struct {
			Status      Status
			Attempt     int
			Dispatched  int
			NotExecuted int
		}
		const lockSQL = `
			SELECT p.status, p.attempt, a.dispatched, a.not_executed
			FROM payments p
			JOIN payment_attempts a ON a.tenant_id = p.tenant_id AND a.payment_id = p.id AND a.attempt = p.attempt
			WHERE p.tenant_id = @tenant_id AND p.id = @payment_id
			FOR UPDATE OF p`
		err := tx.QueryRow(ctx, lockSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID}).
			Scan(&cur.Status, &cur.Attempt, &cur.Dispatched, &cur.NotExecuted)
		if err != nil {
			return err
		}
		args := withCall(call, NamedArgs{
			"tenant_id": p.TenantID, "payment_id": p.ID, "attempt": p.Attempt,
			"outcome": attemptOutcome(hold, callErr), "code": attemptCode(hold, callErr), "not_executed": notExecuted(callErr),
		})
		safe := cur.Status == StatusPending && cur.Attempt == p.Attempt &&
			(soft || cur.Dispatched == cur.NotExecuted+1)
		if !safe {
			_, err := tx.Exec(ctx, recordAttemptCallSQL, args)
			return err
		}
		args["next"], args["next_key"], args["now"] = next, AttemptKey(p.TenantID, p.IdempotencyKey, p.Attempt+1), now
		args["provider_ref"] = nullIfEmpty(hold.Ref)
		args["request_three_ds"] = authRetry
		args["next_routing"] = &RoutingDecision{Strategy: "failover", Chosen: next, Reason: reason, From: p.Provider}
		args["started_detail"] = map[string]any{"attempt": p.Attempt + 1, "connector": next,
			"previous_connector": p.Provider, "reason": reason}
		rows, _ := tx.Query(ctx, failOverSQL, args)
		row, err := pgx.CollectExactlyOneRow(rows, scanPayment)
		if err != nil {
			return err
		}
		moved, advanced = row, true
		return nil
	})
	if err != nil {
		s.callNotRecorded(ctx, p, call, err)
		return Payment{}, false, internalf("fail over payment %s: %w", p.ID, err)
	}
	// Either statement wrote the answer to p's attempt (a soft decline
	// counts against its connector even though the payment goes on).
	s.learnAnswer(p, attemptOutcome(hold, callErr))
	if advanced {
		s.logger.InfoContext(ctx, "payment failed over to the next connector", "payment_id", p.ID,
			"from", p.Provider, "to", next, "attempt", moved.Attempt, "reason", reason)
		s.tel.failedOver(ctx, p.Provider, next, reason)
	}
	return moved, advanced, nil
}
