package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// opKind is the kind of a money movement on an authorized payment.
type opKind string

const (
	opCapture opKind = "capture"
	opCancel  opKind = "cancel"
	opRefund  opKind = "refund"
	// opIncrement raises the hold to amount_minor in all (flexhold.go).
	opIncrement opKind = "increment"
)

// operation is a capture, cancel or refund as stored: a row of
// payment_operations, read by column name. Every statement that returns
// an operation returns these columns:
//
//	tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
//	provider_ref, failure_code, created_at, updated_at, final
type operation struct {
	TenantID     int64     `db:"tenant_id"`
	ID           string    `db:"id"`
	PaymentID    string    `db:"payment_id"`
	Kind         opKind    `db:"kind"`
	Key          string    `db:"idempotency_key"`
	ForwardedKey string    `db:"forwarded_key"`
	Status       string    `db:"status"`
	AmountMinor  int64     `db:"amount_minor"`
	ProviderRef  *string   `db:"provider_ref"`
	FailureCode  *string   `db:"failure_code"`
	CreatedAt    time.Time `db:"created_at"`
	UpdatedAt    time.Time `db:"updated_at"`
	// Final is false for a capture that leaves the rest of a multicapture
	// hold capturable (final_capture false).
	Final bool `db:"final"`
}

// object is op as the API shows it (Operation); currency is its
// payment's.
func (op operation) object(currency string) Operation {
	return Operation{ID: op.ID, Object: string(op.Kind), PaymentID: op.PaymentID, Status: op.Status,
		AmountMinor: op.AmountMinor, Currency: currency, ProviderRef: op.ProviderRef, FailureCode: op.FailureCode,
		IdempotencyKey: op.Key, CreatedAt: op.CreatedAt.UTC(), UpdatedAt: op.UpdatedAt.UTC()}
}

// selectOperationSQL reads one operation of a tenant.
const selectOperationSQL = `
	SELECT tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
		provider_ref, failure_code, created_at, updated_at, final
	FROM payment_operations
	WHERE tenant_id = @tenant_id AND id = @operation_id`

// OperationInput is a capture, cancel or refund request.
type OperationInput struct {
	TenantID  int64
	PaymentID string
	Key       string
	// AmountMinor: capture or refund this much; 0 means all (what is left
	// of the hold, or everything not yet refunded); an increment's new
	// total. Ignored by cancel.
	AmountMinor int64
	// NotFinal: a capture of a multicapture hold that leaves the rest
	// capturable (final_capture false).
	NotFinal bool
	// IncreaseMinor: an increment by this much, on the hold as it is when
	// the increment's turn comes, instead of to the total AmountMinor.
	IncreaseMinor int64
}

var opMeta = map[opKind]struct {
	route, prefix, verb string
	to                  Status
}{
	opCapture: {OpCapture, "cap_", "capture", StatusCaptured},
	opCancel:  {OpCancel, "cnl_", "cancel", StatusCanceled},
	opRefund:  {OpRefund, "re_", "refund", StatusRefunded},
	// An increment leaves the payment authorized.
	opIncrement: {OpIncrement, "inc_", "increment", StatusAuthorized},
}

// Capture captures an authorized payment, all of it or part (the rest of
// the hold is released). Errors: not_found, payment_state_conflict
// (not authorized, already captured or canceled under another key, hold
// expired), amount_exceeds_authorized, provider_unavailable, internal.
func (s *Service) Capture(ctx context.Context, c *Claim, in OperationInput) (Outcome, error) {
	return s.moveMoney(ctx, c, opCapture, in)
}

// Cancel voids an authorized payment's hold. Errors: not_found,
// payment_state_conflict, provider_unavailable, internal.
func (s *Service) Cancel(ctx context.Context, c *Claim, in OperationInput) (Outcome, error) {
	in.AmountMinor = 0
	return s.moveMoney(ctx, c, opCancel, in)
}

// moveMoney is the one path of capture, cancel and refund: record the
// operation (deterministic id) under the payment's row lock
// (recordOperation), call the provider with no transaction open, record
// the answer.
func (s *Service) moveMoney(ctx context.Context, c *Claim, kind opKind, in OperationInput) (Outcome, error) {
	if in.AmountMinor < 0 || in.AmountMinor > MaxAmountMinor {
		return Outcome{}, ParamError("amount_minor", "amount_minor must be a positive whole number of minor units")
	}
	var (
		p  Payment
		op operation
	)
	start := s.now()
	err := s.waitTurn(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			p, op, err = s.recordOperation(ctx, tx, c, kind, in)
			return err
		})
	})
	var r refusal
	switch {
	case errors.As(err, &r):
		return Outcome{Payment: p}, r.err
	case err != nil:
		return Outcome{}, internalf("%s: %w", opMeta[kind].verb, err)
	}
	switch op.Status {
	case "succeeded", "failed":
		return s.operationResult(ctx, op)
	}
	if op.Kind == opIncrement && op.CreatedAt.Before(start) {
		// Resumed: an earlier execution may have raised the hold already.
		if out, done, err := s.settleIncrementByLookup(ctx, c, p, op); done {
			return out, err
		}
	}
	return s.operationAtProvider(ctx, c, p, op)
}

// recordOperation reads the payment of in under its row lock and this
// key's operation, and returns them: the operation found (a resumed
// request) or recorded now, pending, with the key's recovery point, once
// admitted (admit, refundAmount, one capture or cancel per hold). A
// business refusal is a refusal error; the transaction commits all the
// same, keeping the expiry of a lapsed hold it found.
func (s *Service) recordOperation(ctx context.Context, tx pgx.Tx, c *Claim, kind opKind, in OperationInput) (Payment, operation, error) {
	meta := opMeta[kind]
	opID := operationID(meta.prefix, in.TenantID, meta.route, in.Key)
	now := s.now()
	st, err := readForOperation(ctx, tx, c, in.TenantID, in.PaymentID, opID)
	if isNoRows(err) {
		return Payment{}, operation{}, refusal{notFound(in.PaymentID)}
	}
	if err != nil {
		return Payment{}, operation{}, err
	}
	if st.claimLost {
		// Its commit did not wait for its flush (asyncClaim) and a crash
		// took it: stop before anything is recorded or sent (a refusal
		// only in that it ends the request with its own error; it is not
		// final, nothing is stored).
		return Payment{}, operation{}, refusal{errClaimLost()}
	}
	p := st.payment
	if st.op != nil {
		if st.op.PaymentID != in.PaymentID {
			// Only reachable once the key's record was purged.
			return p, operation{}, refusal{&Error{Code: CodeIdempotencyKeyReused, Param: "Idempotency-Key",
				Fields: []string{"path.id"}, Message: "this Idempotency-Key was used to " + meta.verb + " another payment"}}
		}
		return p, *st.op, nil // resume
	}

	amount, expire, refused := s.admit(kind, p, in, now)
	if kind == opRefund && refused == nil {
		amount, refused = refundAmount(p, st.reserved, amount)
	}
	if expire {
		if err := expireHold(ctx, tx, p, now); err != nil {
			return p, operation{}, err
		}
	}
	if refused == nil && kind != opRefund && st.busy {
		// Under the payment's row lock: one final capture or cancel per
		// hold. (The partial unique index is the backstop.)
		refused = Errorf(CodePaymentStateConflict, "another capture or cancel of this payment is in flight or done")
	}
	if refused == nil && kind != opRefund && st.changing {
		// One increment, capture or cancel at a time, each admitted against
		// the hold as the one before left it: this one waits its turn
		// (waitTurn). The partial unique index is the backstop.
		refused = errChanging
	}
	if refused != nil {
		return p, operation{}, refusal{refused}
	}
	rows, _ := tx.Query(ctx, recordOperationSQL, withClaim(c, NamedArgs{
		"tenant_id": p.TenantID, "operation_id": opID, "payment_id": p.ID, "kind": kind, "key": in.Key,
		"forwarded_key": providers.ForwardedKey(in.TenantID, meta.route, in.Key), "amount_minor": amount, "now": now,
		"final":          !(kind == opCapture && in.NotFinal),
		"recovery_point": kind.String() + "_recorded"}))
	op, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[operation])
	return p, op, err
}

// refusal is a business refusal decided inside a transaction: the
// transaction commits what it wrote (inTx) and the request is answered
// with err.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// operationRead is what recordOperation reads under the payment's lock.
type operationRead struct {
	payment Payment
	// op is this key's operation, nil when there is none yet.
	op *operation
	// reserved is what the payment's refunds that did not fail add up to;
	// busy says a final capture or a cancel that did not fail holds it;
	// changing that an increment, capture or cancel of it is pending.
	reserved int64
	busy     bool
	changing bool
	// claimLost: the request's claim is not there (claimHeldSQL).
	claimLost bool
}

// readForOperation reads, in one round trip, payment paymentID locked
// (lockPaymentSQL), the operation opID if it exists, what the payment's
// other operations hold (paymentOperationsSQL), and, for a request (c not
// nil), whether its claim is still there (claimHeldSQL). Each statement
// of the batch runs after the one before and takes its own snapshot, so
// the reads see everything committed before the lock was granted.
// Errors: pgx.ErrNoRows when there is no such payment.
func readForOperation(ctx context.Context, tx pgx.Tx, c *Claim, tenantID int64, paymentID, opID string) (operationRead, error) {
	b := &pgx.Batch{}
	b.Queue(lockPaymentSQL, NamedArgs{"tenant_id": tenantID, "payment_id": paymentID})
	b.Queue(selectOperationSQL, NamedArgs{"tenant_id": tenantID, "operation_id": opID})
	b.Queue(paymentOperationsSQL, NamedArgs{"tenant_id": tenantID, "payment_id": paymentID})
	if c != nil {
		b.Queue(claimHeldSQL, withClaim(c, NamedArgs{}))
	}
	br := tx.SendBatch(ctx, b)
	var r operationRead
	rows, _ := br.Query()
	p, err := pgx.CollectExactlyOneRow(rows, scanPayment)
	var (
		op    operation
		opErr error
	)
	if err == nil {
		rows, _ = br.Query()
		op, opErr = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[operation])
		err = br.QueryRow().Scan(&r.reserved, &r.busy, &r.changing)
	}
	if err == nil && c != nil {
		var held bool
		err = br.QueryRow().Scan(&held)
		r.claimLost = !held
	}
	if cerr := br.Close(); err == nil && !isNoRows(cerr) {
		err = cerr
	}
	if err != nil {
		return r, err
	}
	switch {
	case opErr == nil:
		r.op = &op
	case !isNoRows(opErr):
		return r, opErr
	}
	r.payment = p
	return r, nil
}

// lapsedSQL is the state a hold that lapsed leaves an authorized payment
// in: expired, or captured when parts of it were captured (multicapture:
// what was captured stays, the rest is released).
const lapsedSQL = `CASE WHEN captured_minor > 0 THEN 'captured' ELSE 'expired' END`

// lapsedState is lapsedSQL for p.
func lapsedState(p Payment) Status {
	if p.CapturedMinor > 0 {
		return StatusCaptured
	}
	return StatusExpired
}

// expireHold marks authorized payment p expired (its hold lapsed at
// capture_before; captured when parts of it were), in tx, with the state
// change in its history.
func expireHold(ctx context.Context, tx pgx.Tx, p Payment, now time.Time) error {
	const q = `UPDATE payments SET status = ` + lapsedSQL + `, updated_at = @now WHERE tenant_id = @tenant_id AND id = @payment_id`
	if _, err := tx.Exec(ctx, q, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "now": now}); err != nil {
		return err
	}
	from := p.Status
	return stateEvent(ctx, tx, p.TenantID, p.ID, &from, lapsedState(p), map[string]any{"capture_before": p.CaptureBefore}, now)
}

// lockPaymentSQL reads a payment of a tenant and locks its row until the
// transaction ends.
const lockPaymentSQL = `
	SELECT ` + paymentColumns + `
	FROM payments
	WHERE tenant_id = @tenant_id AND id = @payment_id
	FOR UPDATE`

// paymentOperationsSQL sums up a payment's operations that did not fail:
// the amount its refunds reserve, whether a final capture or a cancel
// ended its hold, and whether an increment, capture or cancel of it is
// pending (the next one waits its turn).
const paymentOperationsSQL = `
	SELECT
		(SELECT coalesce(sum(amount_minor), 0) FROM payment_operations
		 WHERE tenant_id = @tenant_id AND payment_id = @payment_id AND kind = 'refund' AND status <> 'failed')
			AS reserved_minor,
		EXISTS (SELECT 1 FROM payment_operations
		 WHERE tenant_id = @tenant_id AND payment_id = @payment_id AND kind IN ('capture', 'cancel')
			AND status <> 'failed' AND final) AS busy,
		EXISTS (SELECT 1 FROM payment_operations
		 WHERE tenant_id = @tenant_id AND payment_id = @payment_id AND kind IN ('increment', 'capture', 'cancel')
			AND status = 'pending') AS changing`

// recordOperationSQL inserts a pending operation and moves the key's
// recovery point, in one statement.
const recordOperationSQL = `
	WITH o AS (
		INSERT INTO payment_operations (tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, amount_minor,
			created_at, updated_at, final)
		VALUES (@tenant_id, @operation_id, @payment_id, @kind, @key, @forwarded_key, @amount_minor, @now, @now, @final)
		RETURNING tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
			provider_ref, failure_code, created_at, updated_at, final
	), checkpoint AS (
		UPDATE idempotency_keys k SET recovery_point = @recovery_point, payment_id = coalesce(k.payment_id, o.payment_id),
			updated_at = @now
		FROM o
		WHERE k.tenant_id = @claim_tenant_id AND k.operation = @claim_operation AND k.key = @claim_key
			AND k.lock_token = @claim_token::uuid
	)
	SELECT tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
		provider_ref, failure_code, created_at, updated_at, final
	FROM o`

func (k opKind) String() string { return string(k) }

// admit decides whether a new operation of kind may start on p, and its
// amount. expire reports that the hold has lapsed and p must become
// expired.
func (s *Service) admit(kind opKind, p Payment, in OperationInput, now time.Time) (int64, bool, error) {
	amount := in.AmountMinor
	switch kind {
	case opIncrement:
		if in.IncreaseMinor > 0 {
			amount = p.AmountMinor + in.IncreaseMinor
		}
		expire, err := admitIncrement(p, amount, now)
		return amount, expire, err
	case opCapture, opCancel:
		if p.Status == StatusAuthorized && p.CaptureBefore != nil && !now.Before(*p.CaptureBefore) {
			return 0, true, Errorf(CodePaymentStateConflict, "the hold expired at %s", p.CaptureBefore.Format(time.RFC3339))
		}
		if err := checkTransition(p.Status, opMeta[kind].to, opMeta[kind].verb); err != nil {
			return 0, false, err
		}
		if kind == opCancel {
			if p.CapturedMinor > 0 {
				return 0, false, Errorf(CodePaymentStateConflict,
					"the hold was partly captured: a final capture (final_capture true, the default) releases the rest")
			}
			return 0, false, nil
		}
		amount, err := admitCapture(p, amount, in.NotFinal)
		return amount, false, err
	default: // refund
		if p.Status != StatusCaptured && p.Status != StatusPartiallyRefunded {
			return 0, false, Errorf(CodePaymentStateConflict, "cannot refund a payment that is %s", p.Status)
		}
		return amount, false, nil
	}
}

// operationAtProvider calls the provider for a pending operation with its
// forwarded key and records the answer. Used by requests and the resolver.
func (s *Service) operationAtProvider(ctx context.Context, c *Claim, p Payment, op operation) (Outcome, error) {
	prov := s.providers[p.Provider]
	if prov == nil || p.ProviderRef == nil {
		return Outcome{}, internalf("operation %s: payment %s has no provider reference", op.ID, p.ID)
	}
	ref := *p.ProviderRef
	var (
		hold     providers.Hold
		refundID string
	)
	call, err := s.runProviderCall(ctx, p, string(op.Kind), op.ForwardedKey, func(ctx context.Context) error {
		var err error
		switch op.Kind {
		case opCapture:
			hold, err = prov.Capture(ctx, providers.CaptureRequest{Key: op.ForwardedKey, Ref: ref, AmountMinor: op.AmountMinor,
				NotFinal: !op.Final})
		case opIncrement:
			inc, ok := prov.(providers.Incrementer)
			if !ok {
				return &providers.Error{Kind: providers.KindRejected, Code: providers.CodeNotSupported,
					Message: "the connector cannot increment a hold"}
			}
			hold, err = inc.IncrementAuthorization(ctx, providers.IncrementRequest{Key: op.ForwardedKey, Ref: ref,
				AmountMinor: op.AmountMinor})
		case opCancel:
			hold, err = prov.Cancel(ctx, providers.CancelRequest{Key: op.ForwardedKey, Ref: ref})
		case opRefund:
			var r providers.Refund
			r, err = prov.Refund(ctx, providers.RefundRequest{Key: op.ForwardedKey, Ref: ref, AmountMinor: op.AmountMinor})
			refundID = r.Ref
		}
		return err
	})
	return s.settleOperation(ctx, c, p, op, opSettled{refundID: refundID, hold: hold}, err, &call)
}

// settleOperationSQL records a succeeded operation in one statement: the
// operation; the payment's state and amounts, decided in Go
// (settledState) from the payment as it was read, and written only if
// the payment is still so (@from_status, @captured_from, @refunded_from);
// the provider call (when @call_operation is not NULL) and the state
// change in its history; and the key's recovery point. No row when the
// operation was settled meanwhile or the payment moved since it was read;
// the provider call is recorded all the same.
const settleOperationSQL = `
	WITH old AS (
		SELECT id FROM payments
		WHERE tenant_id = @tenant_id AND id = @payment_id AND status = @from_status
			AND captured_minor = @captured_from AND refunded_minor = @refunded_from
		FOR UPDATE
	), o AS (
		UPDATE payment_operations SET status = 'succeeded', provider_ref = coalesce(@refund_ref, provider_ref),
			updated_at = @now
		WHERE tenant_id = @tenant_id AND id = @operation_id AND status = 'pending' AND EXISTS (SELECT 1 FROM old)
		RETURNING id, amount_minor, status, provider_ref, updated_at
	), p AS (
		UPDATE payments p SET status = @to_status, captured_minor = @captured_minor, refunded_minor = @refunded_minor,
			amount_minor = coalesce(@amount_to::bigint, p.amount_minor),
			capture_before = coalesce(@capture_before_to::timestamptz, p.capture_before),
			max_capturable_minor = coalesce(@max_capturable_to::bigint, p.max_capturable_minor), updated_at = @now
		FROM o
		WHERE p.tenant_id = @tenant_id AND p.id = @payment_id
		RETURNING p.tenant_id, p.id, p.status, p.amount_minor, p.currency, p.captured_minor, p.refunded_minor,
			p.provider, p.provider_ref, p.payment_method, p.idempotency_key, p.description, p.metadata, p.failure_code,
			p.capture_before, p.created_at, p.updated_at, p.routing_version, p.route, p.attempt, p.on_expiry, p.extended_authorization, p.card,
		p.return_url, p.next_action_url, p.action_expires_at, p.request_three_ds,
		p.incremental_authorization, p.multicapture, p.overcapture, p.max_capturable_minor, p.max_amount_minor,
		p.request_hash, p.field_hashes
	), events AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms,
			from_status, to_status, detail, created_at)
		SELECT @tenant_id, @payment_id, 'provider_call', @call_operation::text, @call_forwarded_key::text,
			@call_outcome::text, @call_latency_ms::double precision, NULL::text, NULL::text, @call_detail::jsonb,
			@call_at::timestamptz
		WHERE @call_operation::text IS NOT NULL
		UNION ALL
		SELECT p.tenant_id, p.id, 'state_changed', NULL, NULL, NULL, NULL, @from_status, p.status,
			jsonb_build_object('operation_id', o.id, 'amount_minor', o.amount_minor), @now
		FROM p, o
	), checkpoint AS (
		UPDATE idempotency_keys k SET recovery_point = 'provider_settled', payment_id = coalesce(k.payment_id, p.id),
			updated_at = @now
		FROM p
		WHERE k.tenant_id = @claim_tenant_id AND k.operation = @claim_operation AND k.key = @claim_key
			AND k.lock_token = @claim_token::uuid
	)
	SELECT p.tenant_id, p.id, p.status, p.amount_minor, p.currency, p.captured_minor, p.refunded_minor,
		p.provider, p.provider_ref, p.payment_method, p.idempotency_key, p.description, p.metadata, p.failure_code,
		p.capture_before, p.created_at, p.updated_at, p.routing_version, p.route, p.attempt, p.on_expiry, p.extended_authorization, p.card,
		p.return_url, p.next_action_url, p.action_expires_at, p.request_three_ds,
		p.incremental_authorization, p.multicapture, p.overcapture, p.max_capturable_minor, p.max_amount_minor,
		p.request_hash, p.field_hashes,
		o.status AS operation_status, o.provider_ref AS operation_provider_ref, o.updated_at AS operation_updated_at
	FROM p, o`

// opSettled is what a provider's answer to an operation gave: the
// refund's reference, and the hold as the provider answered it (an
// increment's new total and deadline).
type opSettled struct {
	refundID string
	hold     providers.Hold
}

// settledOperationRow is a row of settleOperationSQL: the payment as
// written, and the operation's columns that settling it wrote (its others
// do not change once it is recorded).
type settledOperationRow struct {
	paymentRow
	OperationStatus      string    `db:"operation_status"`
	OperationProviderRef *string   `db:"operation_provider_ref"`
	OperationUpdatedAt   time.Time `db:"operation_updated_at"`
}

// settledState is what a succeeded operation of kind, for amount, makes
// of payment p: its next state and its captured and refunded amounts. A
// capture captures amount (the rest of the hold is released), a cancel
// voids the hold, a refund adds up to what was captured.
func settledState(kind opKind, p Payment, amount int64, final bool) (to Status, captured, refunded int64) {
	switch kind {
	case opCapture:
		if !final {
			// A part of a multicapture hold: it stays authorized.
			return StatusAuthorized, p.CapturedMinor + amount, p.RefundedMinor
		}
		return StatusCaptured, p.CapturedMinor + amount, p.RefundedMinor
	case opIncrement:
		return StatusAuthorized, p.CapturedMinor, p.RefundedMinor
	case opCancel:
		return StatusCanceled, p.CapturedMinor, p.RefundedMinor
	}
	refunded = p.RefundedMinor + amount
	if refunded >= p.CapturedMinor {
		return StatusRefunded, p.CapturedMinor, refunded
	}
	return StatusPartiallyRefunded, p.CapturedMinor, refunded
}

// settleOperation records a provider's answer to a pending operation. call
// is the provider call that gave it, still to be recorded in the payment's
// history, or nil when it is recorded already.
func (s *Service) settleOperation(ctx context.Context, c *Claim, p Payment, op operation, got opSettled, callErr error, call *providerCall) (Outcome, error) {
	kind := providers.KindOf(callErr)
	switch {
	case callErr == nil:
		return s.settleSucceeded(ctx, c, p, op, got, call)
	case kind == providers.KindNotExecuted:
		s.recordCall(ctx, p, call)
		return Outcome{Payment: p}, &Error{Code: CodeProviderUnavailable, RetryAfter: time.Second, Err: callErr,
			Message: "the payment provider did not take the request; retry with the same Idempotency-Key"}
	case kind == providers.KindUnknown:
		s.recordCall(ctx, p, call)
		return Outcome{Payment: p, Pending: true}, nil
	}
	// Declined or rejected: final, and rare enough for a transaction of
	// its own.
	s.recordCall(ctx, p, call)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now := s.now()
		failed, err := failOperation(ctx, tx, p, op, providers.CodeOf(callErr), now)
		if err != nil || !failed {
			return err
		}
		return checkpoint(ctx, tx, c, "provider_settled", p.ID, now)
	})
	if err != nil {
		return Outcome{}, internalf("settle %s: %w", op.Kind, err)
	}
	return s.reloadOperation(ctx, op)
}

// failOperation records in tx that pending operation op of payment p
// failed with code (a hold_expired refusal expires the payment, when it
// is still authorized), and reports whether it was still pending. Used
// by settleOperation and by provider webhooks (inbound.go).
func failOperation(ctx context.Context, tx pgx.Tx, p Payment, op operation, code string, now time.Time) (bool, error) {
	const fail = `
		UPDATE payment_operations SET status = 'failed', failure_code = @failure_code, updated_at = @now
		WHERE tenant_id = @tenant_id AND id = @operation_id AND status = 'pending'`
	tag, err := tx.Exec(ctx, fail, NamedArgs{"tenant_id": op.TenantID, "operation_id": op.ID,
		"failure_code": code, "now": now})
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if code == providers.CodeHoldExpired {
		const expire = `
			UPDATE payments SET status = ` + lapsedSQL + `, updated_at = @now
			WHERE tenant_id = @tenant_id AND id = @payment_id AND status = 'authorized'
			RETURNING status`
		var to Status
		err := tx.QueryRow(ctx, expire, NamedArgs{"tenant_id": p.TenantID, "payment_id": p.ID, "now": now}).Scan(&to)
		if err != nil && !isNoRows(err) {
			return false, err
		}
		if err == nil {
			from := StatusAuthorized
			if err := stateEvent(ctx, tx, p.TenantID, p.ID, &from, to, nil, now); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// settleTries bounds how many times settleSucceeded decides a payment's
// next state again because the payment moved under it (concurrent
// refunds of one payment settling at once).
const settleTries = 10

// settleSucceeded records a succeeded operation (settleOperationSQL) and
// answers from what the statement wrote. The payment's next state is
// decided from p and checked against the state machine before it is
// written; when p is no longer the payment as stored, it is read again
// and the state decided again.
func (s *Service) settleSucceeded(ctx context.Context, c *Claim, p Payment, op operation, got opSettled, call *providerCall) (Outcome, error) {
	for try := 1; ; try++ {
		to, _, _ := settledState(op.Kind, p, op.AmountMinor, op.Final)
		if to != p.Status && !CanTransition(p.Status, to) {
			// The provider moved money we did not expect to be movable:
			// record it as it is, loudly; reconciliation will flag it too.
			s.logger.ErrorContext(ctx, "provider settled an operation against the state machine",
				"payment_id", p.ID, "operation", op.ID, "from", p.Status, "to", to)
		}
		row, err := settleSucceededOn(ctx, s.pool, c, p, op, got, call, s.now())
		if err != nil && !isNoRows(err) {
			s.callNotRecorded(ctx, p, call, err)
			return Outcome{}, internalf("settle %s: %w", op.Kind, err)
		}
		if err == nil {
			written := row.Payment
			written.normalize()
			settled := op
			settled.Status, settled.ProviderRef, settled.UpdatedAt = row.OperationStatus, row.OperationProviderRef, row.OperationUpdatedAt
			return operationOutcome(settled, written)
		}
		// No row: the call is recorded all the same. Either the operation
		// was settled meanwhile, or the payment moved since p was read.
		call = nil
		rows, _ := s.pool.Query(ctx, selectOperationSQL, NamedArgs{"tenant_id": op.TenantID, "operation_id": op.ID})
		current, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[operation])
		if err != nil {
			return Outcome{}, internalf("reload %s: %w", op.Kind, err)
		}
		if current.Status != "pending" {
			return s.operationResult(ctx, current)
		}
		if try == settleTries {
			return Outcome{}, internalf("settle %s %s: the payment kept moving", op.Kind, op.ID)
		}
		if p, err = s.readPayment(ctx, p.TenantID, p.ID); err != nil {
			return Outcome{}, internalf("settle %s: reload payment: %w", op.Kind, err)
		}
	}
}

// settleSucceededOn runs settleOperationSQL once on q (the pool, or a
// transaction that holds the payment's row lock: applying a provider
// webhook, inbound.go), with the payment's next state decided from p
// (settledState). pgx.ErrNoRows: the operation was settled meanwhile, or
// the payment is no longer p.
func settleSucceededOn(ctx context.Context, q querier, c *Claim, p Payment, op operation, got opSettled, call *providerCall,
	now time.Time) (settledOperationRow, error) {
	to, captured, refunded := settledState(op.Kind, p, op.AmountMinor, op.Final)
	args := NamedArgs{
		"tenant_id": op.TenantID, "operation_id": op.ID, "payment_id": p.ID, "refund_ref": nullIfEmpty(got.refundID),
		"from_status": p.Status, "captured_from": p.CapturedMinor, "refunded_from": p.RefundedMinor,
		"to_status": to, "captured_minor": captured, "refunded_minor": refunded, "now": now,
		"amount_to": nil, "capture_before_to": nil, "max_capturable_to": nil}
	if op.Kind == opIncrement {
		// The hold's new total, deadline and overcapture maximum as the
		// provider reports them (an answer that lacks one keeps ours).
		args["amount_to"] = max(op.AmountMinor, got.hold.AmountMinor)
		if !got.hold.CaptureBefore.IsZero() {
			args["capture_before_to"] = got.hold.CaptureBefore.UTC()
		}
		if granted(p.Overcapture) && got.hold.Flex.MaxCapturableMinor > 0 {
			args["max_capturable_to"] = got.hold.Flex.MaxCapturableMinor
		}
	}
	rows, _ := q.Query(ctx, settleOperationSQL, withCall(call, withClaim(c, args)))
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[settledOperationRow])
}

// reloadOperation reads a settled operation and answers with it.
func (s *Service) reloadOperation(ctx context.Context, op operation) (Outcome, error) {
	rows, _ := s.pool.Query(ctx, selectOperationSQL, NamedArgs{"tenant_id": op.TenantID, "operation_id": op.ID})
	op, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[operation])
	if err != nil {
		return Outcome{}, internalf("reload %s: %w", op.Kind, err)
	}
	return s.operationResult(ctx, op)
}

// operationResult is the answer to a settled operation's request: the
// payment (and the refund), or the business error it failed with.
func (s *Service) operationResult(ctx context.Context, op operation) (Outcome, error) {
	p, err := s.readPayment(ctx, op.TenantID, op.PaymentID)
	if err != nil {
		return Outcome{}, internalf("reload payment: %w", err)
	}
	return operationOutcome(op, p)
}

// operationOutcome is operationResult for an operation and its payment
// as read.
func operationOutcome(op operation, p Payment) (Outcome, error) {
	out := Outcome{Payment: p, Pending: op.Status == "pending"}
	if op.Kind == opRefund {
		r := op.object(p.Currency)
		out.Refund = &r
	}
	if op.Status == "failed" {
		code := ""
		if op.FailureCode != nil {
			code = *op.FailureCode
		}
		switch {
		case op.Kind == opIncrement:
			return out, incrementRefusal(code)
		}
		switch code {
		case providers.CodeAmountTooLarge:
			return out, &Error{Code: CodeAmountExceedsAuthorized, Param: "amount_minor", Message: "the provider refused the amount"}
		case providers.CodeHoldExpired:
			return out, Errorf(CodePaymentStateConflict, "the hold expired before it could be captured")
		default:
			return out, Errorf(CodePaymentStateConflict, "the provider refused to %s the payment (%s)", op.Kind, code)
		}
	}
	return out, nil
}
