package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
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

var paymentMethodRE = regexp.MustCompile(`^pm_[A-Za-z0-9_]{1,100}$`)

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

// Validate checks the input before anything is claimed or written, and
// fills in defaults. Errors: validation_failed naming the field.
func (in *AuthorizeInput) Validate(s *Service) error {
	if in.AmountMinor <= 0 || in.AmountMinor > MaxAmountMinor {
		return ParamError("amount_minor", "amount_minor must be a whole number from 1 to %d (minor units)", int64(MaxAmountMinor))
	}
	if _, err := ValidateCurrency(in.Currency); err != nil {
		return err
	}
	if in.Provider == "" {
		in.Provider = s.defaultProvider
	}
	if _, ok := s.providers[in.Provider]; !ok {
		return ParamError("provider", "provider %q is not configured", in.Provider)
	}
	if in.PaymentMethod == "" {
		in.PaymentMethod = DefaultPaymentMethod
	}
	if !paymentMethodRE.MatchString(in.PaymentMethod) {
		return ParamError("payment_method", "payment_method must look like pm_card_visa")
	}
	if !ValidText(in.Description) {
		return ParamError("description", "description must be UTF-8 text without NUL characters")
	}
	if utf8.RuneCountInString(in.Description) > maxDescriptionLen {
		return ParamError("description", "description is longer than %d characters", maxDescriptionLen)
	}
	if len(in.Metadata) > maxMetadataKeys {
		return ParamError("metadata", "metadata has more than %d keys", maxMetadataKeys)
	}
	for k, v := range in.Metadata {
		if !ValidText(k) || !ValidText(v) {
			return ParamError("metadata", "metadata keys and values must be UTF-8 text without NUL characters")
		}
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKeyLen || utf8.RuneCountInString(v) > maxMetadataValueLen {
			return ParamError("metadata", "metadata keys must be 1 to %d characters and values at most %d", maxMetadataKeyLen, maxMetadataValueLen)
		}
	}
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	return nil
}

// Outcome is the result of a money movement: the payment as it stands and,
// for refunds, the refund. Pending means the provider's answer is not known
// yet (SPEC: 202, not stored; a retry with the same key resumes it).
type Outcome struct {
	Payment Payment
	Refund  *Refund
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
	id := PaymentID(in.TenantID, in.Key)
	// One statement (createPaymentSQL), so one round trip and one
	// transaction. When the payment exists already (a resumed request, or
	// a purged key), nothing is written and it is read instead.
	now := s.now()
	ck := claimArgs(c)
	rows, _ := s.pool.Query(ctx, createPaymentSQL, in.TenantID, id, in.Key, in.Fingerprint.Hash, in.Fingerprint.Fields, in.AmountMinor,
		in.Currency, in.Provider, in.PaymentMethod, in.Description, in.Metadata, now,
		ck.tenantID, ck.operation, ck.key, ck.token, "payment_created")
	p, err := pgx.CollectExactlyOneRow(rows, scanPayment)
	if isNoRows(err) {
		rows, _ = s.pool.Query(ctx, `SELECT `+paymentCols+` FROM payments WHERE tenant_id = $1 AND id = $2`, in.TenantID, id)
		p, err = pgx.CollectExactlyOneRow(rows, scanPayment)
	}
	if err != nil {
		return Outcome{}, internalf("create payment: %w", err)
	}
	if string(p.requestHash) != string(in.Fingerprint.Hash) {
		// The key's record is gone (expired and purged) but the payment
		// keeps the first request's fingerprint.
		return Outcome{}, reusedError(p.fieldHashes, in.Fingerprint.Fields)
	}
	if p.Status != StatusPending {
		return authorizeResult(p)
	}
	if p.ProviderRef != nil {
		// An earlier attempt got as far as the provider's reference: one
		// lookup settles it, and only a hold that was never confirmed is
		// authorized again. (Re-creating it could otherwise place a second
		// hold once the provider has forgotten the key, after 24h at Stripe.)
		return s.resolvePayment(ctx, c, p)
	}
	return s.authorizeAtProvider(ctx, c, p, providers.ForwardedKey(in.TenantID, OpAuthorize, in.Key))
}

// createPaymentSQL writes a new pending payment, its first event and the
// key's checkpoint, or nothing when the payment exists.
var createPaymentSQL = `
	WITH p AS (
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor,
			currency, provider, payment_method, description, metadata, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $10, $11, $12, $12)
		ON CONFLICT (tenant_id, id) DO NOTHING
		RETURNING ` + paymentCols + `
	), event AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, from_status, to_status, detail, created_at)
		SELECT tenant_id, id, 'state_changed', NULL, 'pending', jsonb_build_object('idempotency_key', idempotency_key), $12
		FROM p
	), ` + checkpointCTE(12, 13) + `
	SELECT ` + paymentCols + ` FROM p`

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

// authorizeAtProvider calls the provider for a pending payment with its
// forwarded key and records the answer. Used by requests and the resolver.
func (s *Service) authorizeAtProvider(ctx context.Context, c *Claim, p Payment, fwd string) (Outcome, error) {
	prov := s.providers[p.Provider]
	if prov == nil {
		return Outcome{}, internalf("payment %s names unconfigured provider %q", p.ID, p.Provider)
	}
	var saved string // the reference OnReference wrote
	req := providers.AuthorizeRequest{
		Key: fwd, PaymentID: p.ID, TenantID: p.TenantID, AmountMinor: p.AmountMinor, Currency: p.Currency,
		PaymentMethod: p.PaymentMethod, Description: p.Description,
		OnReference: func(ctx context.Context, ref string) error {
			const q = `UPDATE payments SET provider_ref = $3 WHERE tenant_id = $1 AND id = $2 AND provider_ref IS NULL`
			tag, err := s.pool.Exec(ctx, q, p.TenantID, p.ID, ref)
			if err == nil && tag.RowsAffected() == 1 {
				saved = ref
			}
			return err
		},
	}
	var hold providers.Hold
	call, err := s.runProviderCall(ctx, p, "authorize", fwd, func(ctx context.Context) error {
		var err error
		hold, err = prov.Authorize(ctx, req)
		return err
	})
	if saved != "" {
		p.ProviderRef = &saved
	}
	return s.settleAuthorize(ctx, c, p, hold, err, &call)
}

// settleAuthorizeSQL settles a pending payment: the payment, the provider
// call that settled it (when $8 is not NULL) and the state change, in that
// order in the history, and then the key, in one statement. The call is
// recorded even when the payment was settled meanwhile (p is empty). The
// last column says whether the key was completed.
var settleAuthorizeHead = `
	WITH p AS (
		UPDATE payments SET status = $3, provider_ref = coalesce($4, provider_ref), capture_before = $5,
			failure_code = $6, updated_at = $7
		WHERE tenant_id = $1 AND id = $2 AND status = 'pending'
		RETURNING ` + paymentCols + `
	), events AS (
		INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms,
			from_status, to_status, detail, created_at)
		` + providerCallRow(1, 2, 8) + `
		UNION ALL
		SELECT tenant_id, id, 'state_changed', NULL, NULL, NULL, NULL, 'pending', status, $14::jsonb, $7
		FROM p
	), `

var (
	// settleAuthorizeSQL moves the key's recovery point ($15 to $19).
	settleAuthorizeSQL = settleAuthorizeHead + checkpointCTE(7, 15) + `
	SELECT ` + paymentCols + `, false FROM p`
	// settleCompleteSQL completes the key ($15 to $18) with the response
	// rendered beforehand ($19 to $21).
	settleCompleteSQL = settleAuthorizeHead + `complete AS (
		UPDATE idempotency_keys k SET status = 'completed', response_status = $19, response_headers = $20,
			response_body = $21, payment_id = p.id, recovery_point = 'finished', lock_token = NULL,
			locked_until = NULL, updated_at = $7
		FROM p
		WHERE k.tenant_id = $15 AND k.operation = $16 AND k.key = $17 AND k.lock_token = $18::uuid
		RETURNING 1
	)
	SELECT ` + paymentCols + `, EXISTS (SELECT 1 FROM complete) FROM p`
)

// settleAuthorize records a provider's answer to an authorization of a
// pending payment. call is the provider call that gave the answer, still
// to be recorded in the payment's history, or nil when it is recorded
// already.
func (s *Service) settleAuthorize(ctx context.Context, c *Claim, p Payment, hold providers.Hold, callErr error, call *providerCall) (Outcome, error) {
	var to Status
	var failure *string
	switch kind := providers.KindOf(callErr); {
	case callErr == nil && hold.Status == providers.StatusAuthorized:
		to = StatusAuthorized
	case callErr == nil && hold.Status == providers.StatusDeclined:
		to = StatusFailed
		code := hold.DeclineCode
		failure = &code
	case callErr == nil:
		s.recordCall(ctx, p, call)
		s.logger.WarnContext(ctx, "provider answered authorize with an unexpected status; payment stays pending",
			"payment_id", p.ID, "provider_status", hold.Status)
		return Outcome{Payment: p, Pending: true}, nil
	case kind == providers.KindDeclined || kind == providers.KindRejected:
		if providers.CodeOf(callErr) == providers.CodeIdempotencyMismatch {
			s.recordCall(ctx, p, call)
			return Outcome{}, internalf("provider refused forwarded key of %s: %w", p.ID, callErr)
		}
		to = StatusFailed
		code := providers.CodeOf(callErr)
		failure = &code
	case kind == providers.KindNotExecuted:
		s.recordCall(ctx, p, call)
		return Outcome{Payment: p}, &Error{Code: CodeProviderUnavailable, RetryAfter: time.Second, Err: callErr,
			Message: "the payment provider did not take the request; retry with the same Idempotency-Key"}
	default: // unknown outcome: keep pending, settle later with the same key
		s.recordCall(ctx, p, call)
		return Outcome{Payment: p, Pending: true}, nil
	}

	// Times are kept to the microsecond, as PostgreSQL keeps them, so the
	// payment written is the payment predicted below.
	now := s.now().Truncate(time.Microsecond).UTC()
	settled := p
	settled.Status, settled.FailureCode, settled.UpdatedAt = to, failure, now
	if hold.Ref != "" {
		settled.ProviderRef = &hold.Ref
	}
	settled.CaptureBefore = nil
	if !hold.CaptureBefore.IsZero() {
		t := hold.CaptureBefore.Truncate(time.Microsecond).UTC()
		settled.CaptureBefore = &t
	}
	detail := map[string]any{}
	if failure != nil {
		detail["failure_code"] = *failure
	}
	args := append([]any{p.TenantID, p.ID, to, nullIfEmpty(hold.Ref), settled.CaptureBefore, failure, now},
		call.args()...)
	args = append(args, detail)
	ck := claimArgs(c)
	q := settleAuthorizeSQL
	// With a renderer, the answer to store is rendered from the settled
	// payment as predicted, and stored by the same statement.
	var stored *StoredResponse
	if c != nil && c.Render != nil {
		if res, ok := c.Render(authorizeResult(settled)); ok {
			stored = &res
			q = settleCompleteSQL
			args = append(args, ck.tenantID, ck.operation, ck.key, ck.token, res.Status, res.Header, res.Body)
		}
	}
	if stored == nil {
		args = append(args, ck.tenantID, ck.operation, ck.key, ck.token, "provider_settled")
	}
	var completed bool
	rows, _ := s.pool.Query(ctx, q, args...)
	out, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Payment, error) {
		return scanPaymentAnd(row, &completed)
	})
	if isNoRows(err) {
		// Settled meanwhile by another execution or the resolver (the call
		// is recorded all the same).
		rows, _ := s.pool.Query(ctx, `SELECT `+paymentCols+` FROM payments WHERE tenant_id = $1 AND id = $2`, p.TenantID, p.ID)
		out, err = pgx.CollectExactlyOneRow(rows, scanPayment)
	}
	if err != nil {
		s.callNotRecorded(ctx, p, call, err)
		return Outcome{}, internalf("settle authorization: %w", err)
	}
	if completed {
		if err := s.checkStored(ctx, c, stored, settled, out); err != nil {
			return Outcome{}, err
		}
	}
	return authorizeResult(out)
}

// checkStored makes sure the response a settling statement stored was
// rendered from the payment it wrote: predicted is what it was rendered
// from, written what the statement returned. They are equal unless the
// pending payment changed under the lease; then the stored response is
// replaced, by compare-and-swap on the stored body, with one rendered
// from the payment as written.
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
	res, ok := c.Render(authorizeResult(written))
	if !ok {
		return internalf("payment %s: settled answer not storable", written.ID)
	}
	const q = `
		UPDATE idempotency_keys SET response_status = $4, response_headers = $5, response_body = $6
		WHERE tenant_id = $1 AND operation = $2 AND key = $3 AND status = 'completed' AND response_body = $7`
	tag, err := s.pool.Exec(ctx, q, c.TenantID, c.Operation, c.Key, res.Status, res.Header, res.Body, stored.Body)
	if err != nil || tag.RowsAffected() != 1 {
		return internalf("restore stored response of %s: %v (%d rows)", written.ID, err, tag.RowsAffected())
	}
	c.completed = &res
	s.completed(c, res)
	return nil
}

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
	const q = `INSERT INTO payment_events (tenant_id, payment_id, type, operation, forwarded_key, outcome, latency_ms, detail, created_at)
		VALUES ($1, $2, 'provider_call', $3, $4, $5, $6, $7, $8)`
	if _, err := s.pool.Exec(ctx, q, p.TenantID, p.ID, pc.operation, pc.forwardedKey, pc.outcome, pc.latencyMS, pc.detail, pc.at); err != nil {
		s.logger.ErrorContext(ctx, "provider call not recorded", "payment_id", p.ID, "operation", pc.operation, "error", err)
	}
}

// providerCallRow is a SELECT of the payment_events row of a provider
// call, for a statement that records the call with what it settled: $tenant
// and $payment name the payment, $first to $first+5 are args' values. No
// row when there is no call to record.
func providerCallRow(tenant, payment, first int) string {
	return fmt.Sprintf(`SELECT $%[1]d, $%[2]d, 'provider_call', $%[3]d::text, $%[4]d::text, $%[5]d::text, $%[6]d::double precision,
			NULL::text, NULL::text, $%[7]d::jsonb, $%[8]d::timestamptz
		WHERE $%[3]d::text IS NOT NULL`, tenant, payment, first, first+1, first+2, first+3, first+4, first+5)
}

// args are the six parameters of providerCallRow, all NULL (no row) for
// a nil call.
func (pc *providerCall) args() []any {
	if pc == nil {
		return []any{nil, nil, nil, nil, nil, nil}
	}
	return []any{pc.operation, pc.forwardedKey, pc.outcome, pc.latencyMS, pc.detail, pc.at}
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
