package fake

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/payorch/payorch/providers"
)

// FaultKind names what a Fault does to a call.
type FaultKind string

// Fault kinds.
const (
	// FaultLatency delays the answer by LatencyMS. For a write that
	// executes, the delay happens while the idempotency key is claimed, so
	// concurrent requests with the key see idempotency_key_in_use.
	FaultLatency FaultKind = "latency"
	// FaultErrorBeforeExecute answers Status (default 503
	// provider_unavailable) and does nothing: no execution, no stored
	// answer, no operation logged.
	FaultErrorBeforeExecute FaultKind = "error_before_execute"
	// FaultTimeoutAfterExecute executes the call (storing the idempotent
	// answer, so a retry with the key replays it) and never answers: the
	// connection is held until the client gives up or Config.TimeoutHang
	// passes, then aborted. A report, or a money listing, streams its
	// lines and is cut before its end marker.
	FaultTimeoutAfterExecute FaultKind = "timeout_after_execute"
	// FaultDecline, on the increment operation only, executes the
	// increment as the issuer's decline: 402 card_declined, the hold
	// unchanged, the answer stored under the key and the operation logged
	// with outcome card_declined.
	FaultDecline FaultKind = "decline"
	// FaultDeclineRate, on the authorize operation (confirmation) only,
	// declines a share of the holds the card would have let through, as
	// the issuer would: Probability is the share, DeclineCode the decline
	// (default card_declined, a hard decline; a soft one such as
	// processing_error lets payorch fail over). Whether a hold is declined
	// is decided by its payment (DeclineRateFires on Seed and the
	// payment_id metadata the client sends), not by chance: the same
	// payments are declined on every run. Count, if set, counts the
	// confirmations it applies to.
	FaultDeclineRate FaultKind = "decline_rate"
)

// Fault arms a fault for calls of one operation. With Count N > 0 it fires
// on the next N matching calls (each with Probability, when that is set);
// with Count 0 it fires on every matching call (each with Probability, when
// that is set) until cleared. Faults of several kinds can fire on one call:
// latencies add up, and error_before_execute wins over
// timeout_after_execute.
type Fault struct {
	// Operation is the operation it targets: create, authorize, capture,
	// cancel, refund, extend, increment, lookup, report,
	// balance_transactions or payouts.
	Operation Op `json:"operation"`
	// Kind is the fault: latency, error_before_execute,
	// timeout_after_execute, (increment only) decline or (authorize only)
	// decline_rate.
	Kind FaultKind `json:"fault"`
	// Count is how many calls it fires on; 0 means until cleared.
	Count int `json:"count,omitempty"`
	// Probability, in (0, 1], is the chance it fires on each matching
	// call; 0 means always.
	Probability float64 `json:"probability,omitempty"`
	// LatencyMS delays the answer, for any kind; required for latency.
	LatencyMS int `json:"latency_ms,omitempty"`
	// Status is the HTTP status of error_before_execute: 429, 500, 502,
	// 503 (default) or 504. Only 429 and 503 tell the client that nothing
	// ran; the others leave the outcome unknown to it.
	Status int `json:"status,omitempty"`
	// IdempotencyKey, when set, restricts the fault to writes carrying this
	// key, so parallel tests do not trip each other's faults.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// DeclineCode is decline_rate's decline code (default card_declined).
	DeclineCode string `json:"decline_code,omitempty"`
	// Seed picks which payments decline_rate declines: another seed,
	// other payments (two fakes with the same rate and seed decline the
	// same payments).
	Seed int64 `json:"seed,omitempty"`
}

// DeclineRateFires reports whether a decline_rate fault of probability p
// and seed declines the payment paymentID: a SHA-256 of the seed and the
// id, read as a number in [0, 1), below p.
func DeclineRateFires(seed int64, paymentID string, p float64) bool {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h := sha256.Sum256(append(b[:], paymentID...))
	return float64(binary.BigEndian.Uint64(h[:8])>>11)/(1<<53) < p
}

// declineCodeRE is the shape of a decline_rate's decline code.
var declineCodeRE = regexp.MustCompile(`^[a-z][a-z_]{0,63}$`)

// validate checks f and defaults Status.
func (f *Fault) validate() *apiError {
	if !f.Operation.valid() {
		return invalid("operation", "operation must be create, authorize, capture, cancel, refund, extend, increment, lookup, report, balance_transactions or payouts, got %q", f.Operation)
	}
	switch f.Kind {
	case FaultLatency:
		if f.LatencyMS <= 0 {
			return invalid("latency_ms", "a latency fault needs latency_ms > 0")
		}
	case FaultErrorBeforeExecute:
		switch f.Status {
		case 0:
			f.Status = http.StatusServiceUnavailable
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		default:
			return invalid("status", "status must be 429, 500, 502, 503 or 504, got %d", f.Status)
		}
	case FaultTimeoutAfterExecute:
	case FaultDecline:
		if f.Operation != OpIncrement {
			return invalid("fault", "a decline fault applies to the increment operation only")
		}
	case FaultDeclineRate:
		if e := f.validateDeclineRate(); e != nil {
			return e
		}
	default:
		return invalid("fault", "fault must be latency, error_before_execute, timeout_after_execute, decline or decline_rate, got %q", f.Kind)
	}
	if f.Kind != FaultDeclineRate && (f.DeclineCode != "" || f.Seed != 0) {
		return invalid("decline_code", "decline_code and seed apply to decline_rate only")
	}
	if f.Status != 0 && f.Kind != FaultErrorBeforeExecute {
		return invalid("status", "status applies to error_before_execute only")
	}
	if f.Count < 0 {
		return invalid("count", "count must not be negative")
	}
	if f.Probability < 0 || f.Probability > 1 {
		return invalid("probability", "probability must be within [0, 1]")
	}
	if f.LatencyMS < 0 {
		return invalid("latency_ms", "latency_ms must not be negative")
	}
	if f.IdempotencyKey != "" && (f.Operation == OpLookup || f.Operation == OpReport ||
		f.Operation == OpBalanceTransactions || f.Operation == OpPayouts) {
		return invalid("idempotency_key", "%s calls carry no idempotency key", f.Operation)
	}
	return nil
}

// validateDeclineRate checks a decline_rate fault and defaults its code.
func (f *Fault) validateDeclineRate() *apiError {
	if f.Operation != OpAuthorize {
		return invalid("fault", "a decline_rate fault applies to the authorize operation only")
	}
	if f.Probability <= 0 || f.Probability > 1 {
		return invalid("probability", "a decline_rate fault needs a probability within (0, 1]: the share declined")
	}
	if f.DeclineCode == "" {
		f.DeclineCode = providers.CodeCardDeclined
	}
	if !declineCodeRE.MatchString(f.DeclineCode) {
		return invalid("decline_code", "decline_code must be 1 to 64 lower-case letters and underscores")
	}
	return nil
}

// faultPlan is what the armed faults do to one call.
type faultPlan struct {
	latency   time.Duration
	errStatus int
	timeout   bool
	// decline: an increment is declined (FaultDecline).
	decline bool
	// declineRate is the first armed decline_rate fault, nil when none.
	declineRate *Fault
}

// declines reports whether the plan's decline_rate declines the payment
// paymentID, and with which code.
func (p faultPlan) declines(paymentID string) (string, bool) {
	if p.declineRate == nil || !DeclineRateFires(p.declineRate.Seed, paymentID, p.declineRate.Probability) {
		return "", false
	}
	return p.declineRate.DeclineCode, true
}

// armed holds armed faults of one kind (the API's, the webhooks'), in the
// order they were armed, each with the calls it has left (-1: until
// cleared).
type armed[F any] struct {
	mu    sync.Mutex
	rules []*armedRule[F]
}

type armedRule[F any] struct {
	fault F
	left  int
}

// arm adds a validated fault that fires count times (0: until cleared).
func (a *armed[F]) arm(f F, count int) {
	left := count
	if left == 0 {
		left = -1
	}
	a.mu.Lock()
	a.rules = append(a.rules, &armedRule[F]{fault: f, left: left})
	a.mu.Unlock()
}

// clear disarms every fault.
func (a *armed[F]) clear() {
	a.mu.Lock()
	a.rules = nil
	a.mu.Unlock()
}

// list returns the armed faults, each as counted makes it from the calls
// it has left (0: unlimited).
func (a *armed[F]) list(counted func(f F, left int) F) []F {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]F, 0, len(a.rules))
	for _, r := range a.rules {
		out = append(out, counted(r.fault, max(r.left, 0)))
	}
	return out
}

// take offers the armed faults, in order, to fire, which says whether one
// fires and whether to offer the next; a fault that fires uses up one of
// its calls, and goes when it has none left.
func (a *armed[F]) take(fire func(f F) (fired, more bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.rules[:0]
	more := true
	for _, r := range a.rules {
		fired := false
		if more {
			fired, more = fire(r.fault)
		}
		if fired && r.left > 0 {
			r.left--
			if r.left == 0 {
				continue
			}
		}
		kept = append(kept, r)
	}
	clear(a.rules[len(kept):])
	a.rules = kept
}

// faultSet holds the armed faults of the API.
type faultSet struct{ armed[Fault] }

// arm adds a validated fault.
func (fs *faultSet) arm(f Fault) { fs.armed.arm(f, f.Count) }

// list returns the armed faults, Count being the calls left (0: unlimited).
func (fs *faultSet) list() []Fault {
	return fs.armed.list(func(f Fault, left int) Fault { f.Count = left; return f })
}

// take decides the faults of one call of op carrying key, using up counts.
func (fs *faultSet) take(op Op, key string) faultPlan {
	var p faultPlan
	fs.armed.take(func(r Fault) (bool, bool) {
		fire := r.Operation == op && (r.IdempotencyKey == "" || r.IdempotencyKey == key)
		switch {
		case !fire:
		case r.Kind == FaultErrorBeforeExecute && p.errStatus != 0,
			r.Kind == FaultTimeoutAfterExecute && p.timeout,
			r.Kind == FaultDecline && p.decline,
			r.Kind == FaultDeclineRate && p.declineRate != nil:
			fire = false
		case r.Kind == FaultDeclineRate:
			// Its probability is the share declined, decided per payment.
		case r.Probability > 0 && rand.Float64() >= r.Probability:
			fire = false
		}
		if fire {
			p.latency += time.Duration(r.LatencyMS) * time.Millisecond
			switch r.Kind {
			case FaultErrorBeforeExecute:
				p.errStatus = r.Status
			case FaultTimeoutAfterExecute:
				p.timeout = true
			case FaultDecline:
				p.decline = true
			case FaultDeclineRate:
				p.declineRate = &r
			}
		}
		return fire, true
	})
	if p.errStatus != 0 {
		p.timeout, p.decline, p.declineRate = false, false, nil
	}
	return p
}

// faultList is the body of GET /_admin/faults.
type faultList struct {
	Data []Fault `json:"data"`
}

// InjectFault arms f. It fails with an *apiError (400 invalid_request)
// when f is invalid.
func (s *Server) InjectFault(f Fault) error {
	if _, e := s.armFault(f); e != nil {
		return e
	}
	return nil
}

// armFault validates and arms f, returning it with its defaults.
func (s *Server) armFault(f Fault) (Fault, *apiError) {
	if e := f.validate(); e != nil {
		return f, e
	}
	s.faults.arm(f)
	s.log.Info("fake provider: fault armed", "operation", f.Operation, "fault", f.Kind,
		"count", f.Count, "probability", f.Probability, "idempotency_key", f.IdempotencyKey)
	return f, nil
}

// ClearFaults disarms every fault.
func (s *Server) ClearFaults() { s.faults.clear() }

func (s *Server) handleListFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, faultList{Data: s.faults.list()})
}

func (s *Server) handleInjectFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if e := decodeBody(w, r, &f); e != nil {
		writeError(w, e)
		return
	}
	f, e := s.armFault(f)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, f)
}

func (s *Server) handleClearFaults(w http.ResponseWriter, _ *http.Request) {
	s.faults.clear()
	w.WriteHeader(http.StatusNoContent)
}
