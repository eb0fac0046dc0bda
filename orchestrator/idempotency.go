package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// IdempotencyRequest is one keyed POST, as the protocol sees it.
type IdempotencyRequest struct {
	TenantID int64
	// Scope narrows the key within the tenant to whoever may replay it:
	// Principal.IdempotencyScope, "" for a tenant's keys and the API key's
	// id for staff (tenant 0), who must have one.
	Scope string
	// Operation is the route template, e.g. "POST /v1/payments/{id}/capture".
	Operation   string
	Key         string
	Fingerprint Fingerprint
	// RequestID names the request in the problem document of a final
	// refusal stored for the key (Claim.Answer), so support can find its
	// logs.
	RequestID string
}

// StoredResponse is a final response kept for byte-identical replays.
type StoredResponse struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header"`
	Body   []byte            `json:"-"`
}

// Claim is the lease on one idempotency key held by the request executing
// it. Every write made under it is conditional on its token, so a request
// whose lease was taken over cannot complete the key.
type Claim struct {
	TenantID  int64
	Scope     string
	Operation string
	Key       string
	token     string
	fp        Fingerprint
	// Takeover is set when this claim took over the expired lease of a
	// crashed (or stuck) owner.
	Takeover bool
	// Resumed is set when an earlier execution released the key after an
	// unknown outcome and this claim picks it up.
	Resumed bool
	// RecoveryPoint is the last step the key's executions recorded.
	RecoveryPoint string
	ExpiresAt     time.Time
	// RequestID is the IdempotencyRequest's.
	RequestID string
	// completed is the answer the request's final write stored.
	completed *StoredResponse
}

// Completed returns the answer stored with the request's final write (the
// statement that settles an authorization stores its Answer too, one
// write instead of two), or nil when the key is still to be completed
// (CompleteIdempotent) or released.
func (c *Claim) Completed() *StoredResponse { return c.completed }

// Begin is the result of BeginIdempotent: exactly one of Claim (execute the
// request) and Replay (send the stored response) is set when err is nil.
type Begin struct {
	Claim  *Claim
	Replay *StoredResponse
	// ExpiresAt is the key's expiry, known whenever the key exists (also
	// with idempotency_key_reused and idempotency_key_in_use).
	ExpiresAt time.Time
}

// IdempotencyScope is the scope p's idempotency keys live in within its
// tenant: "" for a merchant, so every API key of a tenant shares the
// tenant's keys (a key rotated mid-retry still gets its answer), and the
// API key's id for staff, who have no tenant (tenant 0): one staff key never
// replays another's stored answer, nor is refused for another's body.
func (p Principal) IdempotencyScope() string {
	if p.TenantID != 0 {
		return ""
	}
	return p.KeyID
}

// Idempotency-Key limits (SPEC: Idempotency protocol).
const (
	MaxIdempotencyKeyLen = 255
	// inUseRetryAfter is the Retry-After of idempotency_key_in_use: a
	// healthy owner finishes in well under a second.
	inUseRetryAfter = time.Second
)

// ValidateIdempotencyKey checks an Idempotency-Key header value. Errors:
// idempotency_key_missing (present is false), idempotency_key_invalid.
func ValidateIdempotencyKey(key string, present bool) error {
	if !present {
		return &Error{Code: CodeIdempotencyKeyMissing, Param: "Idempotency-Key",
			Message: "the Idempotency-Key header is required on every POST"}
	}
	if key == "" || len(key) > MaxIdempotencyKeyLen {
		return &Error{Code: CodeIdempotencyKeyInvalid, Param: "Idempotency-Key",
			Message: "Idempotency-Key must be 1 to 255 characters"}
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return &Error{Code: CodeIdempotencyKeyInvalid, Param: "Idempotency-Key",
				Message: "Idempotency-Key must be printable ASCII"}
		}
	}
	return nil
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = (b[6] & 0x0f) | 0x40 // a version 4 UUID, for the uuid column
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// keyRow is a row of claimOrReadSQL: whether the key was claimed and, if
// not, its stored state.
type keyRow struct {
	Claimed         bool              `db:"claimed"`
	RequestHash     []byte            `db:"request_hash"`
	FieldHashes     map[string]string `db:"field_hashes"`
	Status          string            `db:"status"`
	LockToken       *string           `db:"lock_token"`
	LockedUntil     *time.Time        `db:"locked_until"`
	RecoveryPoint   string            `db:"recovery_point"`
	ResponseStatus  *int              `db:"response_status"`
	ResponseHeaders map[string]string `db:"response_headers"`
	ResponseBody    []byte            `db:"response_body"`
	ExpiresAt       time.Time         `db:"expires_at"`
}

// claimOrReadSQL claims a new key or, when the key exists, reads it, in
// one round trip: the INSERT's conflict makes ins empty and the second
// branch reads the row as the statement's snapshot saw it. A key
// committed by another request after that snapshot was taken (its insert
// conflicted but the read cannot see it) gives no row at all.
//
// @synchronous_commit is the claim's commit mode: NULL for the server's
// own, or off (asyncClaim) for an authorization, whose claim then commits without
// waiting for its WAL flush. Why that is safe: nothing moves before the
// pending payment is created, by a synchronous commit whose flush covers
// the claim's too (WAL is flushed in order), and createPaymentSQL creates
// it only while the claim is there with this request's token. A claim
// lost in a crash of PostgreSQL before that was flushed is simply gone:
// the request, whose next statement finds no claim, fails without having
// created anything or called the provider (errClaimLost), and the client's
// retry claims the key anew. TestLostClaim crashes PostgreSQL right after
// a claim and checks that. One flush wait fewer per authorization.
const claimOrReadSQL = `
	WITH ins AS (
		INSERT INTO idempotency_keys (tenant_id, scope, operation, key, request_hash, field_hashes,
			status, lock_token, locked_until, created_at, updated_at, expires_at)
		SELECT @tenant_id, @scope, @operation, @key, @request_hash, @field_hashes,
			'in_progress', @token, @locked_until, @now, @now, @expires_at
		WHERE (SELECT set_config('synchronous_commit',
			coalesce(@synchronous_commit::text, current_setting('synchronous_commit')), true)) IS NOT NULL
		ON CONFLICT (tenant_id, operation, key, scope) DO NOTHING
		RETURNING expires_at
	)
	SELECT true AS claimed, NULL::bytea AS request_hash, NULL::jsonb AS field_hashes, ''::text AS status,
		NULL::text AS lock_token, NULL::timestamptz AS locked_until, 'started'::text AS recovery_point,
		NULL::int AS response_status, NULL::jsonb AS response_headers, NULL::bytea AS response_body, expires_at
	FROM ins
	UNION ALL
	SELECT false, request_hash, field_hashes, status, lock_token::text, locked_until, recovery_point,
		response_status, response_headers, response_body, expires_at
	FROM idempotency_keys
	WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope
		AND NOT EXISTS (SELECT 1 FROM ins)`

// renewKeySQL starts an expired key (not yet purged) over under a new
// lease, by compare-and-swap on the lease token read.
const renewKeySQL = `
	UPDATE idempotency_keys SET request_hash = @request_hash, field_hashes = @field_hashes, status = 'in_progress',
		lock_token = @token, locked_until = @locked_until, recovery_point = 'started', takeovers = 0,
		payment_id = NULL, response_status = NULL, response_headers = NULL, response_body = NULL,
		created_at = @now, updated_at = @now, expires_at = @expires_at
	WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope AND expires_at <= @now
		AND lock_token IS NOT DISTINCT FROM @read_token::uuid
	RETURNING expires_at`

// takeOverKeySQL takes a released or expired lease over, by
// compare-and-swap on the lease token read.
const takeOverKeySQL = `
	UPDATE idempotency_keys SET lock_token = @token, locked_until = @locked_until, updated_at = @now,
		takeovers = takeovers + CASE WHEN @takeover THEN 1 ELSE 0 END
	WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope
		AND status = 'in_progress' AND lock_token IS NOT DISTINCT FROM @read_token::uuid
		AND (locked_until IS NULL OR locked_until <= @now)`

// BeginIdempotent claims req's key or says why not (SPEC: Idempotency
// protocol): a new key is claimed under the primary key; a completed one
// with the same fingerprint is replayed; another fingerprint is
// idempotency_key_reused naming the differing fields; a live lease is
// idempotency_key_in_use with RetryAfter; an expired or released lease is
// taken over by compare-and-swap, by exactly one request. A statement that
// may have claimed the key but whose answer was lost (its connection died)
// has its claim given up again before the error returns, so the retry does
// not wait out a lease nobody holds.
func (s *Service) BeginIdempotent(ctx context.Context, req IdempotencyRequest) (Begin, error) {
	if (req.TenantID == 0) != (req.Scope != "") {
		return Begin{}, internalf("idempotency key of tenant %d with scope %q: staff keys (tenant 0) need a scope, tenant keys have none",
			req.TenantID, req.Scope)
	}
	if e, ok := s.replays.get(req.replayKey(), s.now()); ok {
		if e.requestHash != string(req.Fingerprint.Hash) {
			return Begin{ExpiresAt: e.expiresAt}, reusedError(e.fieldHashes, req.Fingerprint.Fields)
		}
		return Begin{ExpiresAt: e.expiresAt, Replay: e.response}, nil
	}
	for attempt := 0; attempt < 5; attempt++ {
		b, err := s.beginOnce(ctx, req)
		if !errors.Is(err, errReadAgain) {
			return b, err
		}
	}
	return Begin{}, errKeyInUse()
}

// errReadAgain says the key changed between reading and writing it (a
// claim committed after the statement's snapshot, a renewal or takeover
// won by another request): read it again.
var errReadAgain = errors.New("idempotency key changed under the claim: read it again")

// errKeyInUse is idempotency_key_in_use.
func errKeyInUse() *Error {
	return &Error{Code: CodeIdempotencyKeyInUse, RetryAfter: inUseRetryAfter,
		Message: "a request with this Idempotency-Key is still executing; retry after Retry-After seconds"}
}

// beginOnce is one attempt of BeginIdempotent: claim the key or read it
// (claimOrRead), then decide from the key as read: renew it (expired),
// refuse a different request, replay the stored answer, refuse while
// another request holds the lease, or take the lease over. Errors:
// errReadAgain, and BeginIdempotent's.
func (s *Service) beginOnce(ctx context.Context, req IdempotencyRequest) (Begin, error) {
	now, token := s.now(), newToken()
	k, err := s.claimOrRead(ctx, req, token, now)
	switch {
	case isNoRows(err):
		return Begin{}, errReadAgain // inserted by another request after our snapshot
	case err != nil:
		return Begin{}, s.lostClaim(ctx, req, token, err, internalf("claim idempotency key: %w", err))
	case k.Claimed:
		return Begin{ExpiresAt: k.ExpiresAt, Claim: req.claim(token, k.ExpiresAt)}, nil
	case !k.ExpiresAt.After(now) && (k.LockedUntil == nil || !k.LockedUntil.After(now)):
		// Expired but not yet purged: the key starts over. The payment
		// itself is found again by its deterministic id.
		return s.renewKey(ctx, req, k, token, now)
	case string(k.RequestHash) != string(req.Fingerprint.Hash):
		return Begin{ExpiresAt: k.ExpiresAt}, reusedError(k.FieldHashes, req.Fingerprint.Fields)
	case k.Status == "completed":
		if err := s.replicated(ctx); err != nil {
			return Begin{}, err
		}
		r := &StoredResponse{Status: *k.ResponseStatus, Header: k.ResponseHeaders, Body: k.ResponseBody}
		s.replays.put(req.replayKey(), &replayEntry{requestHash: string(k.RequestHash), fieldHashes: k.FieldHashes,
			response: r, expiresAt: k.ExpiresAt})
		return Begin{ExpiresAt: k.ExpiresAt, Replay: r}, nil
	case k.LockedUntil != nil && k.LockedUntil.After(now):
		return Begin{ExpiresAt: k.ExpiresAt}, errKeyInUse()
	}
	return s.takeOverKey(ctx, req, k, token, now)
}

// claimOrRead claims req's key under a new lease (token), or reads it
// when it exists (claimOrReadSQL). No row (pgx.ErrNoRows): read again.
func (s *Service) claimOrRead(ctx context.Context, req IdempotencyRequest, token string, now time.Time) (keyRow, error) {
	fields, _ := json.Marshal(req.Fingerprint.Fields)
	var mode *string // the server's
	if asyncClaim[req.Operation] {
		mode = new("off")
	}
	rows, _ := s.pool.Query(ctx, claimOrReadSQL, req.keyArgs(NamedArgs{
		"request_hash": req.Fingerprint.Hash, "field_hashes": fields, "token": token,
		"locked_until": now.Add(s.lease), "now": now, "expires_at": now.Add(s.keyTTL), "synchronous_commit": mode}))
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[keyRow])
}

// asyncClaim lists the operations whose new claims commit without a flush
// wait (claimOrReadSQL says why that is safe): those whose next write
// happens only while the claim, with its token, is there: an
// authorization's createPaymentSQL; a capture's, cancel's or refund's
// recordOperation, which reads the claim under the payment's lock before
// it records anything (readForOperation). Other keyed requests (webhook
// endpoints, redeliveries, reconciliation runs) write without looking.
var asyncClaim = map[string]bool{OpAuthorize: true, OpCapture: true, OpCancel: true, OpRefund: true}

// errClaimLost: the request's claim is gone (lost in a crash of
// PostgreSQL before its WAL was flushed, or taken over after its lease
// ran out): it stops before anything is created or sent. Not final: the
// key is free for the retry.
func errClaimLost() *Error {
	return &Error{Code: CodeUnavailable, RetryAfter: time.Second,
		Message: "this request's claim on its Idempotency-Key was lost (the database restarted); retry with the same key"}
}

// claimHeldSQL says whether a claim's lease is still its own (its token on
// its key).
const claimHeldSQL = `SELECT EXISTS (SELECT 1 FROM idempotency_keys
	WHERE tenant_id = @claim_tenant_id AND operation = @claim_operation AND key = @claim_key
		AND lock_token = @claim_token::uuid)`

// claimHeld reports whether c's lease is still c's.
func (s *Service) claimHeld(ctx context.Context, c *Claim) (bool, error) {
	var held bool
	err := s.pool.QueryRow(ctx, claimHeldSQL, withClaim(c, NamedArgs{})).Scan(&held)
	return held, err
}

// renewKey starts expired key k over for req under a new lease (token).
// Errors: errReadAgain (another request renewed it first), internal.
func (s *Service) renewKey(ctx context.Context, req IdempotencyRequest, k keyRow, token string, now time.Time) (Begin, error) {
	fields, _ := json.Marshal(req.Fingerprint.Fields)
	var exp time.Time
	err := s.pool.QueryRow(ctx, renewKeySQL, req.keyArgs(NamedArgs{
		"request_hash": req.Fingerprint.Hash, "field_hashes": fields, "token": token,
		"locked_until": now.Add(s.lease), "now": now, "expires_at": now.Add(s.keyTTL),
		"read_token": k.LockToken})).Scan(&exp)
	if isNoRows(err) {
		return Begin{}, errReadAgain
	}
	if err != nil {
		return Begin{}, s.lostClaim(ctx, req, token, err, internalf("renew idempotency key: %w", err))
	}
	return Begin{ExpiresAt: exp, Claim: req.claim(token, exp)}, nil
}

// takeOverKey takes the lease of key k over for req (token): released
// (an unknown outcome) or expired (a crashed owner), by compare-and-swap
// on the token read, so exactly one taker wins. Errors: errReadAgain
// (another request took it first), internal.
func (s *Service) takeOverKey(ctx context.Context, req IdempotencyRequest, k keyRow, token string, now time.Time) (Begin, error) {
	takeover := k.LockedUntil != nil
	tag, err := s.pool.Exec(ctx, takeOverKeySQL, req.keyArgs(NamedArgs{
		"token": token, "locked_until": now.Add(s.lease), "now": now, "read_token": k.LockToken, "takeover": takeover}))
	if err != nil {
		return Begin{}, s.lostClaim(ctx, req, token, err, internalf("take over idempotency key: %w", err))
	}
	if tag.RowsAffected() == 0 {
		return Begin{}, errReadAgain // most likely to find it in use
	}
	if takeover {
		s.tel.takeovers.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", req.Operation)))
		s.logger.WarnContext(ctx, "idempotency lease taken over from an expired owner",
			"operation", req.Operation, "recovery_point", k.RecoveryPoint)
	}
	c := req.claim(token, k.ExpiresAt)
	c.Takeover, c.Resumed, c.RecoveryPoint = takeover, !takeover, k.RecoveryPoint
	return Begin{ExpiresAt: k.ExpiresAt, Claim: c}, nil
}

// claim is the claim of req's key under lease token.
func (req IdempotencyRequest) claim(token string, expires time.Time) *Claim {
	return &Claim{TenantID: req.TenantID, Scope: req.Scope, Operation: req.Operation, Key: req.Key,
		token: token, fp: req.Fingerprint, RecoveryPoint: "started", ExpiresAt: expires, RequestID: req.RequestID}
}

// replayKey names req's key in the replay cache.
func (req IdempotencyRequest) replayKey() replayKey {
	return replayKey{req.TenantID, req.Scope, req.Operation, req.Key}
}

// keyArgs adds to args the named arguments that address req's key row:
// @tenant_id, @scope, @operation and @key.
func (req IdempotencyRequest) keyArgs(args NamedArgs) NamedArgs {
	args["tenant_id"], args["scope"], args["operation"], args["key"] = req.TenantID, req.Scope, req.Operation, req.Key
	return args
}

// lostClaim handles a claiming statement that failed with stmtErr: unless
// it surely did not commit, it may have committed and lost only its answer
// with its connection, leaving the key leased to token, which nobody
// holds. The lease is then given up again (on a live connection, see
// execKeyWrite) so the retry resumes at once rather than in a lease's
// time. It returns err.
func (s *Service) lostClaim(ctx context.Context, req IdempotencyRequest, token string, stmtErr, err error) error {
	if !commitUnknown(stmtErr) {
		return err
	}
	args := req.keyArgs(NamedArgs{"token": token, "now": s.now()})
	if _, rerr := s.execKeyWrite(ctx, releaseKeySQL, args); rerr != nil {
		s.logger.ErrorContext(ctx, "give up a claim whose answer was lost", "operation", req.Operation, "error", rerr)
	}
	return err
}

func reusedError(stored, presented map[string]string) *Error {
	fields := DifferingFields(stored, presented)
	msg := "this Idempotency-Key was used with a different request"
	if len(fields) > 0 {
		msg += "; fields that differ: "
		for i, f := range fields {
			if i > 0 {
				msg += ", "
			}
			msg += f
		}
	}
	return &Error{Code: CodeIdempotencyKeyReused, Param: "Idempotency-Key", Fields: fields, Message: msg}
}

// ErrLeaseLost is returned by CompleteIdempotent when another request took
// the key over meanwhile (its lease ran out, as when the database stalled
// through a failover). The response computed is not the stored one, and
// may differ from it (the payment may have moved on before the other
// request stores its answer), so it must not be sent: AnswerAfterLeaseLost
// says what to answer instead.
var ErrLeaseLost = errors.New("idempotency lease lost to another request")

// storedAnswerSQL reads a key's stored answer, if it has one.
const storedAnswerSQL = `
	SELECT response_status, response_headers, response_body FROM idempotency_keys
	WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope
		AND status = 'completed'`

// AnswerAfterLeaseLost is what a request whose lease was taken over
// answers (ErrLeaseLost): the answer stored under its key by the request
// that took it over, which every replay gives too, or, while there is none
// yet, idempotency_key_in_use, so that the client retries and gets the
// stored answer. A client is never sent an answer the key does not hold.
func (s *Service) AnswerAfterLeaseLost(ctx context.Context, c *Claim) (StoredResponse, error) {
	var status *int
	var header map[string]string
	var body []byte
	err := s.pool.QueryRow(ctx, storedAnswerSQL, c.keyArgs(NamedArgs{})).Scan(&status, &header, &body)
	switch {
	case isNoRows(err):
		return StoredResponse{}, errKeyInUse()
	case err != nil:
		return StoredResponse{}, internalf("read the stored answer: %w", err)
	case status == nil:
		return StoredResponse{}, errKeyInUse()
	}
	if err := s.replicated(ctx); err != nil {
		return StoredResponse{}, err
	}
	return StoredResponse{Status: *status, Header: header, Body: body}, nil
}

// replicatedBarrierSQL makes sure what was read before it is on a
// synchronous standby (migration 00016); a no-op unless
// payorch.require_sync_standby is on.
const replicatedBarrierSQL = `SELECT payorch_replicated_barrier()`

// replicated runs replicatedBarrierSQL in a transaction of its own before
// an answer read from the database is given: with
// PAYORCH_REQUIRE_SYNC_STANDBY, an answer a primary committed but a
// standby may lack (it crashed and restarted before the standby had it)
// is not given until the standby has it, and not at all by a primary
// without a synchronous standby (503, AsUnavailable).
func (s *Service) replicated(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, replicatedBarrierSQL); err != nil {
		return internalf("wait for the answer's replication: %w", err)
	}
	return nil
}

// CompleteIdempotent stores the final response of claim's request and
// marks the key completed. The write outlives ctx's cancellation and a
// lost connection (execKeyWrite); should it still fail, the key is released
// (ReleaseIdempotent) so the retry resumes at once. Errors: ErrLeaseLost,
// internal.
func (s *Service) CompleteIdempotent(ctx context.Context, c *Claim, paymentID string, res StoredResponse) error {
	const q = `
		UPDATE idempotency_keys SET status = 'completed', response_status = @response_status,
			response_headers = @response_headers, response_body = @response_body,
			payment_id = nullif(@payment_id, ''), recovery_point = 'finished',
			lock_token = NULL, locked_until = NULL, updated_at = @now
		WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope
			AND lock_token = @token::uuid`
	tag, err := s.execKeyWrite(ctx, q, c.keyArgs(NamedArgs{"response_status": res.Status,
		"response_headers": res.Header, "response_body": res.Body, "payment_id": paymentID, "now": s.now()}))
	if err != nil {
		if rerr := s.ReleaseIdempotent(ctx, c); rerr != nil {
			s.logger.ErrorContext(ctx, "release idempotency key", "operation", c.Operation, "error", rerr)
		}
		return internalf("complete idempotency key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	s.completed(c, res)
	return nil
}

// completed notes that c's key now holds res.
func (s *Service) completed(c *Claim, res StoredResponse) {
	s.replays.put(replayKey{c.TenantID, c.Scope, c.Operation, c.Key}, &replayEntry{requestHash: string(c.fp.Hash),
		fieldHashes: c.fp.Fields, response: &res, expiresAt: c.ExpiresAt})
}

// ReleaseIdempotent gives claim's lease up without storing a response (5xx
// and unknown outcomes), so the next retry resumes at once. It outlives
// ctx's cancellation and a lost connection (execKeyWrite).
func (s *Service) ReleaseIdempotent(ctx context.Context, c *Claim) error {
	if _, err := s.execKeyWrite(ctx, releaseKeySQL, c.keyArgs(NamedArgs{"now": s.now()})); err != nil {
		return internalf("release idempotency key: %w", err)
	}
	return nil
}

// releaseKeySQL gives up the lease of token on a key, keeping the token
// (the next claim takes the key over by compare-and-swap on it).
const releaseKeySQL = `
	UPDATE idempotency_keys SET locked_until = NULL, updated_at = @now
	WHERE tenant_id = @tenant_id AND operation = @operation AND key = @key AND scope = @scope
		AND lock_token = @token::uuid`

// keyArgs adds to args the named arguments that address c's key row and
// its lease: @tenant_id, @scope, @operation, @key and @token.
func (c *Claim) keyArgs(args NamedArgs) NamedArgs {
	args["tenant_id"], args["scope"], args["operation"], args["key"] = c.TenantID, c.Scope, c.Operation, c.Key
	args["token"] = c.token
	return args
}

// commitUnknown reports whether a single statement that failed with err
// may still have committed: its connection broke after it was sent and
// before its answer came. Not when nothing was sent (pgconn.SafeToRetry),
// nor when the server answered with an error (the statement rolled back).
func commitUnknown(err error) bool {
	var pgErr *pgconn.PgError
	return !pgconn.SafeToRetry(err) && !errors.As(err, &pgErr)
}

// brokenConn reports whether err may be the connection's fault rather
// than the statement's, so the statement is worth running again on
// another: anything but an error the server raised for the statement
// (FATAL ones, such as 57P01 for a terminated backend, end the
// connection and count as its fault).
func brokenConn(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) || pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC"
}

// Writes that free or complete a key run detached from the request, a
// few times, each on a connection that just answered.
const (
	// keyWriteTries is how many times execKeyWrite tries.
	keyWriteTries = 3
	// keyWriteBackoff is the wait before the second try, doubled before
	// each later one.
	keyWriteBackoff = 100 * time.Millisecond
	// keyWriteTimeout bounds execKeyWrite as a whole.
	keyWriteTimeout = 5 * time.Second
)

// execKeyWrite runs one statement that frees or completes a key's lease,
// which must not be lost with the connection that served the request:
// left undone, every retry of the key is idempotency_key_in_use until the
// lease runs out. It runs detached from ctx's cancellation (a client that
// went away or an execution that timed out must still free its key),
// within keyWriteTimeout, up to keyWriteTries times, each on a connection
// that has just answered a ping: a backend terminated under a request
// (57P01, a failover) seldom dies alone, and the pool would hand out its
// idle siblings, dead too, without checking them. Only failures that may
// be the connection's are tried again (brokenConn); the statements are
// conditional on the lease token, so running one again is harmless.
func (s *Service) execKeyWrite(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyWriteTimeout)
	defer cancel()
	var err error
	for try := range keyWriteTries {
		if try > 0 {
			t := time.NewTimer(keyWriteBackoff << (try - 1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return pgconn.CommandTag{}, errors.Join(err, ctx.Err())
			}
		}
		var tag pgconn.CommandTag
		if tag, err = s.execOnLiveConn(ctx, sql, args...); err == nil || !brokenConn(err) {
			return tag, err
		}
	}
	return pgconn.CommandTag{}, err
}

// execOnLiveConn runs sql on a pooled connection that answers a ping. A
// dead one fails its ping, is closed by the failure and destroyed on
// release; after as many as the pool holds, the pool opens a new one.
func (s *Service) execOnLiveConn(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	for range s.pool.Stat().MaxConns() + 1 {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		if err := conn.Ping(ctx); err != nil {
			conn.Release()
			if ctx.Err() != nil {
				return pgconn.CommandTag{}, err
			}
			continue
		}
		tag, err := conn.Exec(ctx, sql, args...)
		conn.Release()
		return tag, err
	}
	return pgconn.CommandTag{}, errors.New("no database connection answered")
}

// checkpoint records the step claim's request reached, in tx (so it lands
// with the business write it describes). A nil claim (the resolver) records
// nothing.
func checkpoint(ctx context.Context, tx pgx.Tx, c *Claim, point, paymentID string, now time.Time) error {
	if c == nil {
		return nil
	}
	const q = `
		UPDATE idempotency_keys SET recovery_point = @recovery_point,
			payment_id = coalesce(payment_id, nullif(@payment_id, '')), updated_at = @now
		WHERE tenant_id = @claim_tenant_id AND operation = @claim_operation AND key = @claim_key
			AND lock_token = @claim_token::uuid`
	_, err := tx.Exec(ctx, q, withClaim(c, NamedArgs{"recovery_point": point, "payment_id": paymentID, "now": now}))
	return err
}

// withClaim adds to args the named arguments by which a statement finds
// the key row of claim c and checks its lease: @claim_tenant_id,
// @claim_operation, @claim_key and @claim_token; all NULL for no claim
// (the resolver), which matches no key. Tenant, operation and key lead
// the statement to the row through the primary key (whose last column,
// scope, they need not name); the lease token names the row on its own.
func withClaim(c *Claim, args NamedArgs) NamedArgs {
	if c == nil {
		args["claim_tenant_id"], args["claim_operation"], args["claim_key"], args["claim_token"] = nil, nil, nil, nil
		return args
	}
	args["claim_tenant_id"], args["claim_operation"], args["claim_key"], args["claim_token"] = c.TenantID, c.Operation, c.Key, c.token
	return args
}

// PurgeExpiredKeys deletes up to batch expired keys whose lease is not
// held, and returns how many it deleted. Several instances may run it at
// once: rows another purge holds are skipped.
func (s *Service) PurgeExpiredKeys(ctx context.Context, batch int) (int, error) {
	const q = `
		DELETE FROM idempotency_keys k
		USING (
			SELECT tenant_id, operation, key, scope FROM idempotency_keys
			WHERE expires_at <= @now AND (locked_until IS NULL OR locked_until <= @now)
			ORDER BY expires_at
			LIMIT @batch
			FOR UPDATE SKIP LOCKED
		) x
		WHERE k.tenant_id = x.tenant_id AND k.operation = x.operation AND k.key = x.key AND k.scope = x.scope`
	tag, err := s.pool.Exec(ctx, q, NamedArgs{"now": s.now(), "batch": batch})
	if err != nil {
		return 0, internalf("purge idempotency keys: %w", err)
	}
	n := tag.RowsAffected()
	if n > 0 {
		s.tel.purged.Add(ctx, n)
	}
	return int(n), nil
}
