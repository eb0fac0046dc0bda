package orchestrator

// Provider webhooks in: POST /webhooks/{connector} hands the
// raw body and headers to ReceiveWebhook, which has the connector's
// adapter verify the signature (providers.WebhookVerifier), then, in one
// transaction, stores the event raw, deduplicated on (connector, provider
// event id), and applies it to the payment holding the hold's reference,
// under that payment's row lock, so that state only moves forward.
//
// Applying a webhook can never move money. It never calls a provider: it
// creates, captures, cancels and refunds nothing. It only records what the
// provider says already happened there (a hold that lapsed or was voided,
// a capture or refund that succeeded or failed, a refund or dispute made
// outside payorch), by the same statements that record a provider's
// answer (settleSucceededOn, failOperation, expireHold). A forged event
// could at worst make our records wrong, which is why nothing is stored or
// applied before the signature checks out; a lost one is made up for by
// the resolver's and sweeper's lookups and by reconciliation.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// Outcomes of a provider webhook (provider_webhook_events.outcome; the
// migration 00010 explains each).
const (
	InboundApplied       = "applied"
	InboundIgnoredStale  = "ignored_stale"
	InboundUnknownObject = "unknown_object"
	InboundRecorded      = "recorded"
)

// maxInboundText bounds the provider's ids and types we store.
const maxInboundText = 255

// InboundResult is what receiving one provider webhook did.
type InboundResult struct {
	// ID is the provider's event id.
	ID   string `json:"id"`
	Type string `json:"type"`
	// Outcome is applied, ignored_stale, unknown_object or recorded; for a
	// duplicate, the first delivery's.
	Outcome string `json:"outcome"`
	// Duplicate: the event was received before; nothing changed now.
	Duplicate bool `json:"duplicate"`
	// waiting is the requires_action payment the event concerns, to be
	// looked up once the event is committed (completeAction).
	waiting *Payment
}

// ReceiveWebhook verifies a webhook of connector (its headers and raw
// body) and applies it (applyWebhook). Nothing is stored or changed
// unless the signature checks out. Errors: validation_failed (param
// connector: no such connector, or one that takes no webhooks or has no
// webhook secret; param signature: missing, invalid or stale; param body:
// a signed body that is no event), internal.
func (s *Service) ReceiveWebhook(ctx context.Context, connector string, header http.Header, body []byte) (InboundResult, error) {
	prov := s.providers[connector]
	v, ok := prov.(providers.WebhookVerifier)
	if !ok {
		return InboundResult{}, ParamError("connector", "no connector here takes webhooks by that name")
	}
	ev, err := v.ParseWebhook(header, body, s.now())
	switch {
	case errors.Is(err, providers.ErrWebhookNoSecret):
		return InboundResult{}, &Error{Code: CodeValidationFailed, Param: "connector", Err: err,
			Message: "this connector has no webhook secret configured, so no webhook of it is trusted"}
	case errors.Is(err, providers.ErrWebhookSignature):
		return InboundResult{}, &Error{Code: CodeValidationFailed, Param: "signature", Err: err,
			Message: "the webhook signature is missing, invalid or stale"}
	case err != nil:
		return InboundResult{}, &Error{Code: CodeValidationFailed, Param: "body", Err: err,
			Message: "the webhook body is not an event of this connector"}
	}
	if !inboundText(ev.ID, false) || !inboundText(ev.Type, false) || !inboundText(ev.HoldRef, true) ||
		!inboundText(ev.ObjectID, true) || ev.AmountMinor < 0 || ev.AmountMinor > MaxAmountMinor {
		return InboundResult{}, ParamError("body", "the webhook event has an id, type, reference or amount that cannot be stored")
	}
	var res InboundResult
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = s.applyWebhook(ctx, tx, connector, ev, body)
		return err
	})
	if err != nil {
		return InboundResult{}, internalf("webhook %s of %s: %w", ev.ID, connector, err)
	}
	if res.waiting != nil {
		// The event says the challenge moved on: the provider's record
		// settles it (a lookup moves no money). A failed lookup leaves it
		// to the sweeper; the event is stored either way.
		if _, err := s.completeAction(ctx, *res.waiting, "webhook"); err != nil {
			s.logger.WarnContext(ctx, "webhook: challenge not settled; the sweeper will", "payment_id", res.waiting.ID,
				"error", err)
		}
	}
	return res, nil
}

// inboundText reports whether v can be stored as one of the provider's
// ids: text of at most maxInboundText bytes, empty only when allowed.
func inboundText(v string, emptyOK bool) bool {
	return (emptyOK || v != "") && len(v) <= maxInboundText && ValidText(v)
}

// lockInboundSQL serialises the deliveries of one provider event, on any
// instance, until the transaction ends: provider_webhook_events is
// partitioned by the time of receipt (migration 00017), so no unique key
// spans a first delivery and its retry a month later; under this lock
// the next statement, which reads every month, sees the one before it.
const lockInboundSQL = `
	SELECT pg_advisory_xact_lock(hashtextextended('provider_webhook_events:' || @connector || ':' || @event_id, 0))`

// insertInboundSQL stores a new provider event; no row when it was
// received before (run after lockInboundSQL, in a statement of its own,
// so it sees a concurrent delivery that committed while this one waited).
const insertInboundSQL = `
	INSERT INTO provider_webhook_events (connector, provider_event_id, type, kind, hold_ref, object_id, raw,
		received_at, provider_created_at, outcome)
	SELECT @connector, @event_id, @type, @kind, @hold_ref, @object_id, @raw::bytea, @now::timestamptz,
		@created_at::timestamptz, 'recorded'
	WHERE NOT EXISTS (SELECT 1 FROM provider_webhook_events WHERE connector = @connector AND provider_event_id = @event_id)`

// inboundOutcomeSQL records what applying an event did (received at
// @now: the stored row's month).
const inboundOutcomeSQL = `
	UPDATE provider_webhook_events SET outcome = @outcome, tenant_id = @tenant_id, payment_id = @payment_id
	WHERE connector = @connector AND provider_event_id = @event_id AND received_at = @now`

// storedOutcomeSQL reads the outcome of an event received before.
const storedOutcomeSQL = `
	SELECT outcome FROM provider_webhook_events WHERE connector = @connector AND provider_event_id = @event_id`

// lockPaymentByRefSQL reads and locks the payment of connector holding
// the provider's reference.
const lockPaymentByRefSQL = `
	SELECT ` + paymentColumns + `
	FROM payments
	WHERE provider = @connector AND provider_ref = @ref
	ORDER BY tenant_id, id
	LIMIT 1
	FOR UPDATE`

// earlierAttemptSQL says whether the reference is the hold of an earlier
// attempt of one of our payments (now held at another connector):
// reconciliation judges those (reconcile/attempts.go).
const earlierAttemptSQL = `
	SELECT EXISTS (SELECT 1 FROM payment_attempts WHERE connector = @connector AND provider_ref = @ref)`

// providerEventSQL appends a provider event to a payment's timeline.
const providerEventSQL = `
	INSERT INTO payment_events (tenant_id, payment_id, type, operation, outcome, detail, created_at)
	VALUES (@tenant_id, @payment_id, 'provider_event', @kind, @outcome, @detail, @now)`

// applyWebhook stores ev (raw, the body as received) and applies it, in
// tx: the dedupe row first, under the event's lock, so a duplicate
// changes nothing; then the payment holding ev's hold reference, locked,
// and what ev means for it (applyToPayment); then the event on the
// payment's timeline and its outcome on the stored row.
func (s *Service) applyWebhook(ctx context.Context, tx pgx.Tx, connector string, ev providers.WebhookEvent, raw []byte) (InboundResult, error) {
	now := s.now()
	res := InboundResult{ID: ev.ID, Type: ev.Type}
	key := NamedArgs{"connector": connector, "event_id": ev.ID}
	var created *time.Time
	if !ev.CreatedAt.IsZero() {
		created = &ev.CreatedAt
	}
	if _, err := tx.Exec(ctx, lockInboundSQL, key); err != nil {
		return res, err
	}
	tag, err := tx.Exec(ctx, insertInboundSQL, NamedArgs{"connector": connector, "event_id": ev.ID, "type": ev.Type,
		"kind": string(ev.Kind), "hold_ref": ev.HoldRef, "object_id": ev.ObjectID, "raw": raw, "now": now,
		"created_at": created})
	if err != nil {
		return res, err
	}
	if tag.RowsAffected() == 0 {
		res.Duplicate = true
		err := tx.QueryRow(ctx, storedOutcomeSQL, key).Scan(&res.Outcome)
		return res, err
	}
	res.Outcome = InboundRecorded
	var p *Payment
	if ev.HoldRef != "" {
		rows, _ := tx.Query(ctx, lockPaymentByRefSQL, NamedArgs{"connector": connector, "ref": ev.HoldRef})
		found, err := pgx.CollectExactlyOneRow(rows, scanPayment)
		switch {
		case err == nil:
			p = &found
		case !isNoRows(err):
			return res, err
		}
	}
	if p == nil {
		if res.Outcome, err = unknownObject(ctx, tx, connector, ev); err != nil {
			return res, err
		}
		if res.Outcome == InboundUnknownObject {
			s.logger.WarnContext(ctx, "provider webhook for an object we do not know", "connector", connector,
				"provider_event_id", ev.ID, "type", ev.Type, "hold_ref", ev.HoldRef)
		}
		_, err = tx.Exec(ctx, inboundOutcomeSQL, NamedArgs{"connector": connector, "event_id": ev.ID,
			"outcome": res.Outcome, "tenant_id": nil, "payment_id": nil, "now": now})
		return res, err
	}
	detail := map[string]any{"connector": connector, "provider_event_id": ev.ID, "type": ev.Type,
		"object_id": ev.ObjectID, "amount_minor": ev.AmountMinor}
	if res.Outcome, err = s.applyToPayment(ctx, tx, connector, *p, ev, now); err != nil {
		return res, err
	}
	if p.Status == StatusRequiresAction && res.Outcome == InboundRecorded && ev.Kind != providers.WebhookRequiresAction {
		res.waiting = p
	}
	for k, v := range map[string]string{"reason": ev.Reason, "failure_code": ev.FailureCode, "idempotency_key": ev.IdempotencyKey} {
		if v != "" {
			detail[k] = v
		}
	}
	if _, err := tx.Exec(ctx, providerEventSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID,
		"kind": string(ev.Kind), "outcome": res.Outcome, "detail": detail, "now": now}); err != nil {
		return res, err
	}
	_, err = tx.Exec(ctx, inboundOutcomeSQL, NamedArgs{"connector": connector, "event_id": ev.ID,
		"outcome": res.Outcome, "tenant_id": p.TenantID, "payment_id": p.ID, "now": now})
	return res, err
}

// unknownObject is the outcome of an event no payment of connector holds
// the reference of: recorded when it names no hold, or the hold of an
// earlier attempt of ours; else unknown_object, which the next
// reconciliation reports as missing_locally.
func unknownObject(ctx context.Context, tx pgx.Tx, connector string, ev providers.WebhookEvent) (string, error) {
	if ev.HoldRef == "" {
		return InboundRecorded, nil
	}
	var earlier bool
	if err := tx.QueryRow(ctx, earlierAttemptSQL, NamedArgs{"connector": connector, "ref": ev.HoldRef}).Scan(&earlier); err != nil {
		return "", err
	}
	if earlier {
		return InboundRecorded, nil
	}
	return InboundUnknownObject, nil
}

// applyToPayment applies ev to payment p, locked in tx, and returns the
// outcome. State only moves forward: an event that says what p already
// knows, or a state p has left, is ignored_stale.
//
//	authorized, authorization_failed, requires_action
//	                    pending, requires_action: recorded (settled by lookup); else ignored_stale
//	hold_expired        authorized: expired; else ignored_stale
//	hold_canceled       requires_action: recorded (settled by lookup); a pending cancel settled; authorized (voided at the provider by someone else): canceled
//	capture_succeeded   a pending capture settled; authorized (captured outside payorch): captured
//	capture_failed      a pending capture failed
//	refund_succeeded    the matching pending refund settled; a refund of ours already settled: ignored_stale;
//	                    none of ours: recorded as a refund made outside payorch, amounts and state to match
//	refund_failed       the matching pending refund failed
//	dispute_opened      a dispute recorded (payment_disputes, outbound payment.disputed)
func (s *Service) applyToPayment(ctx context.Context, tx pgx.Tx, connector string, p Payment, ev providers.WebhookEvent,
	now time.Time) (string, error) {
	switch ev.Kind {
	case providers.WebhookAuthorized, providers.WebhookAuthorizationFailed, providers.WebhookRequiresAction:
		if p.Status == StatusPending || p.Status == StatusRequiresAction {
			// Settled by lookup: the resolver's, or, for a challenge, the
			// one ReceiveWebhook makes once this is committed.
			return InboundRecorded, nil
		}
		return InboundIgnoredStale, nil
	case providers.WebhookHoldCanceled:
		if p.Status == StatusRequiresAction {
			return InboundRecorded, nil
		}
		return s.applySettlement(ctx, tx, connector, p, ev, opCancel, now)
	case providers.WebhookHoldExpired:
		if p.Status != StatusAuthorized {
			return InboundIgnoredStale, nil
		}
		return InboundApplied, expireHold(ctx, tx, p, now)
	case providers.WebhookCaptureSucceeded:
		return s.applySettlement(ctx, tx, connector, p, ev, opCapture, now)
	case providers.WebhookCaptureFailed, providers.WebhookRefundFailed:
		return s.applyFailure(ctx, tx, p, ev, now)
	case providers.WebhookRefundSucceeded:
		return s.applyRefund(ctx, tx, connector, p, ev, now)
	case providers.WebhookDisputeOpened:
		return recordDispute(ctx, tx, connector, p, ev, now)
	}
	return InboundRecorded, nil
}

// paymentOperationsOfSQL reads a payment's operations of one kind.
const paymentOperationsOfSQL = `
	SELECT tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
		provider_ref, failure_code, created_at, updated_at, final
	FROM payment_operations
	WHERE tenant_id = @tenant_id AND payment_id = @payment_id AND kind = @kind
	ORDER BY created_at, id`

// operationsOf reads p's operations of kind.
func operationsOf(ctx context.Context, tx pgx.Tx, p Payment, kind opKind) ([]operation, error) {
	rows, _ := tx.Query(ctx, paymentOperationsOfSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "kind": kind})
	return pgx.CollectRows(rows, pgx.RowToStructByName[operation])
}

// matchOperation picks the operation of ops that ev reports: the one
// whose forwarded key is the key of ev's request, or whose provider
// reference is ev's object; else, when ev names no request, the only
// pending one (of ev's amount, for a refund). nil when none is ev's.
func matchOperation(ops []operation, ev providers.WebhookEvent, kind opKind) *operation {
	for i := range ops {
		op := &ops[i]
		if ev.IdempotencyKey != "" && op.ForwardedKey == ev.IdempotencyKey {
			return op
		}
		if kind == opRefund && ev.ObjectID != "" && op.ProviderRef != nil && *op.ProviderRef == ev.ObjectID {
			return op
		}
	}
	if ev.IdempotencyKey != "" {
		return nil
	}
	var only *operation
	for i := range ops {
		op := &ops[i]
		if op.Status != "pending" || (kind == opRefund && ev.AmountMinor != 0 && op.AmountMinor != ev.AmountMinor) {
			continue
		}
		if only != nil {
			return nil // two could be it: the resolver settles each by its key
		}
		only = op
	}
	return only
}

// settleFromWebhook records op succeeded, in tx, as its provider's answer
// would (settleSucceededOn): the payment's state and amounts move with
// it. A settlement the state machine does not allow is recorded all the
// same, loudly, as the resolver does: the provider moved the money.
func (s *Service) settleFromWebhook(ctx context.Context, tx pgx.Tx, p Payment, op operation, refundRef string, now time.Time) (string, error) {
	if to, _, _ := settledState(op.Kind, p, op.AmountMinor, op.Final); to != p.Status && !CanTransition(p.Status, to) {
		s.logger.ErrorContext(ctx, "provider webhook settled an operation against the state machine",
			"payment_id", p.ID, "operation", op.ID, "from", p.Status, "to", to)
	}
	_, err := settleSucceededOn(ctx, tx, nil, p, op, opSettled{refundID: refundRef}, nil, now)
	if isNoRows(err) {
		return InboundIgnoredStale, nil
	}
	return InboundApplied, err
}

// applySettlement applies a capture or a void the provider reports: it
// settles our pending operation of kind; with none, and p still
// authorized, it records one made outside payorch.
func (s *Service) applySettlement(ctx context.Context, tx pgx.Tx, connector string, p Payment, ev providers.WebhookEvent,
	kind opKind, now time.Time) (string, error) {
	ops, err := operationsOf(ctx, tx, p, kind)
	if err != nil {
		return "", err
	}
	if op := matchOperation(ops, ev, kind); op != nil {
		if op.Status != "pending" {
			return InboundIgnoredStale, nil
		}
		return s.settleFromWebhook(ctx, tx, p, *op, "", now)
	}
	if p.Status != StatusAuthorized {
		return InboundIgnoredStale, nil
	}
	var (
		reserved       int64
		busy, changing bool
	)
	if err := tx.QueryRow(ctx, paymentOperationsSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID}).
		Scan(&reserved, &busy, &changing); err != nil {
		return "", err
	}
	if busy || changing {
		// A capture, cancel or increment of ours is in flight, without a
		// key to prove the event is its: the resolver settles it by lookup.
		return InboundRecorded, nil
	}
	amount := ev.AmountMinor
	if kind == opCapture && (amount == 0 || amount > p.AmountMinor) {
		if amount > p.AmountMinor {
			s.logger.ErrorContext(ctx, "provider webhook reports a capture above the authorized amount",
				"payment_id", p.ID, "amount_minor", amount, "authorized_minor", p.AmountMinor)
		}
		amount = p.AmountMinor
	}
	return InboundApplied, recordExternalOperation(ctx, tx, connector, p, kind, ev, amount, now)
}

// applyRefund applies a refund the provider reports succeeded.
func (s *Service) applyRefund(ctx context.Context, tx pgx.Tx, connector string, p Payment, ev providers.WebhookEvent, now time.Time) (string, error) {
	ops, err := operationsOf(ctx, tx, p, opRefund)
	if err != nil {
		return "", err
	}
	if op := matchOperation(ops, ev, opRefund); op != nil {
		if op.Status != "pending" {
			return InboundIgnoredStale, nil
		}
		return s.settleFromWebhook(ctx, tx, p, *op, ev.ObjectID, now)
	}
	for _, op := range ops {
		if op.Status == "pending" && ev.IdempotencyKey == "" {
			return InboundRecorded, nil // perhaps ours: the resolver settles it by its key
		}
	}
	if p.Status != StatusCaptured && p.Status != StatusPartiallyRefunded {
		return InboundIgnoredStale, nil
	}
	if ev.AmountMinor <= 0 || p.RefundedMinor+ev.AmountMinor > p.CapturedMinor {
		s.logger.ErrorContext(ctx, "provider webhook reports a refund payorch cannot record",
			"payment_id", p.ID, "amount_minor", ev.AmountMinor, "captured_minor", p.CapturedMinor, "refunded_minor", p.RefundedMinor)
		return InboundRecorded, nil
	}
	return InboundApplied, recordExternalOperation(ctx, tx, connector, p, opRefund, ev, ev.AmountMinor, now)
}

// applyFailure applies a capture or refund the provider reports failed:
// the matching pending operation fails with the provider's code. A
// refund that fails after it succeeded (which Stripe allows) is recorded
// only: state never moves back; reconciliation flags the amounts.
func (s *Service) applyFailure(ctx context.Context, tx pgx.Tx, p Payment, ev providers.WebhookEvent, now time.Time) (string, error) {
	kind := opCapture
	if ev.Kind == providers.WebhookRefundFailed {
		kind = opRefund
	}
	ops, err := operationsOf(ctx, tx, p, kind)
	if err != nil {
		return "", err
	}
	op := matchOperation(ops, ev, kind)
	switch {
	case op == nil:
		return InboundRecorded, nil
	case op.Status != "pending":
		return InboundIgnoredStale, nil
	}
	code := ev.FailureCode
	if code == "" {
		code = string(kind) + "_failed"
	}
	if _, err := failOperation(ctx, tx, p, *op, code, now); err != nil {
		return "", err
	}
	return InboundApplied, nil
}

// recordExternalOperationSQL records a capture, cancel or refund made at
// the provider outside payorch, succeeded from birth (its outbound event
// <kind>.succeeded is written by the outbox trigger).
const recordExternalOperationSQL = `
	INSERT INTO payment_operations (tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
		provider_ref, created_at, updated_at)
	VALUES (@tenant_id, @operation_id, @payment_id, @kind, @key, @forwarded_key, 'succeeded', @amount_minor,
		@provider_ref, @now, @now)`

// updatePaymentStateSQL moves a payment to its next state and amounts.
const updatePaymentStateSQL = `
	UPDATE payments SET status = @to_status, captured_minor = @captured_minor, refunded_minor = @refunded_minor,
		updated_at = @now
	WHERE tenant_id = @tenant_id AND id = @payment_id`

// recordExternalOperation records, in tx, a capture, cancel or refund of
// p's hold that the provider reports and payorch never asked for (made in
// the provider's dashboard, or by another system on the account): a
// succeeded operation whose id derives from the connector and the
// provider's object, and p's state and amounts to match, with the state
// change on its timeline. It calls no provider: the money already moved.
func recordExternalOperation(ctx context.Context, tx pgx.Tx, connector string, p Payment, kind opKind, ev providers.WebhookEvent,
	amount int64, now time.Time) error {
	object := ev.ObjectID
	if object == "" {
		object = ev.ID
	}
	id := operationID(opMeta[kind].prefix, p.TenantID, "provider "+connector, string(kind)+":"+object)
	var ref *string
	if kind == opRefund {
		ref = nullIfEmpty(ev.ObjectID)
	}
	if _, err := tx.Exec(ctx, recordExternalOperationSQL, NamedArgs{"tenant_id": p.TenantID, "operation_id": id,
		"payment_id": p.ID, "kind": kind, "key": "provider:" + connector + ":" + object, "forwarded_key": ev.IdempotencyKey,
		"amount_minor": amount, "provider_ref": ref, "now": now}); err != nil {
		return err
	}
	to, captured, refunded := settledState(kind, p, amount, true)
	if _, err := tx.Exec(ctx, updatePaymentStateSQL, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID,
		"to_status": to, "captured_minor": captured, "refunded_minor": refunded, "now": now}); err != nil {
		return err
	}
	from := p.Status
	return stateEvent(ctx, tx, p.TenantID, p.ID, &from, to, map[string]any{"operation_id": id, "amount_minor": amount,
		"source": "provider_webhook", "provider_event_id": ev.ID}, now)
}

// recordDisputeSQL records a dispute; no row when it is known already.
const recordDisputeSQL = `
	INSERT INTO payment_disputes (tenant_id, id, payment_id, connector, provider_ref, amount_minor, currency, reason,
		provider_event_id, created_at)
	VALUES (@tenant_id, @id, @payment_id, @connector, @provider_ref, @amount_minor, @currency, @reason, @event_id, @now)
	ON CONFLICT (tenant_id, connector, provider_ref) DO NOTHING`

// recordDispute records a dispute of p (the payment is then disputed:
// payment_disputes, and the outbound event payment.disputed); a dispute
// known already is ignored_stale.
func recordDispute(ctx context.Context, tx pgx.Tx, connector string, p Payment, ev providers.WebhookEvent, now time.Time) (string, error) {
	ref := ev.ObjectID
	if ref == "" || ref == ev.HoldRef {
		ref = ev.ID
	}
	amount := ev.AmountMinor
	if amount == 0 {
		amount = p.CapturedMinor
	}
	tag, err := tx.Exec(ctx, recordDisputeSQL, NamedArgs{"tenant_id": p.TenantID,
		"id": operationID("dp_", p.TenantID, "provider "+connector, ref), "payment_id": p.ID, "connector": connector,
		"provider_ref": ref, "amount_minor": amount, "currency": p.Currency, "reason": ev.Reason, "event_id": ev.ID, "now": now})
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return InboundIgnoredStale, nil
	}
	return InboundApplied, nil
}
