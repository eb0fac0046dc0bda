package fake

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
)

// keyEntry is the idempotent record of one (endpoint, key): claimed while
// the first request executes, then the stored answer.
type keyEntry struct {
	fingerprint [32]byte
	done        bool
	status      int
	body        []byte
}

// params is a decoded request body that can check itself.
type params interface {
	validate() *apiError
}

// outcome is what one execution of a write produced.
type outcome struct {
	status int
	body   any
	// err, when set, replaces status and body.
	err *apiError
	// op is the log entry; the server fills Seq, Operation,
	// IdempotencyKey and At.
	op Operation
}

// checkKey validates an Idempotency-Key header value.
func checkKey(key string) *apiError {
	if key == "" {
		return invalid("Idempotency-Key", "the Idempotency-Key header is required on every POST")
	}
	if len(key) > 255 {
		return invalid("Idempotency-Key", "the Idempotency-Key header is longer than 255 characters")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return invalid("Idempotency-Key", "the Idempotency-Key header must be printable ASCII")
		}
	}
	return nil
}

// fingerprinter is implemented by parameters the fingerprint must not
// cover as they are (a card: see cardFingerprint).
type fingerprinter interface {
	fingerprinted(cardKey []byte) any
}

// fingerprint identifies a request's parameters: its endpoint, its path
// reference and the canonical JSON of its decoded body, so key order,
// whitespace and number spelling do not matter.
func fingerprint(pattern, ref string, p params, cardKey []byte) [32]byte {
	var v any = p
	if f, ok := p.(fingerprinter); ok {
		v = f.fingerprinted(cardKey)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("fake: fingerprint: " + err.Error())
	}
	h := sha256.New()
	h.Write([]byte(pattern))
	h.Write([]byte{0})
	h.Write([]byte(ref))
	h.Write([]byte{0})
	h.Write(b)
	var fp [32]byte
	h.Sum(fp[:0])
	return fp
}

// serveWrite runs one keyed write the way Stripe does: validate, apply
// faults, claim the (endpoint, key) or replay / refuse, execute exactly once
// under the state lock, store the answer (and persist the state), answer.
func (s *Server) serveWrite(w http.ResponseWriter, r *http.Request, op Op, p params, exec func(now time.Time) outcome) {
	s.serveKeyed(w, r, op, p, func(now time.Time, _ faultPlan) outcome { return exec(now) })
}

// serveKeyed is serveWrite for an operation whose execution a fault can
// change (a decline fault on an increment): exec gets the call's plan.
func (s *Server) serveKeyed(w http.ResponseWriter, r *http.Request, op Op, p params, exec func(now time.Time, plan faultPlan) outcome) {
	key := r.Header.Get("Idempotency-Key")
	if e := checkKey(key); e != nil {
		writeError(w, e)
		return
	}
	if e := decodeBody(w, r, p); e != nil {
		writeError(w, e)
		return
	}
	if e := p.validate(); e != nil {
		writeError(w, e)
		return
	}
	fp := fingerprint(r.Pattern, r.PathValue("ref"), p, s.cardKey)

	plan := s.faults.take(op, key)
	if plan.errStatus != 0 {
		s.log.Info("fake provider: fault error_before_execute", "operation", op, "idempotency_key", key, "status", plan.errStatus)
		s.sleep(r.Context().Done(), plan.latency)
		writeError(w, unavailable(plan.errStatus))
		return
	}

	scope := r.Pattern + "\x00" + key
	entry, found, refuse, replayStatus, replayBody := s.claimKey(scope, fp)
	if found {
		s.answerKnownKey(w, r, plan, refuse, replayStatus, replayBody)
		return
	}

	// This request owns the key. Should it die before storing an answer,
	// release the claim so a retry executes.
	stored := false
	defer func() {
		if !stored {
			s.mu.Lock()
			delete(s.keys, scope)
			s.mu.Unlock()
		}
	}()
	// A slow provider keeps executing even if the client goes away.
	s.sleep(nil, plan.latency)

	s.mu.Lock()
	now := s.now()
	out := exec(now, plan)
	if out.err != nil {
		out.status, out.body = out.err.status, errorBody{Error: out.err.wireError}
	}
	entry.status, entry.body, entry.done = out.status, marshal(out.body), true
	rec := s.recordLocked(now, op, key, scope, out.op)
	s.emitForLocked(op, key, rec)
	status, body := entry.status, entry.body
	s.persistLocked()
	s.mu.Unlock()
	stored = true
	s.log.Info("fake provider: executed", "operation", op, "idempotency_key", key,
		"ref", rec.Ref, "outcome", rec.Outcome, "seq", rec.Seq)

	if plan.timeout {
		s.log.Info("fake provider: fault timeout_after_execute", "operation", op, "idempotency_key", key)
		s.hang(r)
	}
	writeRaw(w, status, body)
}

// recordLocked completes rec, the log entry of op executed at now under
// key (scope), and logs it unless it is a create; the key goes with the
// hold its answer is of. Called with s.mu held.
func (s *Server) recordLocked(now time.Time, op Op, key, scope string, rec Operation) Operation {
	rec.Operation = op
	rec.IdempotencyKey = key
	rec.At = now
	if h := s.holds[rec.Ref]; h != nil {
		// The answer is of h: the key is packed with it (compact.go).
		// Its reference replaces the path's, which would keep the
		// whole request line alive.
		rec.Ref = h.ref
		h.keys = append(h.keys, scope)
	}
	if op != OpCreate { // creating moves no money: the log is of what does
		rec = s.logOpLocked(rec)
	}
	return rec
}

// answerKnownKey answers a request whose key was known (after the armed
// latency, or never for a timeout fault): refused, or the stored answer
// replayed.
func (s *Server) answerKnownKey(w http.ResponseWriter, r *http.Request, plan faultPlan, refuse *apiError, status int, body []byte) {
	s.sleep(r.Context().Done(), plan.latency)
	if plan.timeout {
		s.hang(r)
	}
	if refuse != nil {
		if refuse.status == http.StatusConflict {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, refuse)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	writeRaw(w, status, body)
}

// claimKey looks scope's key up: absent, it is claimed for this request
// (found false); present, the request is refused (another body under the
// key, or its first request still executing) or gets the stored answer.
func (s *Server) claimKey(scope string, fp [32]byte) (entry *keyEntry, found bool, refuse *apiError, replayStatus int, replayBody []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	entry, found = s.keys[scope]
	if !found {
		entry = s.coldKeyLocked(scope)
		found = entry != nil
	}
	switch {
	case !found:
		entry = &keyEntry{fingerprint: fp}
		s.keys[scope] = entry
	case entry.fingerprint != fp:
		refuse = &apiError{status: http.StatusBadRequest, wireError: wireError{
			Type: typeIdempotency, Code: providers.CodeIdempotencyMismatch,
			Message: "this Idempotency-Key was used with other parameters on this endpoint",
		}}
	case !entry.done:
		refuse = &apiError{status: http.StatusConflict, wireError: wireError{
			Type: typeIdempotency, Code: providers.CodeIdempotencyKeyInUse,
			Message: "a request with this Idempotency-Key is still executing; retry later",
		}}
	}
	if found && refuse == nil {
		replayStatus, replayBody = entry.status, entry.body
	}
	return entry, found, refuse, replayStatus, replayBody
}
