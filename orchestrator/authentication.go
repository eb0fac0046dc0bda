package orchestrator

// Strong Customer Authentication (3-D Secure). When a connector answers an
// authorization with a challenge (providers.StatusRequiresAction), the
// payment waits in requires_action with next_action {type:
// redirect_to_url, url, return_url, expires_at}: the merchant sends the
// shopper to url, the issuer authenticates them, and the provider sends
// them back to return_url. That answer settles the request: it is stored
// under the idempotency key like any other, so a retry replays the same
// challenge and never starts a second one.
//
// The challenge ends, once, by whichever comes first (completeAction):
//
//   - the provider's webhook (authorized, authorization failed, canceled)
//   - the merchant's POST /v1/payments/{id}/confirm on the shopper's return
//   - the hold sweeper, which looks every waiting payment up after
//     actionFirstCheck and then every holdRecheck
//
// Each looks the hold up at the provider (which moves no money) and
// settles the payment by one statement guarded by status =
// 'requires_action' and the attempt: authorized (then capture as usual),
// or failed authentication_failed. The others find it settled. A
// challenge still open at action_expires_at (Config.ActionTimeout) is
// abandoned: the sweeper cancels the provider's intent and fails the
// payment authentication_abandoned (abandonAction).
//
// Failover stops at a challenge: a next attempt would challenge the
// shopper again, and the challenged one may still be completed. Only an
// answer that certainly placed nothing starts another attempt (failover.go);
// a challenge is not one. An issuer's authentication_required decline of
// an attempt sent without authentication is retried once on the same
// connector asking for it (authenticationRetry), when the request gave a
// return_url.

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// NextAction is what the shopper must do before a requires_action
// payment can be authorized.
type NextAction struct {
	// Type is redirect_to_url: send the shopper's browser to URL.
	Type string `json:"type"`
	URL  string `json:"url"`
	// ReturnURL is where the provider sends the shopper back.
	ReturnURL *string `json:"return_url"`
	// ExpiresAt is when an unfinished challenge is abandoned.
	ExpiresAt *time.Time `json:"expires_at"`
}

// NextActionRedirect is the one kind of next action: a redirect.
const NextActionRedirect = "redirect_to_url"

// Failure codes of a challenge that did not end in an authorization.
const (
	// FailureAuthenticationFailed: the cardholder failed or refused the
	// challenge.
	FailureAuthenticationFailed = providers.CodeAuthenticationFailed
	// FailureAuthenticationAbandoned: nobody completed the challenge
	// before it expired; the provider's intent was canceled.
	FailureAuthenticationAbandoned = "authentication_abandoned"
)

// OpConfirm is the route that completes a challenge on the shopper's
// return.
const OpConfirm = "POST /v1/payments/{id}/confirm"

const (
	// DefaultActionTimeout is how long a challenge may stay open before it
	// is abandoned.
	DefaultActionTimeout = 30 * time.Minute
	// actionFirstCheck is how old a challenge is before the sweeper first
	// looks it up: most shoppers finish within it, and their webhook or
	// return usually arrives first.
	actionFirstCheck = time.Minute
	// maxReturnURLLen bounds return_url (Stripe's limit is 2048 too).
	maxReturnURLLen = 2048
)

// ValidateReturnURL checks a return_url: an absolute https URL (http only
// for a loopback host, and only when allowLoopbackHTTP: outside
// production), without user information, of at most 2048 bytes.
// Errors: validation_failed on return_url.
func ValidateReturnURL(raw string, allowLoopbackHTTP bool) error {
	const form = "return_url must be an absolute https URL"
	if len(raw) > maxReturnURLLen {
		return ParamError("return_url", "return_url is longer than %d characters", maxReturnURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || !ValidText(raw) || u.Opaque != "" || u.Host == "" || u.User != nil {
		return ParamError("return_url", "%s (no user information)", form)
	}
	host := strings.ToLower(u.Hostname())
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
	case scheme == "http" && isLoopbackHost(host) && allowLoopbackHTTP:
	default:
		return ParamError("return_url", "%s (http only for a loopback host, outside production)", form)
	}
	return nil
}

// authenticationRetry reports whether the answer of p's current attempt
// is an issuer's authentication_required decline that is retried once on
// the same connector, asking for the cardholder's authentication: the
// request gave a return_url (a shopper is there to authenticate) and the
// attempt did not ask already. A decline placed no hold, so the retry
// cannot move money twice.
func authenticationRetry(p Payment, hold providers.Hold, callErr error) bool {
	if p.ReturnURL == nil || p.RequestThreeDS {
		return false
	}
	code := hold.DeclineCode
	if callErr != nil {
		if providers.KindOf(callErr) != providers.KindDeclined {
			return false
		}
		code = providers.CodeOf(callErr)
	} else if hold.Status != providers.StatusDeclined {
		return false
	}
	return code == providers.CodeAuthenticationRequired
}

// Confirm completes payment in.PaymentID's challenge on the shopper's
// return (POST /v1/payments/{id}/confirm): a requires_action payment is
// looked up at its provider and settled by what it says. The answer is the
// authorize request's for the payment as it then is (authorized; failed:
// payment_declined), or Pending while the challenge is still open or the
// payment is pending: a retry under the same key asks again. It moves no
// money, so any number of calls, under any keys, are safe. Errors:
// not_found, payment_declined, provider_unavailable (the lookup failed;
// the payment waits as it was).
func (s *Service) Confirm(ctx context.Context, _ *Claim, in OperationInput) (Outcome, error) {
	p, err := s.GetPayment(ctx, Scope{TenantID: in.TenantID}, in.PaymentID)
	if err != nil {
		return Outcome{}, err
	}
	if p.Status == StatusRequiresAction {
		if p, err = s.completeAction(ctx, p, "confirm"); err != nil {
			return Outcome{Payment: p}, err
		}
	}
	if p.Status == StatusRequiresAction {
		return Outcome{Payment: p, Pending: true}, nil
	}
	return authorizeResult(p)
}

// waitingSQL reads the requires_action payments in scope, the longest
// waiting first: a payment's updated_at is when it entered
// requires_action, as nothing changes it while the challenge is open (the
// sweeper's look stamps only hold_next_check_at). The partial index
// payments_requires_action_idx holds exactly these rows, so the sort is of
// the few waiting payments only.
const waitingSQL = `
	SELECT ` + paymentColumns + `
	FROM payments
	WHERE status = 'requires_action' AND ($1::bigint = 0 OR tenant_id = $1)
	ORDER BY updated_at, id
	LIMIT $2`

// WaitingPayments returns up to limit payments waiting for their shopper
// to complete a challenge (requires_action) in scope sc, oldest challenge
// first, and whether more wait. GET /v1/payments?status=requires_action
// lists them all, newest first. Errors: validation_failed (limit not 1 to
// 100), internal.
func (s *Service) WaitingPayments(ctx context.Context, sc Scope, limit int) ([]Payment, bool, error) {
	if limit < 1 || limit > 100 {
		return nil, false, ParamError("limit", "limit must be 1 to 100")
	}
	rows, _ := s.pool.Query(ctx, waitingSQL, sc.TenantID, limit+1)
	ps, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return nil, false, internalf("list waiting payments: %w", err)
	}
	if len(ps) > limit {
		return ps[:limit], true, nil
	}
	return ps, false, nil
}

// completeAction looks requires_action payment p up at its provider and
// settles it by the answer (settleAction); by says who asked (webhook,
// confirm, sweeper). A lookup moves no money: whoever calls it, as often
// as they do, only the one guarded statement changes the payment.
func (s *Service) completeAction(ctx context.Context, p Payment, by string) (Payment, error) {
	hold, err := s.lookupHold(ctx, p)
	if err != nil {
		return p, &Error{Code: CodeProviderUnavailable, RetryAfter: time.Second, Err: err,
			Message: "the payment provider could not be asked about the authentication; try again"}
	}
	out, _, err := s.settleAction(ctx, p, hold, by)
	return out, err
}

// actionOutcome is what a provider's hold says of a requires_action
// payment's challenge: the state it settles in and its failure code; ok
// false while the challenge is still open.
func actionOutcome(hold providers.Hold) (to Status, failure *string, ok bool) {
	code := func(c string) *string { return &c }
	switch hold.Status {
	case providers.StatusAuthorized, providers.StatusCaptured, providers.StatusPartiallyRefunded,
		providers.StatusRefunded:
		// Captured or refunded at the provider meanwhile: authorized first;
		// reconciliation reports the rest, as resolvePayment does.
		return StatusAuthorized, nil, true
	case providers.StatusDeclined:
		if hold.DeclineCode == "" {
			return StatusFailed, code(FailureAuthenticationFailed), true
		}
		return StatusFailed, code(hold.DeclineCode), true
	case providers.StatusCanceled, providers.StatusExpired:
		return StatusFailed, code(FailureAuthenticationAbandoned), true
	}
	return "", nil, false
}

// settleActionSQL ends a challenge: the payment leaves requires_action
// (only from it, on its attempt: one caller wins), its attempt takes the
// outcome, and the state change is recorded with who found it. The status
// change writes payment.authorized or payment.failed (payments_outbox).
const settleActionSQL = `
	WITH p AS (
		UPDATE payments SET status = @status, capture_before = @capture_before, failure_code = @failure_code,
			incremental_authorization = @incremental_authorization, multicapture = @multicapture,
			overcapture = @overcapture, max_capturable_minor = @max_capturable_minor, max_amount_minor = @max_amount_minor,
			hold_next_check_at = NULL, updated_at = @now
		WHERE tenant_id = @tenant_id AND id = @payment_id AND status = 'requires_action' AND attempt = @attempt
		RETURNING ` + paymentColumns + `
	), attempt AS (
		UPDATE payment_attempts a SET outcome = @attempt_outcome, code = @failure_code, ended_at = @now
		FROM p
		WHERE a.tenant_id = p.tenant_id AND a.payment_id = p.id AND a.attempt = p.attempt
	), event AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, from_status, to_status, detail, created_at)
		SELECT tenant_id, id, 'state_changed', 'requires_action', status, @detail::jsonb, @now
		FROM p
	)
	SELECT ` + paymentColumns + `
	FROM p`

// settleAction settles requires_action payment p by its provider's hold
// (actionOutcome). It returns the payment as it now is and whether this
// call changed it; a hold still waiting changes nothing.
func (s *Service) settleAction(ctx context.Context, p Payment, hold providers.Hold, by string) (Payment, bool, error) {
	to, failure, ok := actionOutcome(hold)
	if !ok {
		return p, false, nil
	}
	var captureBefore *time.Time
	if to == StatusAuthorized && !hold.CaptureBefore.IsZero() {
		t := hold.CaptureBefore.UTC()
		captureBefore = &t
	}
	outcome := "authorized"
	detail := map[string]any{"found_by": by, "provider_status": string(hold.Status)}
	if failure != nil {
		outcome, detail["failure_code"] = "declined", *failure
	}
	flex := p
	if to == StatusAuthorized {
		flex.grantFlex(hold.Flex)
	}
	rows, _ := s.pool.Query(ctx, settleActionSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID,
		"attempt": p.Attempt, "status": to, "capture_before": captureBefore, "failure_code": failure,
		"attempt_outcome": outcome, "detail": detail, "now": s.now(),
		"incremental_authorization": flex.IncrementalAuthorization, "multicapture": flex.Multicapture,
		"overcapture": flex.Overcapture, "max_capturable_minor": flex.MaxCapturableMinor,
		"max_amount_minor": flex.MaxAmountMinor})
	out, err := pgx.CollectExactlyOneRow(rows, scanPayment)
	if isNoRows(err) {
		// Settled meanwhile by whoever came first.
		out, err = s.readPayment(ctx, p.TenantID, p.ID)
		return out, false, wrapInternal("read payment", err)
	}
	if err != nil {
		return p, false, internalf("settle authentication of %s: %w", p.ID, err)
	}
	ended := "challenge_authorized"
	switch {
	case failure != nil && *failure == FailureAuthenticationAbandoned:
		ended = "challenge_abandoned"
	case failure != nil:
		ended = "challenge_failed"
	}
	s.tel.hold(ctx, ended)
	// The CVC went with the call that asked for the challenge (erased then,
	// best effort); erased again here in case that failed: a no-op else.
	s.afterVaultedAuthorization(ctx, out, true)
	return out, true, nil
}

// wrapInternal is internalf for an error that may be nil.
func wrapInternal(what string, err error) error {
	if err == nil {
		return nil
	}
	return internalf("%s: %w", what, err)
}

// abandonKey is the idempotency key of the cancel that ends payment id's
// abandoned challenge: one per payment, so every instance and every pass
// sends the provider the same forwarded key (a payment has one challenge:
// no attempt follows it).
func abandonKey(p Payment) string {
	return providers.ForwardedKey(p.TenantID, "abandon challenge", p.ID)
}

// abandonAction ends a challenge still open after its deadline: the
// provider's intent is canceled, then the payment failed
// authentication_abandoned (settleAction).
//
// Why it cannot move money twice: a cancel places nothing; it voids what
// a completion at the last moment may have placed, and the payment is
// then failed, never authorized, so nothing of ours refers to that hold.
// Its forwarded key is the payment's (abandonKey), so the cancels of
// several instances or passes are one operation at the provider; the
// sweeper's pick (SKIP LOCKED, then hold_next_check_at) keeps two
// instances from sending it at once. A cancel whose answer is unknown is
// sent again, with the same key, on a later pass.
func (s *Service) abandonAction(ctx context.Context, p Payment) (bool, error) {
	prov := s.providers[p.Provider]
	if prov == nil || p.ProviderRef == nil {
		return false, internalf("payment %s has no configured connector or reference to cancel at", p.ID)
	}
	fwd := abandonKey(p)
	var hold providers.Hold
	err := s.callProvider(ctx, p, "cancel", fwd, func(ctx context.Context) error {
		var err error
		hold, err = prov.Cancel(ctx, providers.CancelRequest{Key: fwd, Ref: *p.ProviderRef})
		return err
	})
	switch {
	case err == nil:
		hold.Status = providers.StatusCanceled
	case providers.KindOf(err) == providers.KindRejected:
		// The intent is not cancelable (failed, or canceled already): its
		// state says how the challenge ended.
		if hold, err = s.lookupHold(ctx, p); err != nil {
			return false, err
		}
	default:
		return false, err
	}
	_, changed, err := s.settleAction(ctx, p, hold, "sweeper")
	return changed, err
}

// pickWaitingSQL takes up to @limit requires_action payments due for a
// look: open longer than actionFirstCheck, or past their deadline, and
// not looked at within holdRecheck (hold_next_check_at, stamped here as
// pickLapsedSQL does).
const pickWaitingSQL = `
	UPDATE payments t SET hold_next_check_at = @recheck_at
	FROM (
		SELECT tenant_id AS picked_tenant, id AS picked_id FROM payments
		WHERE status = 'requires_action' AND action_expires_at IS NOT NULL
		  AND (updated_at <= @checked_before OR action_expires_at <= @now)
		  AND (hold_next_check_at IS NULL OR hold_next_check_at <= @now)
		ORDER BY action_expires_at
		LIMIT @limit
		FOR UPDATE SKIP LOCKED
	) d
	WHERE t.tenant_id = d.picked_tenant AND t.id = d.picked_id
	RETURNING ` + paymentColumns

// sweepChallenges looks up the payments waiting for their shopper
// (pickWaitingSQL): a challenge that ended at the provider is settled;
// one still open past its deadline is abandoned (abandonAction). A
// provider that cannot be reached leaves the payment for a later pass.
func (s *Service) sweepChallenges(ctx context.Context, st *HoldStats) error {
	now := s.now()
	rows, _ := s.pool.Query(ctx, pickWaitingSQL, NamedArgs{"now": now, "checked_before": now.Add(-actionFirstCheck),
		"recheck_at": now.Add(holdRecheck), "limit": holdBatch})
	ps, err := pgx.CollectRows(rows, scanPayment)
	if err != nil {
		return internalf("pick waiting challenges: %w", err)
	}
	for _, p := range ps {
		hold, err := s.lookupHold(ctx, p)
		changed := false
		switch {
		case err != nil:
		case hold.Status == providers.StatusRequiresAction && p.ActionExpiresAt != nil && !now.Before(*p.ActionExpiresAt):
			if changed, err = s.abandonAction(ctx, p); changed {
				st.Abandoned++
			}
		default:
			if _, changed, err = s.settleAction(ctx, p, hold, "sweeper"); changed {
				st.Authenticated++
			}
		}
		if err != nil {
			st.Errors++
			s.logger.WarnContext(ctx, "hold sweeper: challenge not settled; retried on a later pass", "payment_id", p.ID,
				"error", err)
		}
	}
	return nil
}
