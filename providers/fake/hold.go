package fake

import (
	"net/http"
	"strconv"
	"time"

	"github.com/payorch/payorch/providers"
)

// Stripe's test payment methods the fake understands, each with the decline
// code it produces ("" approves). The last three decline with the codes
// that say the issuer or the processor could not decide now, not that the
// card is bad (soft declines, after which payorch may try another
// connector: orchestrator.DefaultSoftDeclines).
var paymentMethods = map[string]string{
	"pm_card_visa":                            "",
	"pm_card_chargeDeclined":                  providers.CodeCardDeclined,
	"pm_card_chargeDeclinedInsufficientFunds": providers.CodeInsufficientFunds,
	"pm_card_chargeDeclinedProcessingError":   "processing_error",
	"pm_card_issuerUnavailable":               "issuer_not_available",
	"pm_card_tryAgainLater":                   "try_again_later",
	// Stripe's 3-D Secure test methods (threeDSMethods) approve once
	// authenticated.
	"pm_card_threeDSecure2Required":  "",
	"pm_card_threeDSecureOptional":   "",
	"pm_card_authenticationRequired": "",
	// The flexible-hold test methods (flexMethods) approve.
	"pm_card_flexUnavailable":   "",
	"pm_card_incrementDeclined": "",
}

// defaultPaymentMethod is used when a request names none.
const defaultPaymentMethod = "pm_card_visa"

// Metadata keys the Client sets and the report reads.
const (
	metaPaymentID = "payment_id"
	metaTenantID  = "tenant_id"
)

// hold is one authorized (or declined) hold and what happened to it.
type hold struct {
	ref           string
	paymentMethod string
	// card is what a hold charged to a card keeps of it (brand, last4),
	// cardDecline the decline code its number gives ("" approves), decided
	// when the hold is created: the number itself is never kept.
	card        *cardJSON
	cardDecline string
	// threeDS is how the issuer treats authentication (threeds.go), decided
	// when the hold is created (a card's number is not kept).
	threeDS threeDS
	// returnURL is where the cardholder goes back after a challenge;
	// requestThreeDS asks for one (request_three_d_secure).
	returnURL      string
	requestThreeDS bool
	// Set when the confirmation challenged the cardholder: its
	// idempotency key (carried by the completion's operation and event),
	// the token guarding the challenge page, the page's URL, and, once the
	// challenge is completed, authSucceeded or authFailed.
	confirmKey     string
	challengeToken string
	nextActionURL  string
	authResult     string
	description    string
	metadata       map[string]string
	status         providers.Status
	amount         int64
	captured       int64
	refunded       int64
	currency       string
	declineCode    string
	created        time.Time
	updated        time.Time
	captureBefore  time.Time
	// touched holds the creation and every change, for the report.
	touched []time.Time
	// expiryNotified: the hold.expired webhook of its lapse was sent
	// (webhooksend.go).
	expiryNotified bool
	// Flexible holds (flex.go): how the issuer treats them, what the
	// authorization asked for and, once authorized, was granted, the
	// most an increment may raise the hold to, the overcapture percent
	// of when it was granted, and the increments and captures made.
	flexRule       flexRule
	asked          flexAsk
	granted        flexAsk
	maxAmount      int64
	overcapturePct int
	parts          []Part
	// refunds are the hold's refunds, in the order they were made; keys
	// the scopes of the idempotency keys whose stored answers are of the
	// hold, packed with it (compact.go).
	refunds []refund
	keys    []string
}

// lapsed reports whether the hold is authorized but past capture_before at
// now: it then reads as expired, or, when part of it was captured
// (multicapture), as settled (the rest released).
func (h *hold) lapsed(now time.Time) bool {
	return h.status == providers.StatusAuthorized && !h.captureBefore.IsZero() && !now.Before(h.captureBefore)
}

// touch records a change at now. Every change of a hold's fields is
// touched: compaction counts on it to tell a hold that changed while it
// was being packed (compact.go).
func (h *hold) touch(now time.Time) {
	h.updated = now
	h.touched = append(h.touched, now)
}

// view is the hold as read at now, expiry applied.
func (h *hold) view(now time.Time) holdJSON {
	v := holdJSON{
		Object:        "hold",
		Ref:           h.ref,
		PaymentID:     h.metadata[metaPaymentID],
		Status:        h.status,
		AmountMinor:   h.amount,
		Currency:      h.currency,
		CapturedMinor: h.captured,
		RefundedMinor: h.refunded,
		PaymentMethod: h.paymentMethod,
		Card:          h.card,
		DeclineCode:   h.declineCode,
		Description:   h.description,
		Metadata:      h.metadata,
		CaptureBefore: h.captureBefore,
		Flex:          h.flexView(),
		CreatedAt:     h.created,
		UpdatedAt:     h.updated,
	}
	if h.status == providers.StatusRequiresAction {
		v.NextAction = &nextActionJSON{Type: "redirect_to_url", URL: h.nextActionURL, ReturnURL: h.returnURL}
	}
	if h.lapsed(now) {
		v.Status = providers.StatusExpired
		if h.captured > 0 {
			v.Status = h.settled()
		}
		if h.captureBefore.After(v.UpdatedAt) {
			v.UpdatedAt = h.captureBefore
		}
	}
	return v
}

// holdJSON is the wire form of a hold.
type holdJSON struct {
	Object        string            `json:"object"`
	Ref           string            `json:"ref"`
	PaymentID     string            `json:"payment_id,omitempty"`
	Status        providers.Status  `json:"status"`
	AmountMinor   int64             `json:"amount_minor"`
	Currency      string            `json:"currency"`
	CapturedMinor int64             `json:"captured_minor"`
	RefundedMinor int64             `json:"refunded_minor"`
	PaymentMethod string            `json:"payment_method,omitempty"`
	Card          *cardJSON         `json:"card,omitempty"`
	DeclineCode   string            `json:"decline_code,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	CaptureBefore time.Time         `json:"capture_before,omitzero"`
	// NextAction is the challenge waiting for the cardholder, while the
	// hold is requires_action.
	NextAction *nextActionJSON `json:"next_action,omitempty"`
	// Flex is what the hold was granted of the flexible-hold features it
	// asked for, once authorized.
	Flex      *flexJSON `json:"flex,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// hold converts the wire form to the seam's type.
func (v holdJSON) hold() providers.Hold {
	return providers.Hold{
		Ref:           v.Ref,
		PaymentID:     v.PaymentID,
		Status:        v.Status,
		AmountMinor:   v.AmountMinor,
		Currency:      v.Currency,
		CapturedMinor: v.CapturedMinor,
		RefundedMinor: v.RefundedMinor,
		CaptureBefore: v.CaptureBefore,
		DeclineCode:   v.DeclineCode,
		NextActionURL: v.nextActionURL(),
		Flex:          v.Flex.flex(),
		CreatedAt:     v.CreatedAt,
	}
}

// nextActionURL is the challenge page's URL of a hold waiting for its
// cardholder, else "".
func (v holdJSON) nextActionURL() string {
	if v.Status != providers.StatusRequiresAction || v.NextAction == nil {
		return ""
	}
	return v.NextAction.URL
}

// authorizeParams is the body of POST /v1/holds: a payment method, or a
// card in the clear.
type authorizeParams struct {
	AmountMinor   int64             `json:"amount_minor"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method,omitempty"`
	Card          *cardParams       `json:"card,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// ReturnURL is where the cardholder comes back to after a challenge;
	// without one nobody is there to authenticate.
	ReturnURL string `json:"return_url,omitempty"`
	// RequestThreeDS asks the issuer to challenge (Stripe's
	// request_three_d_secure=any); it needs a ReturnURL.
	RequestThreeDS bool `json:"request_three_d_secure,omitempty"`
	// The flexible-hold features asked for (flex.go).
	flexAsk
}

// fingerprinted is what the idempotency fingerprint covers: the
// parameters as they are, a card as its cardFingerprint (no number in the
// clear, no CVC).
func (p *authorizeParams) fingerprinted(key []byte) any {
	if p.Card == nil {
		return p
	}
	return struct {
		authorizeParams
		Card *cardFingerprint `json:"card"`
	}{*p, p.Card.fingerprinted(key)}
}

func (p *authorizeParams) validate() *apiError {
	if p.AmountMinor <= 0 {
		return invalid("amount_minor", "amount_minor must be a positive integer")
	}
	if !validCurrency(p.Currency) {
		return invalid("currency", "currency must be an ISO 4217 code in upper case, got %q", p.Currency)
	}
	if _, ok := paymentMethods[p.PaymentMethod]; p.PaymentMethod != "" && !ok {
		return invalid("payment_method", "no such payment method: %q", p.PaymentMethod)
	}
	if p.Card != nil {
		if p.PaymentMethod != "" {
			return invalid("card", "give a payment_method or a card, not both")
		}
		if e := p.Card.validate(); e != nil {
			return e
		}
	}
	if e := checkReturnURL(p.ReturnURL, p.RequestThreeDS); e != nil {
		return e
	}
	if len(p.Description) > 1000 {
		return invalid("description", "description is longer than 1000 characters")
	}
	if len(p.Metadata) > 50 {
		return invalid("metadata", "metadata has more than 50 keys")
	}
	for k, v := range p.Metadata {
		if k == "" || len(k) > 40 || len(v) > 500 {
			return invalid("metadata", "metadata keys are 1 to 40 characters, values at most 500")
		}
	}
	if t, ok := p.Metadata[metaTenantID]; ok {
		if _, err := strconv.ParseInt(t, 10, 64); err != nil {
			return invalid("metadata", "metadata tenant_id must be an integer, got %q", t)
		}
	}
	return nil
}

// validCurrency reports whether c looks like an upper-case ISO 4217 code.
func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// captureParams is the body of POST /v1/holds/{ref}/capture.
type captureParams struct {
	AmountMinor int64 `json:"amount_minor,omitempty"`
	// FinalCapture false, on a hold granted multicapture, leaves the rest
	// capturable (Stripe's final_capture); absent or true releases it.
	FinalCapture *bool `json:"final_capture,omitempty"`
}

// final reports whether the capture releases the rest of the hold.
func (p *captureParams) final() bool { return p.FinalCapture == nil || *p.FinalCapture }

func (p *captureParams) validate() *apiError {
	if p.AmountMinor < 0 {
		return invalid("amount_minor", "amount_minor must not be negative")
	}
	if !p.final() && p.AmountMinor == 0 {
		return invalid("amount_minor", "a capture with final_capture false needs a positive amount_minor")
	}
	return nil
}

// cancelParams is the (empty) body of POST /v1/holds/{ref}/cancel.
type cancelParams struct{}

func (p *cancelParams) validate() *apiError { return nil }

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var p authorizeParams
	s.serveWrite(w, r, OpCreate, &p, func(now time.Time) outcome { return s.create(now, &p) })
}

// confirmParams is the body of POST /v1/holds/{ref}/confirm: empty, or
// the 3-D Secure parameters, which replace those given at creation (as
// Stripe's confirm may set return_url). Either way they are part of the
// confirmation's idempotency fingerprint.
type confirmParams struct {
	ReturnURL      string `json:"return_url,omitempty"`
	RequestThreeDS bool   `json:"request_three_d_secure,omitempty"`
	// The flexible-hold features asked for, added to those the create
	// asked for.
	flexAsk
}

func (p *confirmParams) validate() *apiError { return checkReturnURL(p.ReturnURL, p.RequestThreeDS) }

func (s *Server) handleConfirm(w http.ResponseWriter, r *http.Request) {
	var p confirmParams
	ref, key, base := r.PathValue("ref"), r.Header.Get("Idempotency-Key"), s.publicBase(r)
	s.serveKeyed(w, r, OpAuthorize, &p, func(now time.Time, plan faultPlan) outcome {
		return s.confirm(now, ref, key, base, &p, plan)
	})
}

func (s *Server) handleCapture(w http.ResponseWriter, r *http.Request) {
	var p captureParams
	ref, key := r.PathValue("ref"), r.Header.Get("Idempotency-Key")
	s.serveWrite(w, r, OpCapture, &p, func(now time.Time) outcome { return s.capture(now, ref, key, &p) })
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	var p cancelParams
	ref := r.PathValue("ref")
	s.serveWrite(w, r, OpCancel, &p, func(now time.Time) outcome { return s.cancel(now, ref) })
}

// create records a hold awaiting confirmation: its reference exists before
// any money is held, so a caller can save it first (Stripe's create, then
// confirm). A card is checked here, and its outcome decided, because its
// number is not kept for the confirmation. Called with s.mu held.
func (s *Server) create(now time.Time, p *authorizeParams) outcome {
	pm := p.PaymentMethod
	if pm == "" && p.Card == nil {
		pm = defaultPaymentMethod
	}
	var card *cardJSON
	var cardDecline string
	tds, flex := threeDSMethods[pm], flexMethods[pm]
	if p.Card != nil {
		if e := p.Card.check(now); e != nil {
			return refused(Operation{}, e)
		}
		card, cardDecline = p.Card.shown(), p.Card.decline()
		tds, flex = threeDSCards[p.Card.Number], flexCards[p.Card.Number]
	}
	meta := make(map[string]string, len(p.Metadata))
	for k, v := range p.Metadata {
		meta[k] = v
	}
	h := &hold{
		ref:            newID("fh_"),
		paymentMethod:  pm,
		card:           card,
		cardDecline:    cardDecline,
		threeDS:        tds,
		flexRule:       flex,
		asked:          p.flexAsk,
		returnURL:      p.ReturnURL,
		requestThreeDS: p.RequestThreeDS,
		description:    p.Description,
		metadata:       meta,
		status:         providers.StatusRequiresConfirmation,
		amount:         p.AmountMinor,
		currency:       p.Currency,
		created:        now,
		updated:        now,
		touched:        []time.Time{now},
	}
	s.holds[h.ref] = h
	s.order = append(s.order, holdSlot{live: h})
	v := h.view(now)
	return outcome{status: http.StatusOK, body: v,
		op: Operation{Ref: h.ref, PaymentID: v.PaymentID, AmountMinor: h.amount, Outcome: OutcomeSucceeded}}
}

// confirm authorizes a created hold: places it, records the decline, or,
// when the issuer asks for the cardholder's authentication, makes it wait
// for the challenge at a page of the fake (base is its base URL, key the
// confirmation's idempotency key). Called with s.mu held.
func (s *Server) confirm(now time.Time, ref, key, base string, p *confirmParams, plan faultPlan) outcome {
	h := s.holdLocked(ref)
	op := Operation{Ref: ref}
	if h == nil {
		return refused(op, notFound("hold", ref))
	}
	op.PaymentID, op.AmountMinor = h.metadata[metaPaymentID], h.amount
	if h.status != providers.StatusRequiresConfirmation {
		return refused(op, rejected(providers.CodeStateConflict, "only a hold awaiting confirmation can be confirmed; this one is %s", h.view(now).Status))
	}
	if p.ReturnURL != "" {
		h.returnURL, h.requestThreeDS = p.ReturnURL, p.RequestThreeDS
	}
	h.asked = h.asked.or(p.flexAsk)
	code := paymentMethods[h.paymentMethod]
	if h.card != nil {
		code = h.cardDecline
	}
	if code == "" {
		// An armed decline_rate declines some of what the card lets
		// through; by payment, so that a run can be repeated.
		id := h.metadata[metaPaymentID]
		if id == "" {
			id = ref
		}
		code, _ = plan.declines(id)
	}
	challenge := false
	if code == "" {
		challenge, code = h.threeDS.decide(h.returnURL, h.requestThreeDS)
	}
	switch {
	case code != "":
		h.status, h.declineCode = providers.StatusDeclined, code
	case challenge:
		s.challengeLocked(h, base, key)
	default:
		h.status, h.captureBefore = providers.StatusAuthorized, now.Add(s.cfg.HoldLifetime)
		s.grantLocked(h)
	}
	h.touch(now)
	v := h.view(now)
	switch {
	case code != "":
		op.Outcome = code
		return outcome{err: declined(code, &v), op: op}
	case challenge:
		op.Outcome = OutcomeRequiresAction
	default:
		op.Outcome = OutcomeSucceeded
	}
	return outcome{status: http.StatusOK, body: v, op: op}
}

// capture captures all or part of an authorized hold. A final capture
// (the default) releases the rest; one with final_capture false, on a
// hold granted multicapture, leaves the hold authorized with the sum so
// far in captured_minor. Captures add up to at most the authorized
// amount, or with overcapture its maximum_amount_capturable. Each is a
// part of the hold (key its idempotency key) and a charge of its balance
// (money.go). Called with s.mu held.
func (s *Server) capture(now time.Time, ref, key string, p *captureParams) outcome {
	h := s.holdLocked(ref)
	op := Operation{Ref: ref, AmountMinor: p.AmountMinor}
	if h == nil {
		return refused(op, notFound("hold", ref))
	}
	op.PaymentID = h.metadata[metaPaymentID]
	if h.lapsed(now) {
		return refused(op, rejected(providers.CodeHoldExpired, "the hold expired at %s and can no longer be captured", h.captureBefore.Format(time.RFC3339)))
	}
	if h.status != providers.StatusAuthorized {
		return refused(op, rejected(providers.CodeStateConflict, "only an authorized hold can be captured; this one is %s", h.status))
	}
	if !p.final() && !h.granted.Multicapture {
		return refused(op, rejected(providers.CodeNotSupported, "final_capture false needs a hold granted multicapture; this one was not"))
	}
	amount := p.AmountMinor
	if amount == 0 { // what remains of the authorized amount
		amount = max(h.amount-h.captured, 0)
	}
	limit := h.capturable()
	switch {
	case amount > limit-h.captured && h.captured > 0:
		return refused(op, rejected(providers.CodeAmountTooLarge, "amount_minor %d and the %d captured so far are more than the %d that may be captured", amount, h.captured, limit))
	case amount > limit:
		return refused(op, rejected(providers.CodeAmountTooLarge, "amount_minor %d is more than the %d that may be captured", amount, limit))
	}
	h.captured += amount
	if amount > 0 {
		h.parts = append(h.parts, Part{Kind: providers.PartCapture, AmountMinor: amount, IdempotencyKey: key, CreatedAt: now})
		// Booked with the capture, under the same lock and key: a replay
		// of the key answers from the stored answer and books nothing.
		s.bookLocked(now, providers.BalanceCharge, h, h.ref, key, amount)
	}
	if p.final() || h.captured >= limit { // nothing left to capture
		h.status = h.settled()
	}
	h.touch(now)
	op.AmountMinor, op.Outcome = amount, OutcomeSucceeded
	return outcome{status: http.StatusOK, body: h.view(now), op: op}
}

// cancel voids an authorized hold, or ends a challenge nobody completed
// (requires_action: nothing was held, so nothing is released, and the
// challenge page then says it expired). A hold partly captured
// (multicapture) releases the rest and ends captured, as Stripe's
// PaymentIntent ends succeeded: the captures stand and stay refundable.
// Called with s.mu held.
func (s *Server) cancel(now time.Time, ref string) outcome {
	h := s.holdLocked(ref)
	op := Operation{Ref: ref}
	if h == nil {
		return refused(op, notFound("hold", ref))
	}
	op.PaymentID = h.metadata[metaPaymentID]
	waiting := h.status == providers.StatusRequiresAction
	if (h.status != providers.StatusAuthorized && !waiting) || h.lapsed(now) {
		return refused(op, rejected(providers.CodeStateConflict, "only an authorized hold or one waiting for authentication can be canceled; this one is %s", h.view(now).Status))
	}
	h.status = providers.StatusCanceled
	op.AmountMinor, op.Outcome = h.amount, OutcomeSucceeded
	switch {
	case waiting:
		op.AmountMinor = 0
	case h.captured > 0:
		h.status, op.AmountMinor = h.settled(), max(h.amount-h.captured, 0)
	}
	h.touch(now)
	return outcome{status: http.StatusOK, body: h.view(now), op: op}
}

// extendParams is the (empty) body of POST /v1/holds/{ref}/extend.
type extendParams struct{}

func (p *extendParams) validate() *apiError { return nil }

func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) {
	var p extendParams
	ref := r.PathValue("ref")
	s.serveWrite(w, r, OpExtend, &p, func(now time.Time) outcome { return s.extend(now, ref) })
}

// extend gives an authorized hold that has not lapsed a new deadline: a
// full HoldLifetime from now (a card network's re-authorization). Called
// with s.mu held.
func (s *Server) extend(now time.Time, ref string) outcome {
	h := s.holdLocked(ref)
	op := Operation{Ref: ref}
	if h == nil {
		return refused(op, notFound("hold", ref))
	}
	op.PaymentID = h.metadata[metaPaymentID]
	if h.lapsed(now) {
		return refused(op, rejected(providers.CodeHoldExpired, "the hold expired at %s and can no longer be extended", h.captureBefore.Format(time.RFC3339)))
	}
	if h.status != providers.StatusAuthorized {
		return refused(op, rejected(providers.CodeStateConflict, "only an authorized hold can be extended; this one is %s", h.status))
	}
	h.captureBefore = now.Add(s.cfg.HoldLifetime)
	h.touch(now)
	op.AmountMinor, op.Outcome = h.amount, OutcomeSucceeded
	return outcome{status: http.StatusOK, body: h.view(now), op: op}
}

// refused is the outcome of an executed operation the business rules
// refused.
func refused(op Operation, e *apiError) outcome {
	op.Outcome = e.Code
	return outcome{err: e, op: op}
}

// handleLookup serves GET /v1/holds/{ref}.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("ref")
	plan := s.faults.take(OpLookup, "")
	s.sleep(r.Context().Done(), plan.latency)
	if plan.errStatus != 0 {
		writeError(w, unavailable(plan.errStatus))
		return
	}
	s.mu.Lock()
	h := s.readHoldLocked(ref)
	var v holdJSON
	if h != nil {
		v = h.view(s.now())
	}
	s.mu.Unlock()
	if plan.timeout {
		s.hang(r)
	}
	if h == nil {
		writeError(w, notFound("hold", ref))
		return
	}
	writeJSON(w, http.StatusOK, v)
}
