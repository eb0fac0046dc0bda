package fake

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/payorch/payorch/providers"
)

// Sending webhooks (Config.WebhookURL). Events are queued while the state
// lock is held (a non-blocking send: a full queue drops the event, with a
// log line) and delivered by one goroutine, in order, so an API answer
// never waits for a webhook. A delivery that fails (no answer, not 2xx) is
// tried again, up to webhookAttempts times, with backoff. Admin faults
// (WebhookFault) drop, duplicate, delay or reorder them.

// Sending limits.
const (
	webhookQueue    = 4096
	webhookAttempts = 5
	webhookBackoff  = 200 * time.Millisecond
	// reorderWait is how long a held-back event (a reorder fault) waits
	// for a later event to overtake it before it is sent anyway.
	reorderWait = time.Second
	// maxDeliveryLog bounds the deliveries the server remembers.
	maxDeliveryLog = 1000
)

// WebhookFaultKind names what a WebhookFault does to an event.
type WebhookFaultKind string

// Webhook fault kinds.
const (
	// WebhookDrop never sends the event.
	WebhookDrop WebhookFaultKind = "drop"
	// WebhookDuplicate sends the event twice (the same id and body).
	WebhookDuplicate WebhookFaultKind = "duplicate"
	// WebhookDelay sends the event DelayMS late; later events overtake it.
	WebhookDelay WebhookFaultKind = "delay"
	// WebhookReorder holds the event back until the next one is sent
	// (or reorderWait passes), so it arrives after a later event.
	WebhookReorder WebhookFaultKind = "reorder"
)

// WebhookFault arms a fault on the webhooks the server sends, like Fault
// does on calls: with Count N > 0 on the next N matching events, with 0
// on every one until cleared.
type WebhookFault struct {
	Kind WebhookFaultKind `json:"fault"`
	// Type restricts it to events of one type (hold.expired); empty:
	// every type.
	Type  string `json:"type,omitempty"`
	Count int    `json:"count,omitempty"`
	// DelayMS is the delay of a delay fault (required for it).
	DelayMS int `json:"delay_ms,omitempty"`
}

func (f *WebhookFault) validate() *apiError {
	switch f.Kind {
	case WebhookDrop, WebhookDuplicate, WebhookReorder:
	case WebhookDelay:
		if f.DelayMS <= 0 {
			return invalid("delay_ms", "a delay fault needs delay_ms > 0")
		}
	default:
		return invalid("fault", "fault must be drop, duplicate, delay or reorder, got %q", f.Kind)
	}
	if _, ok := eventKinds[f.Type]; f.Type != "" && !ok {
		return invalid("type", "no such event type: %q", f.Type)
	}
	if f.Count < 0 {
		return invalid("count", "count must not be negative")
	}
	if f.DelayMS < 0 {
		return invalid("delay_ms", "delay_ms must not be negative")
	}
	return nil
}

// webhookFaultSet holds the armed webhook faults.
type webhookFaultSet struct{ armed[WebhookFault] }

func (fs *webhookFaultSet) arm(f WebhookFault) { fs.armed.arm(f, f.Count) }

func (fs *webhookFaultSet) list() []WebhookFault {
	return fs.armed.list(func(f WebhookFault, left int) WebhookFault { f.Count = left; return f })
}

// take returns the first armed fault matching an event of type typ, using
// up its count; ok is false when none matches.
func (fs *webhookFaultSet) take(typ string) (f WebhookFault, ok bool) {
	fs.armed.take(func(r WebhookFault) (bool, bool) {
		if r.Type != "" && r.Type != typ {
			return false, true
		}
		f, ok = r, true
		return true, false
	})
	return f, ok
}

// WebhookDelivery is one thing that happened to an event the server
// meant to send: delivered, failed (an attempt that got no 2xx), dropped,
// delayed or held back by a fault.
type WebhookDelivery struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	HoldRef string `json:"hold_ref"`
	// Outcome is delivered, failed, dropped, delayed or held.
	Outcome    string    `json:"outcome"`
	Attempt    int       `json:"attempt,omitempty"`
	StatusCode int       `json:"status_code,omitempty"`
	Error      string    `json:"error,omitempty"`
	At         time.Time `json:"at"`
}

// outgoing is an event on its way.
type outgoing struct {
	ev   Event
	body []byte
	// attempt counts the deliveries tried; a retry is queued again.
	attempt int
	// planned: its fault was decided (a retry or a released one is not
	// faulted again).
	planned bool
}

// webhookSender delivers a Server's webhooks.
type webhookSender struct {
	url, secret string
	hc          *http.Client
	queue       chan outgoing
	faults      webhookFaultSet

	mu   sync.Mutex
	held []outgoing
	log  []WebhookDelivery
}

// startWebhooks starts the delivery goroutine and the expiry watch of a
// server with a WebhookURL; both stop when the server is closed.
func (s *Server) startWebhooks() {
	if s.cfg.WebhookURL == "" {
		return
	}
	s.hooks = &webhookSender{url: s.cfg.WebhookURL, secret: s.cfg.WebhookSecret, hc: s.cfg.WebhookClient,
		queue: make(chan outgoing, webhookQueue)}
	go s.deliverLoop()
	go s.expiryLoop()
}

// emitLocked queues ev (its id and creation time set here). It never
// blocks: a full queue drops the event, which a receiver must survive
// anyway. Called with s.mu held, so events leave in the order of the
// changes they report.
func (s *Server) emitLocked(ev Event) {
	if s.hooks == nil {
		return
	}
	ev.ID, ev.Object, ev.CreatedAt = newID("fevt_"), "event", s.now()
	body, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("fake provider: webhook not encoded", "type", ev.Type, "error", err)
		return
	}
	select {
	case s.hooks.queue <- outgoing{ev: ev, body: body}:
	default:
		s.log.Error("fake provider: webhook queue full, event dropped", "event_id", ev.ID, "type", ev.Type)
	}
}

// emitForLocked queues the webhook of an executed write, if it has one:
// the hold authorized (or waiting for its cardholder's authentication),
// captured (or the capture refused), raised by an increment, canceled, a
// refund made (or refused). Called with s.mu held.
func (s *Server) emitForLocked(op Op, key string, rec Operation) {
	h := s.holds[rec.Ref]
	if s.hooks == nil || h == nil {
		return
	}
	ok := rec.Outcome == OutcomeSucceeded
	d := EventData{HoldRef: h.ref, PaymentID: h.metadata[metaPaymentID], ObjectID: h.ref, AmountMinor: rec.AmountMinor,
		Currency: h.currency}
	var typ string
	switch {
	case op == OpAuthorize && ok:
		typ, d.AmountMinor = EventHoldAuthorized, h.amount
	case op == OpAuthorize && rec.Outcome == OutcomeRequiresAction:
		typ, d.AmountMinor = EventHoldRequiresAction, h.amount
	case op == OpCapture && ok:
		typ = EventHoldCaptured
	case op == OpCapture:
		typ, d.FailureCode = EventCaptureFailed, rec.Outcome
	case op == OpCancel && ok:
		typ = EventHoldCanceled
	case op == OpIncrement && ok:
		typ, d.AmountMinor = EventHoldAmountUpdated, h.amount
	case op == OpRefund && ok:
		typ, d.ObjectID = EventRefundSucceeded, rec.RefundRef
	case op == OpRefund:
		typ, d.ObjectID, d.FailureCode = EventRefundFailed, "", rec.Outcome
	default:
		return
	}
	s.emitLocked(Event{Type: typ, IdempotencyKey: key, Data: d})
}

// expiryLoop looks for lapsed holds every Config.ExpiryCheck until the
// server closes.
func (s *Server) expiryLoop() {
	t := time.NewTicker(s.cfg.ExpiryCheck)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.NotifyExpiredHolds()
		}
	}
}

// NotifyExpiredHolds sends hold.expired for every authorized hold whose
// capture_before has passed (by Config.Clock) and was not announced yet,
// and returns how many. The server does this every Config.ExpiryCheck on
// its own; tests that move the clock may call it to not wait.
func (s *Server) NotifyExpiredHolds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hooks == nil {
		return 0
	}
	now, n := s.now(), 0
	for i := range s.order {
		// A packed hold has nothing to announce (Server.compactable).
		h := s.order[i].live
		if h == nil || !h.lapsed(now) || h.expiryNotified {
			continue
		}
		h.expiryNotified = true
		n++
		// A hold partly captured (multicapture) releases the rest.
		s.emitLocked(Event{Type: EventHoldExpired, Data: EventData{HoldRef: h.ref, PaymentID: h.metadata[metaPaymentID],
			ObjectID: h.ref, AmountMinor: max(h.amount-h.captured, 0), Currency: h.currency}})
	}
	if n > 0 {
		s.persistLocked()
	}
	return n
}

// deliverLoop sends queued events one at a time until the server closes.
func (s *Server) deliverLoop() {
	w := s.hooks
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	for {
		select {
		case <-s.done:
			return
		case o := <-w.queue:
			if s.deliverPlanned(o) {
				s.releaseHeld()
			} else if w.hasHeld() {
				flush.Reset(reorderWait)
			}
		case <-flush.C:
			s.releaseHeld()
		}
	}
}

// deliverPlanned applies the armed fault (if any) to a new event and
// sends it; it reports whether an event was sent now, after which the
// ones held back follow.
func (s *Server) deliverPlanned(o outgoing) bool {
	w := s.hooks
	if o.planned {
		s.send(o)
		return true
	}
	o.planned = true
	f, faulted := w.faults.take(o.ev.Type)
	switch {
	case !faulted:
	case f.Kind == WebhookDrop:
		w.record(o, "dropped", 0, "")
		return false
	case f.Kind == WebhookDelay:
		w.record(o, "delayed", 0, "")
		time.AfterFunc(time.Duration(f.DelayMS)*time.Millisecond, func() { w.requeue(o) })
		return false
	case f.Kind == WebhookReorder:
		w.record(o, "held", 0, "")
		w.mu.Lock()
		w.held = append(w.held, o)
		w.mu.Unlock()
		return false
	case f.Kind == WebhookDuplicate:
		s.send(o)
	}
	s.send(o)
	return true
}

// releaseHeld sends the events a reorder fault held back.
func (s *Server) releaseHeld() {
	w := s.hooks
	w.mu.Lock()
	held := w.held
	w.held = nil
	w.mu.Unlock()
	for _, o := range held {
		s.send(o)
	}
}

func (w *webhookSender) hasHeld() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held) > 0
}

// requeue puts o back on the queue without blocking (a full queue drops
// it, logged in the deliveries).
func (w *webhookSender) requeue(o outgoing) {
	select {
	case w.queue <- o:
	default:
		w.record(o, "failed", o.attempt, "queue full")
	}
}

// send makes one delivery attempt of o, signed now; a failure is tried
// again later (up to webhookAttempts).
func (s *Server) send(o outgoing) {
	w := s.hooks
	o.attempt++
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, errText := 0, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(o.body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "payorch-fake-provider")
		// Signed with the wall clock: the signature guards the transport,
		// whatever the server's (settable) clock says.
		req.Header.Set(SignatureHeader, providers.SignWebhook(w.secret, time.Now(), o.body))
		var resp *http.Response
		if resp, err = w.hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			status = resp.StatusCode
		}
	}
	if err != nil {
		errText = err.Error()
	}
	if err == nil && status/100 == 2 {
		w.record(o, "delivered", status, "")
		return
	}
	w.record(o, "failed", status, errText)
	s.log.Warn("fake provider: webhook delivery failed", "event_id", o.ev.ID, "type", o.ev.Type, "attempt", o.attempt,
		"status", status, "error", errText)
	if o.attempt < webhookAttempts {
		time.AfterFunc(webhookBackoff<<(o.attempt-1), func() { w.requeue(o) })
	}
}

// record remembers what happened to o.
func (w *webhookSender) record(o outgoing, outcome string, status int, errText string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, WebhookDelivery{EventID: o.ev.ID, Type: o.ev.Type, HoldRef: o.ev.Data.HoldRef, Outcome: outcome,
		Attempt: o.attempt, StatusCode: status, Error: errText, At: time.Now().UTC()})
	if len(w.log) > maxDeliveryLog {
		w.log = w.log[len(w.log)-maxDeliveryLog:]
	}
}

// WebhookDeliveries returns what happened to the webhooks the server
// sent (or meant to), oldest first: the last 1000.
func (s *Server) WebhookDeliveries() []WebhookDelivery {
	if s.hooks == nil {
		return []WebhookDelivery{}
	}
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	return append([]WebhookDelivery{}, s.hooks.log...)
}

// InjectWebhookFault arms f on the webhooks. It fails with an *apiError
// (400 invalid_request) when f is invalid or the server sends none.
func (s *Server) InjectWebhookFault(f WebhookFault) error {
	if e := s.armWebhookFault(f); e != nil {
		return e
	}
	return nil
}

func (s *Server) armWebhookFault(f WebhookFault) *apiError {
	if s.hooks == nil {
		return invalid("", "this fake provider sends no webhooks (no webhook URL configured)")
	}
	if e := f.validate(); e != nil {
		return e
	}
	s.hooks.faults.arm(f)
	s.log.Info("fake provider: webhook fault armed", "fault", f.Kind, "type", f.Type, "count", f.Count, "delay_ms", f.DelayMS)
	return nil
}

// Dispute is the body of POST /_admin/disputes: a cardholder disputes a
// captured hold.
type Dispute struct {
	HoldRef string `json:"hold_ref"`
	// AmountMinor disputed; 0 means all that was captured.
	AmountMinor int64  `json:"amount_minor,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// OpenDispute simulates a dispute of a captured hold: it books the
// withdrawal of the disputed amount with the schedule's dispute fee (a
// balance transaction of type dispute, money.go), sends dispute.created
// when webhooks are configured, and returns the event. Errors
// (*apiError): resource_missing, state_conflict (not captured),
// invalid_request.
func (s *Server) OpenDispute(d Dispute) (Event, error) {
	ev, e := s.openDispute(d)
	if e != nil {
		return Event{}, e
	}
	return ev, nil
}

func (s *Server) openDispute(d Dispute) (Event, *apiError) {
	if d.AmountMinor < 0 || len(d.Reason) > 100 {
		return Event{}, invalid("amount_minor", "amount_minor must not be negative, reason at most 100 characters")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holdLocked(d.HoldRef)
	if h == nil {
		return Event{}, notFound("hold", d.HoldRef)
	}
	switch h.status {
	case providers.StatusCaptured, providers.StatusPartiallyRefunded, providers.StatusRefunded:
	default:
		return Event{}, rejected(providers.CodeStateConflict, "only a captured hold can be disputed; this one is %s", h.view(s.now()).Status)
	}
	amount := d.AmountMinor
	if amount == 0 || amount > h.captured {
		amount = h.captured
	}
	reason := d.Reason
	if reason == "" {
		reason = "fraudulent"
	}
	ev := Event{Type: EventDisputeCreated, Data: EventData{HoldRef: h.ref, PaymentID: h.metadata[metaPaymentID],
		ObjectID: newID("fdp_"), AmountMinor: amount, Currency: h.currency, Reason: reason}}
	if amount > 0 {
		s.bookLocked(s.now(), providers.BalanceDispute, h, ev.Data.ObjectID, "", -amount)
		s.persistLocked()
	}
	s.emitLocked(ev)
	return ev, nil
}

// webhookFaultList is the body of GET /_admin/webhooks/faults.
type webhookFaultList struct {
	Data []WebhookFault `json:"data"`
}

// deliveryList is the body of GET /_admin/webhooks.
type deliveryList struct {
	Data []WebhookDelivery `json:"data"`
}

func (s *Server) handleWebhookDeliveries(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, deliveryList{Data: s.WebhookDeliveries()})
}

func (s *Server) handleListWebhookFaults(w http.ResponseWriter, _ *http.Request) {
	out := []WebhookFault{}
	if s.hooks != nil {
		out = s.hooks.faults.list()
	}
	writeJSON(w, http.StatusOK, webhookFaultList{Data: out})
}

func (s *Server) handleInjectWebhookFault(w http.ResponseWriter, r *http.Request) {
	var f WebhookFault
	if e := decodeBody(w, r, &f); e != nil {
		writeError(w, e)
		return
	}
	if e := s.armWebhookFault(f); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, f)
}

func (s *Server) handleClearWebhookFaults(w http.ResponseWriter, _ *http.Request) {
	if s.hooks != nil {
		s.hooks.faults.clear()
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleDispute(w http.ResponseWriter, r *http.Request) {
	var d Dispute
	if e := decodeBody(w, r, &d); e != nil {
		writeError(w, e)
		return
	}
	ev, e := s.openDispute(d)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, ev)
}
