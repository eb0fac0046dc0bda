package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// The life of a hold (SPEC: Hold lifecycle). An authorized payment has a
// deadline, capture_before, set from the provider's answer. Before it:
// one payment.hold_expiring event at a lead time (Config.HoldExpiringLead),
// and the payment's on_expiry action (capture or cancel) started once,
// at Config.HoldActionLead before it. At it: the payment becomes expired
// once the provider confirms the hold lapsed, without waiting for a
// capture attempt or the next reconciliation. POST
// /v1/payments/{id}/extend asks the provider for a later deadline where it
// can give one. SweepHolds does the first three, in every serve instance.

// OnExpiry is what payorch does with a hold shortly before it lapses.
type OnExpiry string

// The on_expiry choices.
const (
	OnExpiryNone    OnExpiry = "none"
	OnExpiryCapture OnExpiry = "capture"
	OnExpiryCancel  OnExpiry = "cancel"
)

// Known reports whether o is one of the on_expiry choices.
func (o OnExpiry) Known() bool {
	return o == OnExpiryNone || o == OnExpiryCapture || o == OnExpiryCancel
}

// Outbox event types of a hold's life (migration 00011's trigger).
const (
	EventHoldExpiring = "payment.hold_expiring"
	EventHoldExtended = "payment.hold_extended"
)

// OpExtend is the route of an extension, which scopes its idempotency
// keys and forwarded keys.
const OpExtend = "POST /v1/payments/{id}/extend"

// Defaults of the hold sweeper.
const (
	DefaultHoldExpiringLead = 24 * time.Hour
	DefaultHoldActionLead   = time.Hour
	// holdRecheck is how long the sweeper leaves a payment it picked
	// before it may pick it again (a lookup that failed, an action that
	// did not finish).
	holdRecheck = time.Minute
	// holdBatch bounds the payments one phase of a pass takes.
	holdBatch = 100
)

// OnExpiryKey is the idempotency key of payment id's on_expiry action. The
// operation's id and the key forwarded to the provider derive from it
// (operationID, providers.ForwardedKey), so every start of the action, by
// any instance, is the same operation.
func OnExpiryKey(paymentID string) string { return "payorch-on-expiry-" + paymentID }

// HoldStats counts one pass of the hold sweeper.
type HoldStats struct {
	Warned, Acted, Expired, Extended, Errors int
	// Authenticated counts challenges found ended (authorized or failed),
	// Abandoned those canceled past their deadline (authentication.go).
	Authenticated, Abandoned int
}

// SweepHolds runs one pass of the hold sweeper: warn of holds about to
// lapse, start due on_expiry actions, expire lapsed holds the provider
// confirms, and settle or abandon authentication challenges
// (sweepChallenges). Safe on several instances at once: each phase picks its
// payments with FOR UPDATE SKIP LOCKED.
func (s *Service) SweepHolds(ctx context.Context) (HoldStats, error) {
	var st HoldStats
	if err := s.warnExpiringHolds(ctx, &st); err != nil {
		return st, err
	}
	if err := s.actOnExpiringHolds(ctx, &st); err != nil {
		return st, err
	}
	if err := s.expireLapsedHolds(ctx, &st); err != nil {
		return st, err
	}
	return st, s.sweepChallenges(ctx, &st)
}

// warnHoldsSQL stamps hold_expiring_at on authorized payments whose
// deadline is within the lead, once each (the stamp is the condition), and
// records it in their history. The stamp writes payment.hold_expiring
// (migration 00011's trigger) in the same statement.
const warnHoldsSQL = `
	WITH due AS (
		SELECT tenant_id, id FROM payments
		WHERE status = 'authorized' AND hold_expiring_at IS NULL AND capture_before <= @warn_before
		ORDER BY capture_before
		LIMIT @limit
		FOR UPDATE SKIP LOCKED
	), warned AS (
		UPDATE payments p SET hold_expiring_at = @now
		FROM due WHERE p.tenant_id = due.tenant_id AND p.id = due.id
		RETURNING p.tenant_id, p.id, p.capture_before
	), history AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, detail, created_at)
		SELECT tenant_id, id, 'hold', jsonb_build_object('hold', 'expiring', 'capture_before', capture_before), @now
		FROM warned
	)
	SELECT tenant_id, id, capture_before FROM warned`

// warnExpiringHolds sends payment.hold_expiring for every hold whose
// deadline is within Config.HoldExpiringLead, with a log line and a metric.
func (s *Service) warnExpiringHolds(ctx context.Context, st *HoldStats) error {
	now := s.now()
	for {
		rows, _ := s.pool.Query(ctx, warnHoldsSQL, NamedArgs{"now": now, "warn_before": now.Add(s.holdExpiringLead),
			"limit": holdBatch})
		type warned struct {
			TenantID      int64     `db:"tenant_id"`
			ID            string    `db:"id"`
			CaptureBefore time.Time `db:"capture_before"`
		}
		ws, err := pgx.CollectRows(rows, pgx.RowToStructByName[warned])
		if err != nil {
			return internalf("warn of expiring holds: %w", err)
		}
		for _, w := range ws {
			s.tel.hold(ctx, "expiring")
			s.logger.InfoContext(ctx, "hold expiring", "tenant_id", w.TenantID, "payment_id", w.ID,
				"capture_before", w.CaptureBefore)
		}
		st.Warned += len(ws)
		if len(ws) < holdBatch {
			return nil
		}
	}
}

// pickActionsSQL takes up to @limit authorized payments whose on_expiry
// action is due (deadline within the action lead, not passed) and stamps
// hold_next_check_at, so no other pass takes them before holdRecheck.
const pickActionsSQL = `
	UPDATE payments t SET hold_next_check_at = @recheck_at
	FROM (
		SELECT tenant_id AS picked_tenant, id AS picked_id FROM payments
		WHERE status = 'authorized' AND on_expiry <> 'none' AND capture_before <= @act_before AND capture_before > @now
		  AND (hold_next_check_at IS NULL OR hold_next_check_at <= @now)
		ORDER BY capture_before
		LIMIT @limit
		FOR UPDATE SKIP LOCKED
	) d
	WHERE t.tenant_id = d.picked_tenant AND t.id = d.picked_id
	RETURNING t.tenant_id, t.id, t.on_expiry`

// actOnExpiringHolds starts the on_expiry action of every payment due.
//
// Why an action cannot move money twice: it is an ordinary capture or
// cancel (moveMoney) under the payment's own key, OnExpiryKey. Its
// operation id and forwarded key derive from that key; recordOperation,
// under the payment's row lock, records it once and resumes it on any
// later start; the provider deduplicates the forwarded key; and one
// capture or cancel per hold is enforced under the same lock (and by a
// unique index), so a capture by the merchant meanwhile makes the action a
// refusal, not a second capture. The pick (SKIP LOCKED, then
// hold_next_check_at) only keeps two instances from doing the same work
// at once; it is not what makes it safe.
func (s *Service) actOnExpiringHolds(ctx context.Context, st *HoldStats) error {
	now := s.now()
	rows, _ := s.pool.Query(ctx, pickActionsSQL, NamedArgs{"now": now, "act_before": now.Add(s.holdActionLead),
		"recheck_at": now.Add(holdRecheck), "limit": holdBatch})
	type due struct {
		TenantID int64    `db:"tenant_id"`
		ID       string   `db:"id"`
		OnExpiry OnExpiry `db:"on_expiry"`
	}
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByName[due])
	if err != nil {
		return internalf("pick on_expiry actions: %w", err)
	}
	for _, d := range ds {
		in := OperationInput{TenantID: d.TenantID, PaymentID: d.ID, Key: OnExpiryKey(d.ID)}
		act := s.Capture
		if d.OnExpiry == OnExpiryCancel {
			act = s.Cancel
		}
		out, err := act(ctx, nil, in)
		s.tel.hold(ctx, "on_expiry_"+string(d.OnExpiry))
		switch {
		case err != nil && ErrorCode(err).IsFinal():
			// Refused for good (the merchant captured or canceled first, or
			// the hold lapsed): nothing to retry.
			s.logger.InfoContext(ctx, "on_expiry action refused", "payment_id", d.ID, "action", d.OnExpiry, "error", err)
		case err != nil:
			st.Errors++
			s.logger.WarnContext(ctx, "on_expiry action failed; retried on a later pass", "payment_id", d.ID,
				"action", d.OnExpiry, "error", err)
		default:
			st.Acted++
			s.logger.InfoContext(ctx, "on_expiry action", "payment_id", d.ID, "action", d.OnExpiry,
				"status", out.Payment.Status, "pending", out.Pending)
		}
	}
	return nil
}

// pickLapsedSQL takes up to @limit authorized payments whose deadline has
// passed and stamps hold_next_check_at, like pickActionsSQL.
const pickLapsedSQL = `
	UPDATE payments t SET hold_next_check_at = @recheck_at
	FROM (
		SELECT tenant_id AS picked_tenant, id AS picked_id FROM payments
		WHERE status = 'authorized' AND capture_before <= @now
		  AND (hold_next_check_at IS NULL OR hold_next_check_at <= @now)
		ORDER BY capture_before
		LIMIT @limit
		FOR UPDATE SKIP LOCKED
	) d
	WHERE t.tenant_id = d.picked_tenant AND t.id = d.picked_id
	RETURNING t.tenant_id, t.id, t.status, t.amount_minor, t.currency, t.captured_minor, t.refunded_minor,
		t.provider, t.provider_ref, t.payment_method, t.idempotency_key, t.description, t.metadata, t.failure_code,
		t.capture_before, t.created_at, t.updated_at, t.routing_version, t.route, t.attempt, t.on_expiry,
		t.extended_authorization, t.card`

// expireLapsedHolds looks every authorized payment past its deadline up at
// its provider and records what the provider says: lapsed (expired, or
// canceled by the provider) → expired; a later deadline → extended. A
// lookup that fails leaves the payment for a later pass. Lookups move no
// money.
func (s *Service) expireLapsedHolds(ctx context.Context, st *HoldStats) error {
	now := s.now()
	rows, _ := s.pool.Query(ctx, pickLapsedSQL, NamedArgs{"now": now, "recheck_at": now.Add(holdRecheck), "limit": holdBatch})
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByNameLax[Payment])
	if err != nil {
		return internalf("pick lapsed holds: %w", err)
	}
	for _, p := range ps {
		p.normalize()
		hold, err := s.lookupHold(ctx, p)
		if err != nil {
			st.Errors++
			s.logger.WarnContext(ctx, "hold sweeper: lookup failed; retried on a later pass", "payment_id", p.ID, "error", err)
			continue
		}
		switch {
		case hold.Status == providers.StatusExpired || hold.Status == providers.StatusCanceled:
			changed, err := s.expireIfAuthorized(ctx, p, string(hold.Status), "sweeper")
			if err != nil {
				return err
			}
			if changed {
				st.Expired++
				s.tel.hold(ctx, "expired")
			}
		case hold.Status == providers.StatusAuthorized && !hold.CaptureBefore.IsZero() && hold.CaptureBefore.After(now):
			changed, err := s.moveDeadline(ctx, p, hold.CaptureBefore, "provider", nil)
			if err != nil {
				return err
			}
			if changed {
				st.Extended++
				s.tel.hold(ctx, "extended")
			}
		default:
			// The provider says something else (captured by someone else,
			// still authorized past its deadline): not ours to guess.
			// Reconciliation reports what disagrees.
			s.logger.WarnContext(ctx, "hold sweeper: the provider's hold is not lapsed", "payment_id", p.ID,
				"provider_status", hold.Status)
		}
	}
	return nil
}

// lookupHold reads p's hold at its connector, recorded in its history.
func (s *Service) lookupHold(ctx context.Context, p Payment) (providers.Hold, error) {
	prov, ok := s.providers[p.Provider]
	if !ok || p.ProviderRef == nil {
		return providers.Hold{}, errors.New("no configured connector or no provider reference")
	}
	var hold providers.Hold
	err := s.callProvider(ctx, p, "lookup", "", func(ctx context.Context) error {
		var err error
		hold, err = prov.Lookup(ctx, *p.ProviderRef)
		return err
	})
	return hold, err
}

// expireIfAuthorized marks p expired if it is still authorized, under its
// row lock, with why in its history (providerStatus, the provider's word;
// by, who found it: the sweeper, a webhook); it reports whether it did.
// Once: a second caller finds it expired and does nothing.
func (s *Service) expireIfAuthorized(ctx context.Context, p Payment, providerStatus, by string) (bool, error) {
	changed := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, lockPaymentSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID})
		cur, err := pgx.CollectExactlyOneRow(rows, scanPayment)
		if err != nil || cur.Status != StatusAuthorized {
			return err
		}
		const q = `UPDATE payments SET status = ` + lapsedSQL + `, updated_at = @now WHERE tenant_id = @tenant_id AND id = @payment_id`
		now := s.now()
		if _, err := tx.Exec(ctx, q, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "now": now}); err != nil {
			return err
		}
		changed = true
		from := StatusAuthorized
		return stateEvent(ctx, tx, p.TenantID, p.ID, &from, lapsedState(cur), map[string]any{
			"capture_before": cur.CaptureBefore, "provider_status": providerStatus, "found_by": by}, now)
	})
	if err != nil {
		return false, internalf("expire hold of %s: %w", p.ID, err)
	}
	return changed, nil
}

// moveDeadlineSQL sets an authorized payment's later deadline and clears
// its warning (a new one comes before the new deadline); the change
// writes payment.hold_extended (migration 00011's trigger).
const moveDeadlineSQL = `
	WITH moved AS (
		UPDATE payments SET capture_before = @capture_before, hold_expiring_at = NULL, hold_next_check_at = NULL,
			updated_at = @now
		WHERE tenant_id = @tenant_id AND id = @payment_id AND status = 'authorized' AND capture_before < @capture_before
		RETURNING ` + paymentColumns + `
	), history AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, detail, created_at)
		SELECT tenant_id, id, 'hold', jsonb_build_object('hold', 'extended', 'capture_before', capture_before,
			'by', @by::text), @now
		FROM moved
	)
	SELECT * FROM moved`

// moveDeadline records p's later deadline, by whom ("provider": found by
// the sweeper; "request": an extension); it reports whether it moved (a
// deadline already as late, or a payment no longer authorized, does not).
// The payment as it now is goes to *out when out is not nil.
func (s *Service) moveDeadline(ctx context.Context, p Payment, captureBefore time.Time, by string, out *Payment) (bool, error) {
	rows, _ := s.pool.Query(ctx, moveDeadlineSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID,
		"capture_before": captureBefore, "by": by, "now": s.now()})
	moved, err := pgx.CollectExactlyOneRow(rows, scanPayment)
	if isNoRows(err) {
		return false, nil
	}
	if err != nil {
		return false, internalf("move the deadline of %s: %w", p.ID, err)
	}
	if out != nil {
		*out = moved
	}
	return true, nil
}

// Extend asks p's provider for a later deadline of its authorized hold
// (POST /v1/payments/{id}/extend) and records it. An extension moves no
// money: the hold stays what it was, for longer; its forwarded key
// (OpExtend, the request's key) makes a retry the same request at the
// provider. Errors: not_found, payment_state_conflict (not authorized, or
// lapsed), not_supported (the connector cannot extend this hold),
// provider_unavailable, internal.
func (s *Service) Extend(ctx context.Context, _ *Claim, in OperationInput) (Outcome, error) {
	rows, _ := s.pool.Query(ctx, selectPaymentSQL, NamedArgs{"tenant_id": in.TenantID, "payment_id": in.PaymentID})
	p, err := pgx.CollectExactlyOneRow(rows, scanPayment)
	if isNoRows(err) {
		return Outcome{}, notFound(in.PaymentID)
	}
	if err != nil {
		return Outcome{}, internalf("extend: %w", err)
	}
	if p.Status != StatusAuthorized {
		return Outcome{Payment: p}, Errorf(CodePaymentStateConflict, "only an authorized payment's hold can be extended; this one is %s", p.Status)
	}
	if p.CaptureBefore != nil && !s.now().Before(*p.CaptureBefore) {
		return Outcome{Payment: p}, Errorf(CodePaymentStateConflict, "the hold expired at %s", p.CaptureBefore.Format(time.RFC3339))
	}
	ext, ok := s.providers[p.Provider].(providers.HoldExtender)
	if !ok || p.ProviderRef == nil {
		return Outcome{Payment: p}, Errorf(CodeNotSupported, "connector %s cannot extend a hold", p.Provider)
	}
	fwd := providers.ForwardedKey(in.TenantID, OpExtend, in.Key)
	var hold providers.Hold
	err = s.callProvider(ctx, p, "extend", fwd, func(ctx context.Context) error {
		var err error
		hold, err = ext.ExtendHold(ctx, providers.ExtendRequest{Key: fwd, Ref: *p.ProviderRef,
			ExtendedAuthorization: p.ExtendedAuthorization})
		return err
	})
	if err != nil {
		return Outcome{Payment: p}, extendError(p, err)
	}
	if hold.Status == providers.StatusAuthorized && !hold.CaptureBefore.IsZero() {
		if _, err := s.moveDeadline(ctx, p, hold.CaptureBefore, "request", &p); err != nil {
			return Outcome{}, err
		}
	}
	return Outcome{Payment: p}, nil
}

// extendError maps a provider's refusal of an extension to the answer.
func extendError(p Payment, err error) error {
	switch providers.KindOf(err) {
	case providers.KindRejected, providers.KindDeclined:
		switch providers.CodeOf(err) {
		case providers.CodeNotSupported:
			return Errorf(CodeNotSupported, "connector %s cannot extend this hold", p.Provider)
		case providers.CodeHoldExpired:
			return Errorf(CodePaymentStateConflict, "the hold expired at the provider")
		}
		return Errorf(CodePaymentStateConflict, "the provider refused to extend the hold")
	}
	return &Error{Code: CodeProviderUnavailable, Message: "the provider did not answer; retry with the same Idempotency-Key", Err: err}
}
