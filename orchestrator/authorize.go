package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/bojanz/currency"
	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// AuthorizeInput is a request to place a hold.
type AuthorizeInput struct {
	TenantID      int64
	Key           string
	Fingerprint   Fingerprint
	AmountMinor   int64
	Currency      string
	Provider      string
	PaymentMethod string
	Description   string
	Metadata      map[string]string
	// OnExpiry: what to do with the hold shortly before it lapses
	// (SweepHolds, hold.go); "" means none.
	OnExpiry OnExpiry
	// ExtendedAuthorization asks the provider for its longest hold, where
	// it has one (Stripe: request_extended_authorization=if_available).
	ExtendedAuthorization bool
	// ReturnURL is where the provider sends the shopper back after an
	// authentication challenge; "" means no shopper is there, and a
	// payment that needs authentication fails (authentication.go).
	ReturnURL string
	// RequestIncrementalAuthorization, RequestMulticapture and
	// RequestOvercapture ask for a flexible hold (flexhold.go).
	RequestIncrementalAuthorization, RequestMulticapture, RequestOvercapture bool
}

// The operations of the idempotency protocol: route templates, which scope
// idempotency keys and forwarded provider keys.
const (
	OpAuthorize = "POST /v1/payments"
	OpCapture   = "POST /v1/payments/{id}/capture"
	OpCancel    = "POST /v1/payments/{id}/cancel"
	OpRefund    = "POST /v1/payments/{id}/refunds"
)

// Limits on payment fields (Stripe's, where it has one).
const (
	MaxAmountMinor      = 99_999_999_999
	maxDescriptionLen   = 1000
	maxMetadataKeys     = 50
	maxMetadataKeyLen   = 40
	maxMetadataValueLen = 500
	// DefaultPaymentMethod is used when a request names none.
	DefaultPaymentMethod = "pm_card_visa"
)

// ValidateCurrency checks an ISO 4217 alpha-3 code against the real list
// and returns its exponent (digits of the minor unit).
func ValidateCurrency(code string) (int, error) {
	if len(code) != 3 || code[0] < 'A' || code[0] > 'Z' || code[1] < 'A' || code[1] > 'Z' || code[2] < 'A' || code[2] > 'Z' {
		return 0, ParamError("currency", "currency must be an upper-case ISO 4217 code such as EUR")
	}
	d, ok := currency.GetDigits(code)
	if !ok || !currency.IsValid(code) {
		return 0, ParamError("currency", "%s is not an ISO 4217 currency", code)
	}
	return int(d), nil
}

// ValidateMetadata checks metadata (of a payment, a payment method) with
// Stripe's limits. Errors: validation_failed on metadata.
func ValidateMetadata(md map[string]string) error {
	if len(md) > maxMetadataKeys {
		return ParamError("metadata", "metadata has more than %d keys", maxMetadataKeys)
	}
	for k, v := range md {
		if !ValidText(k) || !ValidText(v) {
			return ParamError("metadata", "metadata keys and values must be UTF-8 text without NUL characters")
		}
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKeyLen || utf8.RuneCountInString(v) > maxMetadataValueLen {
			return ParamError("metadata", "metadata keys must be 1 to %d characters and values at most %d", maxMetadataKeyLen, maxMetadataValueLen)
		}
	}
	return nil
}

// Validate checks the input before anything is claimed or written, and
// fills in defaults. Errors: validation_failed naming the field.
func (in *AuthorizeInput) Validate(s *Service) error {
	if in.AmountMinor <= 0 || in.AmountMinor > MaxAmountMinor {
		return ParamError("amount_minor", "amount_minor must be a whole number from 1 to %d (minor units)", int64(MaxAmountMinor))
	}
	if _, err := ValidateCurrency(in.Currency); err != nil {
		return err
	}
	if in.PaymentMethod == "" {
		in.PaymentMethod = DefaultPaymentMethod
	}
	// Provider stays empty unless the request names one: a named
	// connector pins the payment to it; otherwise routing decides
	// (routeFor), among connectors whose adapter takes the method.
	if in.Provider != "" {
		if _, ok := s.providers[in.Provider]; !ok {
			return ParamError("provider", "provider %q is not configured", in.Provider)
		}
		if s.connectors[in.Provider].Disabled {
			return ParamError("provider", "provider %q is disabled", in.Provider)
		}
		if err := s.checkPaymentMethod(in.Provider, in.PaymentMethod); err != nil {
			return err
		}
		if err := s.checkFlexSupport(in.Provider, *in); err != nil {
			return err
		}
	} else if err := s.paymentMethodAccepted(in.PaymentMethod); err != nil {
		return err
	}
	if !ValidText(in.Description) {
		return ParamError("description", "description must be UTF-8 text without NUL characters")
	}
	if utf8.RuneCountInString(in.Description) > maxDescriptionLen {
		return ParamError("description", "description is longer than %d characters", maxDescriptionLen)
	}
	if err := ValidateMetadata(in.Metadata); err != nil {
		return err
	}
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	if in.OnExpiry == "" {
		in.OnExpiry = OnExpiryNone
	}
	if !in.OnExpiry.Known() {
		return ParamError("on_expiry", "on_expiry must be capture, cancel or none")
	}
	if in.ReturnURL != "" {
		return ValidateReturnURL(in.ReturnURL, s.loopbackReturn)
	}
	return nil
}

// Outcome is the result of a money movement: the payment as it stands and,
// for refunds, the refund. Pending means the provider's answer is not known
// yet (SPEC: 202, not stored; a retry with the same key resumes it).
type Outcome struct {
	Payment Payment
	Refund  *Operation
	Pending bool
}

// Authorize places a hold (SPEC: POST /v1/payments). The payment row is
// created first (id deterministic in tenant and key), then the provider is
// called with no transaction open, then the answer is recorded. A retry
// resumes where the last attempt stopped; after the key expired, the same
// body finds the same payment and another body is idempotency_key_reused.
// Errors: validation_failed, idempotency_key_reused, payment_declined (with
// the failed payment in the Outcome), provider_unavailable, internal.
func (s *Service) Authorize(ctx context.Context, c *Claim, in AuthorizeInput) (Outcome, error) {
	if err := in.Validate(s); err != nil {
		return Outcome{}, err
	}
	use, err := s.vaultedCard(ctx, in.TenantID, in.PaymentMethod)
	if err != nil {
		return Outcome{}, err
	}
	card := use.summary()
	version, route, why, err := s.routeFor(ctx, in, card)
	if err != nil {
		return Outcome{}, err
	}
	id := PaymentID(in.TenantID, in.Key)
	first := s.firstConnector(route, why)
	// One statement (createPaymentSQL), so one round trip and one
	// transaction. When the payment exists already (a resumed request, or
	// a purged key), nothing is written and it is read instead.
	rows, _ := s.pool.Query(ctx, createPaymentSQL, withClaim(c, NamedArgs{
		"tenant_id": in.TenantID, "payment_id": id, "key": in.Key,
		"request_hash": in.Fingerprint.Hash, "field_hashes": in.Fingerprint.Fields,
		"amount_minor": in.AmountMinor, "currency": in.Currency, "provider": first,
		"payment_method": in.PaymentMethod, "description": in.Description, "metadata": in.Metadata,
		"routing_version": version, "route": route, "forwarded_key": AttemptKey(in.TenantID, in.Key, 1), "routing": why,
		"on_expiry": in.OnExpiry, "extended_authorization": in.ExtendedAuthorization, "card": card,
		"return_url": nullIfEmpty(in.ReturnURL), "now": s.now(),
		"incremental_authorization": flexRequested(in.RequestIncrementalAuthorization),
		"multicapture":              flexRequested(in.RequestMulticapture),
		"overcapture":               flexRequested(in.RequestOvercapture),
	}))
	p, err := pgx.CollectExactlyOneRow(rows, scanPaymentRow)
	created := err == nil
	if isNoRows(err) && c != nil {
		// Not created: it exists, or the claim is gone.
		if held, err := s.claimHeld(ctx, c); err != nil || !held {
			if err != nil {
				return Outcome{}, internalf("create payment: %w", err)
			}
			return Outcome{}, errClaimLost()
		}
	}
	if isNoRows(err) {
		rows, _ = s.pool.Query(ctx, selectPaymentSQL, NamedArgs{"tenant_id": in.TenantID, "payment_id": id})
		p, err = pgx.CollectExactlyOneRow(rows, scanPaymentRow)
	}
	if err != nil {
		return Outcome{}, internalf("create payment: %w", err)
	}
	if string(p.RequestHash) != string(in.Fingerprint.Hash) {
		// The key's record is gone (expired and purged) but the payment
		// keeps the first request's fingerprint.
		return Outcome{}, reusedError(p.FieldHashes, in.Fingerprint.Fields)
	}
	if p.Status != StatusPending {
		return authorizeResult(p.Payment)
	}
	if !created {
		// Resumed: an earlier execution got as far as creating it, perhaps
		// further (resolvePayment picks up from where it stopped).
		return s.resolvePayment(ctx, c, p.Payment, true)
	}
	// createPaymentSQL counted this first call of the first attempt.
	return s.authorizeAtProvider(ctx, c, p.Payment, true, true, use)
}

// The pgbench script of the hot path (testdata/bench/authorize_hot_path.sql)
// is generated from the statements of a new authorization, and checked
// against them by TestHotPathScript.
//go:generate go test -run ^TestHotPathScript$ -update-hot-path .

// createPaymentSQL writes a new pending payment, its first attempt (its
// first provider call counted: the caller makes it next), its first event
// and the key's recovery point, or nothing when the payment exists (then
// it returns no row).
//
// The statements of the money path are written out whole, each next to
// the function that runs it, so that each reads on its own: some text
// repeats from one to the next (the payment's columns, the CTE that moves
// the key's recovery point, the row of a provider call). Their arguments
// are named (NamedArgs: a name missing or left over is an
// error), and their rows are read by column name.
const createPaymentSQL = `
	WITH p AS (
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor,
			currency, provider, payment_method, description, metadata, created_at, updated_at,
			routing_version, route, attempt, on_expiry, extended_authorization, card, return_url,
			incremental_authorization, multicapture, overcapture)
		SELECT @tenant_id, @payment_id, @key, @request_hash, @field_hashes, 'pending', @amount_minor,
			@currency, @provider, @payment_method, @description, @metadata, @now, @now,
			@routing_version, @route, 1, @on_expiry, @extended_authorization, @card, @return_url,
			@incremental_authorization, @multicapture, @overcapture
		-- Only while the request's claim is there (its commit may not have
		-- waited for its flush: claimOrReadSQL).
		WHERE @claim_token::uuid IS NULL OR EXISTS (SELECT 1 FROM idempotency_keys k
			WHERE k.tenant_id = @claim_tenant_id AND k.operation = @claim_operation AND k.key = @claim_key
				AND k.lock_token = @claim_token::uuid)
		ON CONFLICT (tenant_id, id) DO NOTHING
		RETURNING ` + paymentColumns + `
	), attempt AS (
		INSERT INTO payment_attempts (tenant_id, payment_id, attempt, connector, forwarded_key, dispatched, started_at,
			routing)
		SELECT tenant_id, id, 1, provider, @forwarded_key, 1, @now, @routing FROM p
	), event AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, from_status, to_status, detail, created_at)
		SELECT tenant_id, id, 'state_changed', NULL, 'pending', jsonb_build_object('idempotency_key', idempotency_key), @now
		FROM p
	), checkpoint AS (
		UPDATE idempotency_keys k SET recovery_point = 'payment_created', payment_id = coalesce(k.payment_id, p.id),
			updated_at = @now
		FROM p
		WHERE k.tenant_id = @claim_tenant_id AND k.operation = @claim_operation AND k.key = @claim_key
			AND k.lock_token = @claim_token::uuid
	)
	SELECT ` + paymentColumns + `
	FROM p`

// authorizeResult maps a settled payment to the answer of its authorize
// request: a failed payment is payment_declined.
func authorizeResult(p Payment) (Outcome, error) {
	if p.Status == StatusFailed {
		code := ""
		if p.FailureCode != nil {
			code = *p.FailureCode
		}
		return Outcome{Payment: p}, &Error{Code: CodePaymentDeclined, Message: "the payment was declined: " + code}
	}
	return Outcome{Payment: p, Pending: p.Status == StatusPending}, nil
}

// saveReferenceSQL saves the provider's reference of a hold as soon as
// the provider gives it, before the hold is confirmed, and commits without
// waiting for its WAL flush: set_config(…, true) is SET LOCAL
// synchronous_commit = off, for this statement's transaction only (the
// InitPlan runs before the row is written, the commit comes after).
//
// Why losing this write is safe: the intent (the pending payment and its
// attempt's forwarded key) was committed durably by createPaymentSQL
// before the provider was called, and the settlement that answers the
// client is a synchronous commit, whose flush covers this one too (WAL is
// flushed in order). So the reference can only be lost together with
// everything after it, in a crash before the client got an answer. The
// payment is then pending without a reference, and whoever resumes it (a
// retry with the same key, or the resolver: resolvePayment) authorizes
// again under the same forwarded key, which the provider deduplicates:
// it answers with the hold it created, reference included, and no second
// hold is placed. Reconciliation matches a hold whose reference we never
// stored by our payment id (linkByPaymentIDSQL). The reference saves one
// flush wait per authorization; TestLostReferenceWrite crashes PostgreSQL
// right after it and checks that.
const saveReferenceSQL = `
	UPDATE payments SET provider_ref = @provider_ref
	WHERE tenant_id = @tenant_id AND id = @payment_id AND attempt = @attempt AND provider_ref IS NULL
		AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'`

// authorizeAtProvider authorizes pending payment p at the connector of
// its current attempt with that attempt's key, fails over to the next
// connector of its route while that is safe (failover.go), and records the
// answer. counted says the call about to be made is counted already (by
// the statement that started the attempt); otherwise it is counted first
// (dispatch). Used by requests (byRequest) and the resolver, which never
// fails over: it settles an unknown outcome where the money may be.
//
// use is the card of a vaulted method when the request decrypted it
// already; nil: it is decrypted at the first call that needs it.
func (s *Service) authorizeAtProvider(ctx context.Context, c *Claim, p Payment, counted, byRequest bool,
	use *cardUse) (Outcome, error) {
	if use == nil {
		use = &cardUse{}
	}
	for {
		if s.providers[p.Provider] == nil {
			return Outcome{}, internalf("payment %s names unconfigured provider %q", p.ID, p.Provider)
		}
		if !counted {
			ok, err := s.dispatch(ctx, p)
			if err != nil {
				return Outcome{}, err
			}
			if !ok {
				// Settled, or moved to another attempt, meanwhile.
				return s.resumeMoved(ctx, c, p, byRequest)
			}
		}
		hold, call, callErr := s.callAuthorize(ctx, &p, use)
		next, reason, ok := s.failOverCandidate(byRequest, p, hold, callErr)
		if !ok {
			return s.settleAuthorize(ctx, c, p, hold, callErr, &call, use.cvcSent)
		}
		moved, advanced, err := s.failOver(ctx, p, &call, hold, callErr, next, reason)
		if err != nil {
			return Outcome{}, err
		}
		if !advanced {
			// The call is recorded; answer from it as if p's route ended
			// here.
			return s.settleAuthorize(ctx, c, p, hold, callErr, nil, use.cvcSent)
		}
		p, counted = moved, true // failOverSQL counted the next call
	}
}

// resumeMoved continues a request or resolver pass whose payment p was
// settled or moved to another attempt by another execution: from the
// payment as it is now.
func (s *Service) resumeMoved(ctx context.Context, c *Claim, p Payment, byRequest bool) (Outcome, error) {
	cur, err := s.readPayment(ctx, p.TenantID, p.ID)
	if err != nil {
		return Outcome{}, internalf("read payment %s: %w", p.ID, err)
	}
	if cur.Status != StatusPending || cur.Attempt == p.Attempt {
		return authorizeResult(cur)
	}
	return s.resolvePayment(ctx, c, cur, byRequest)
}

// callAuthorize makes one authorization call for p's current attempt: at
// its connector, with its key. The reference the connector gives before
// its answer is saved at once (saveReferenceSQL) and set on the returned
// hold, and on p, when the answer lacks it.
func (s *Service) callAuthorize(ctx context.Context, p *Payment, use *cardUse) (providers.Hold, providerCall, error) {
	prov := s.providers[p.Provider] // configured: authorizeAtProvider checked
	fwd := attemptKey(*p)
	var saved string // the reference OnReference wrote
	req := providers.AuthorizeRequest{
		Key: fwd, PaymentID: p.ID, TenantID: p.TenantID, AmountMinor: p.AmountMinor, Currency: p.Currency,
		PaymentMethod: p.PaymentMethod, Description: p.Description, ExtendedAuthorization: p.ExtendedAuthorization,
		RequestThreeDS:                  p.RequestThreeDS,
		RequestIncrementalAuthorization: asked(p.IncrementalAuthorization),
		RequestMulticapture:             asked(p.Multicapture),
		RequestOvercapture:              asked(p.Overcapture),
		OnReference: func(ctx context.Context, ref string) error {
			tag, err := s.pool.Exec(ctx, saveReferenceSQL, NamedArgs{
				"tenant_id": p.TenantID, "payment_id": p.ID, "attempt": p.Attempt, "provider_ref": ref})
			if err == nil && tag.RowsAffected() == 1 {
				saved = ref
			}
			return err
		},
	}
	if p.ReturnURL != nil {
		req.ReturnURL = *p.ReturnURL
	}
	var hold providers.Hold
	call, err := s.runProviderCall(ctx, *p, "authorize", fwd, func(ctx context.Context) (err error) {
		// A vaulted card is decrypted for this call only, and every
		// attempt's adapter gets the same card: whichever connector runs
		// the attempt can charge it. Failing over cannot charge it twice:
		// the next attempt starts only when this one certainly moved no
		// money (failover.go).
		if IsVaulted(p.PaymentMethod) {
			card, rerr := s.revealCard(ctx, *p, use)
			if rerr != nil {
				return rerr
			}
			req.Card = card
			use.cvcSent = use.cvcSent || card.CVC != ""
			// What an adapter's error quotes of the request must not keep
			// the card (it goes to logs, spans and the payment's history).
			defer func() { err = providers.ScrubError(err, card) }()
		}
		hold, err = prov.Authorize(ctx, req)
		return err
	})
	if saved != "" {
		p.ProviderRef = &saved
		if hold.Ref == "" {
			hold.Ref = saved
		}
	}
	return hold, call, err
}

// settleAuthorizeCTEs are what settling an authorization writes, shared
// by settleAuthorizeSQL and settleCompleteSQL: the payment (p, empty when
// it was settled meanwhile); its attempt; the provider call that settled
// it (when @call_operation is not NULL) and the state change, in that
// order, in its history.
const settleAuthorizeCTEs = `
	WITH p AS (
		UPDATE payments SET status = @status, provider_ref = coalesce(@provider_ref, provider_ref),
			capture_before = @capture_before, failure_code = @failure_code,
			next_action_url = coalesce(@next_action_url, next_action_url), action_expires_at = @action_expires_at,
			incremental_authorization = coalesce(@incremental_authorization, incremental_authorization),
			multicapture = coalesce(@multicapture, multicapture), overcapture = coalesce(@overcapture, overcapture),
			max_capturable_minor = @max_capturable_minor, max_amount_minor = @max_amount_minor,
			updated_at = @now
		WHERE tenant_id = @tenant_id AND id = @payment_id AND status = 'pending' AND attempt = @attempt
		RETURNING ` + paymentColumns + `
	), attempt AS (
		UPDATE payment_attempts a SET outcome = @attempt_outcome, code = @failure_code,
			provider_ref = coalesce(@provider_ref, a.provider_ref),
			latency_ms = coalesce(@call_latency_ms::double precision, a.latency_ms), ended_at = @now
		FROM p
		WHERE a.tenant_id = p.tenant_id AND a.payment_id = p.id AND a.attempt = p.attempt
	), events AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms,
			from_status, to_status, detail, created_at)
		SELECT @tenant_id, @payment_id, 'provider_call', @call_operation::text, @call_forwarded_key::text,
			@call_outcome::text, @call_latency_ms::double precision, NULL::text, NULL::text, @call_detail::jsonb,
			@call_at::timestamptz
		WHERE @call_operation::text IS NOT NULL
		UNION ALL
		SELECT tenant_id, id, 'state_changed', NULL, NULL, NULL, NULL, 'pending', status, @detail::jsonb, @now
		FROM p
`

// settleAuthorizeSQL settles a pending payment in one statement
// (settleAuthorizeCTEs) and moves the key's recovery point. The call is
// recorded even when the payment was settled meanwhile (then p is empty
// and the statement returns no row).
const settleAuthorizeSQL = settleAuthorizeCTEs + `
	), checkpoint AS (
		UPDATE idempotency_keys k SET recovery_point = 'provider_settled', payment_id = coalesce(k.payment_id, p.id),
			updated_at = @now
		FROM p
		WHERE k.tenant_id = @claim_tenant_id AND k.operation = @claim_operation AND k.key = @claim_key
			AND k.lock_token = @claim_token::uuid
	)
	SELECT ` + paymentColumns + `, false AS completed
	FROM p`

// settleCompleteSQL is settleAuthorizeSQL that completes the key with
// its stored answer (@response_status, @response_headers,
// @response_body) and releases its lease, instead of moving its recovery
// point: one statement and one commit fewer on the hot path. completed
// says whether the key was completed (its lease still held).
const settleCompleteSQL = settleAuthorizeCTEs + `
	), complete AS (
		UPDATE idempotency_keys k SET status = 'completed', response_status = @response_status,
			response_headers = @response_headers, response_body = @response_body, payment_id = p.id,
			recovery_point = 'finished', lock_token = NULL, locked_until = NULL, updated_at = @now
		FROM p
		WHERE k.tenant_id = @claim_tenant_id AND k.operation = @claim_operation AND k.key = @claim_key
			AND k.lock_token = @claim_token::uuid
		RETURNING 1
	)
	SELECT ` + paymentColumns + `,
		EXISTS (SELECT 1 FROM complete) AS completed
	FROM p`

// settledRow is a row of settleAuthorizeSQL and settleCompleteSQL.
type settledRow struct {
	paymentRow
	Completed bool `db:"completed"`
}

// settleAuthorize records a provider's answer to an authorization of a
// pending payment. call is the provider call that gave the answer, still
// to be recorded in the payment's history, or nil when it is recorded
// already. cvcSent says a call of this authorization sent (or may have
// sent) a vaulted card's CVC, which must then be erased.
func (s *Service) settleAuthorize(ctx context.Context, c *Claim, p Payment, hold providers.Hold, callErr error,
	call *providerCall, cvcSent bool) (Outcome, error) {
	to, failure, ok := settledBy(hold, callErr)
	if !ok {
		s.recordAttemptCall(ctx, p, call, hold, callErr)
		return s.stillPending(ctx, p, hold, callErr)
	}
	// Times are kept to the microsecond, as PostgreSQL keeps them, so the
	// payment written is the payment predicted here.
	now := s.now().Truncate(time.Microsecond).UTC()
	settled := s.settledPayment(p, hold, to, failure, now)
	detail := map[string]any{}
	if failure != nil {
		detail["failure_code"] = *failure
	}
	args := withCall(call, withClaim(c, NamedArgs{
		"tenant_id": p.TenantID, "payment_id": p.ID, "attempt": p.Attempt, "status": to, "provider_ref": nullIfEmpty(hold.Ref),
		"capture_before": settled.CaptureBefore, "failure_code": failure, "now": now, "detail": detail,
		"next_action_url": nullIfEmpty(hold.NextActionURL), "action_expires_at": settled.ActionExpiresAt,
		"incremental_authorization": settled.IncrementalAuthorization, "multicapture": settled.Multicapture,
		"overcapture": settled.Overcapture, "max_capturable_minor": settled.MaxCapturableMinor,
		"max_amount_minor": settled.MaxAmountMinor,
		"attempt_outcome":  attemptOutcome(hold, callErr),
	}))
	q := settleAuthorizeSQL
	// A request's answer is decided from the settled payment as predicted,
	// and stored by the same statement.
	var stored *StoredResponse
	if c != nil {
		out, err := authorizeResult(settled)
		if res, final, err := c.Answer(p.ID, out, err); err == nil && final {
			stored = &res
			q = settleCompleteSQL
			args["response_status"], args["response_headers"], args["response_body"] = res.Status, res.Header, res.Body
		}
	}
	rows, _ := s.pool.Query(ctx, q, args)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[settledRow])
	out := row.Payment
	out.normalize()
	if err == nil {
		// This execution settled it: the one to apply the card rules, and
		// to count the answer its statement wrote to the attempt.
		s.afterVaultedAuthorization(ctx, out, cvcSent)
		s.learnAnswer(p, attemptOutcome(hold, callErr))
	}
	if isNoRows(err) {
		// Settled meanwhile by another execution or the resolver (the call
		// is recorded all the same).
		out, err = s.readPayment(ctx, p.TenantID, p.ID)
	}
	if err != nil {
		s.callNotRecorded(ctx, p, call, err)
		return Outcome{}, internalf("settle authorization: %w", err)
	}
	if row.Completed {
		if err := s.checkStored(ctx, c, stored, settled, out); err != nil {
			return Outcome{}, err
		}
	}
	return authorizeResult(out)
}

// settledPayment is pending payment p as settleAuthorizeSQL leaves it
// when hold settles it in state to, with failure, at now.
func (s *Service) settledPayment(p Payment, hold providers.Hold, to Status, failure *string, now time.Time) Payment {
	settled := p
	settled.Status, settled.FailureCode, settled.UpdatedAt = to, failure, now
	if hold.Ref != "" {
		settled.ProviderRef = &hold.Ref
	}
	settled.CaptureBefore, settled.ActionExpiresAt = nil, nil
	if !hold.CaptureBefore.IsZero() && to == StatusAuthorized {
		t := hold.CaptureBefore.Truncate(time.Microsecond).UTC()
		settled.CaptureBefore = &t
	}
	if to == StatusAuthorized {
		settled.grantFlex(hold.Flex)
	}
	if to == StatusRequiresAction {
		// A challenge: the shopper has until then (authentication.go).
		t := now.Add(s.actionTimeout)
		settled.ActionExpiresAt = &t
		if hold.NextActionURL != "" {
			settled.NextActionURL = &hold.NextActionURL
		}
	}
	settled.normalize()
	return settled
}

// settledBy is the state a provider's answer to an authorization settles
// the pending payment in: authorized, or failed with the decline code.
// ok is false when the answer leaves the payment pending (stillPending).
func settledBy(hold providers.Hold, callErr error) (to Status, failure *string, ok bool) {
	switch kind := providers.KindOf(callErr); {
	case callErr == nil && hold.Status == providers.StatusAuthorized:
		return StatusAuthorized, nil, true
	case callErr == nil && hold.Status == providers.StatusRequiresAction:
		// A challenge: the request is answered with it (authentication.go).
		// One with no page to send the shopper to (a Stripe next action
		// other than a redirect) has no next_action: it ends by webhook
		// or lookup, or is abandoned.
		return StatusRequiresAction, nil, true
	case callErr == nil && hold.Status == providers.StatusDeclined:
		code := hold.DeclineCode
		return StatusFailed, &code, true
	case (kind == providers.KindDeclined || kind == providers.KindRejected) &&
		providers.CodeOf(callErr) != providers.CodeIdempotencyMismatch:
		code := providers.CodeOf(callErr)
		return StatusFailed, &code, true
	}
	return "", nil, false
}

// stillPending is the answer to an authorization whose provider answer
// left payment p pending (settledBy).
func (s *Service) stillPending(ctx context.Context, p Payment, hold providers.Hold, callErr error) (Outcome, error) {
	switch kind := providers.KindOf(callErr); {
	case callErr == nil:
		s.logger.WarnContext(ctx, "provider answered authorize with an unexpected status; payment stays pending",
			"payment_id", p.ID, "provider_status", hold.Status)
		return Outcome{Payment: p, Pending: true}, nil
	case kind == providers.KindDeclined || kind == providers.KindRejected: // it refused the forwarded key
		return Outcome{}, internalf("provider refused forwarded key of %s: %w", p.ID, callErr)
	case kind == providers.KindNotExecuted:
		return Outcome{Payment: p}, &Error{Code: CodeProviderUnavailable, RetryAfter: time.Second, Err: callErr,
			Message: "the payment provider did not take the request; retry with the same Idempotency-Key"}
	}
	// An unknown outcome: keep pending, settle later with the same key.
	return Outcome{Payment: p, Pending: true}, nil
}

// checkStored makes sure the answer a settling statement stored was
// decided from the payment it wrote: predicted is what it was decided
// from, written what the statement returned. They are equal unless the
// pending payment changed under the lease (another writer, a trigger);
// then the stored answer is replaced, by compare-and-swap on the stored
// body, with the answer of the payment as written.
func (s *Service) checkStored(ctx context.Context, c *Claim, stored *StoredResponse, predicted, written Payment) error {
	a, errA := json.Marshal(predicted)
	b, errB := json.Marshal(written)
	if errA == nil && errB == nil && bytes.Equal(a, b) {
		c.completed = stored
		s.completed(c, *stored)
		return nil
	}
	// The log names the fields that differ, not their values (which may
	// be the merchant's customer data).
	var pa, pb map[string]json.RawMessage
	_ = json.Unmarshal(a, &pa)
	_ = json.Unmarshal(b, &pb)
	var fields []string
	for k, v := range pb {
		if !bytes.Equal(pa[k], v) {
			fields = append(fields, k)
		}
	}
	slices.Sort(fields)
	s.logger.ErrorContext(ctx, "stored response was rendered from a payment that differs from the one written; storing it again",
		"payment_id", written.ID, "fields", fields)
	out, outErr := authorizeResult(written)
	res, final, err := c.Answer(written.ID, out, outErr)
	if err != nil || !final {
		return internalf("payment %s: settled answer not storable: %v", written.ID, err)
	}
	const q = `
		UPDATE idempotency_keys SET response_status = @response_status, response_headers = @response_headers,
			response_body = @response_body
		WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope
			AND status = 'completed' AND response_body = @stored_body`
	tag, err := s.pool.Exec(ctx, q, NamedArgs{"tenant_id": c.TenantID, "scope": c.Scope, "operation": c.Operation, "key": c.Key,
		"response_status": res.Status, "response_headers": res.Header, "response_body": res.Body, "stored_body": stored.Body})
	if err != nil || tag.RowsAffected() != 1 {
		return internalf("restore stored response of %s: %v (%d rows)", written.ID, err, tag.RowsAffected())
	}
	c.completed = &res
	s.completed(c, res)
	return nil
}
