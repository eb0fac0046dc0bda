package fake

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/payorch/payorch/providers"
)

// maxSeedBytes bounds one seeding request.
const maxSeedBytes = 1 << 30

// SeedHold describes a hold to create directly, without an operation:
// seeding builds big reconciliation fixtures quickly. Seeded holds are in
// lookups and reports but not in the operations log. A seeded hold's
// captured amount is booked as a charge and its refunded amount as a
// refund, both at UpdatedAt, with the fees of the schedule.
type SeedHold struct {
	// Ref defaults to a fresh "fh_" reference; it must be unused.
	Ref       string `json:"ref,omitempty"`
	PaymentID string `json:"payment_id,omitempty"`
	TenantID  int64  `json:"tenant_id,omitempty"`
	// Status defaults to authorized.
	Status        providers.Status `json:"status,omitempty"`
	AmountMinor   int64            `json:"amount_minor"`
	CapturedMinor int64            `json:"captured_minor,omitempty"`
	RefundedMinor int64            `json:"refunded_minor,omitempty"`
	Currency      string           `json:"currency"`
	// DeclineCode defaults to card_declined for a declined hold.
	DeclineCode string `json:"decline_code,omitempty"`
	// CreatedAt defaults to now, UpdatedAt to CreatedAt, CaptureBefore to
	// CreatedAt + Config.HoldLifetime (declined holds have none).
	CreatedAt     time.Time `json:"created_at,omitzero"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
	CaptureBefore time.Time `json:"capture_before,omitzero"`
}

// Seed creates the hold sh describes and returns it as a lookup would. It
// fails with an *apiError (400 invalid_request) when sh is inconsistent or
// its Ref is taken.
func (s *Server) Seed(sh SeedHold) (providers.Hold, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, e := s.seed(sh)
	if e != nil {
		return providers.Hold{}, e
	}
	s.persistLocked()
	return h.view(s.now()).hold(), nil
}

// seed validates sh and stores its hold. Called with s.mu held.
func (s *Server) seed(sh SeedHold) (*hold, *apiError) {
	if sh.Ref == "" {
		sh.Ref = newID("fh_")
	}
	if s.readHoldLocked(sh.Ref) != nil {
		return nil, invalid("ref", "a hold %q exists already", sh.Ref)
	}
	sh, bad := s.seedDefaults(sh)
	if bad != nil {
		return nil, bad
	}
	meta := map[string]string{}
	if sh.PaymentID != "" {
		meta[metaPaymentID] = sh.PaymentID
	}
	if sh.TenantID != 0 {
		meta[metaTenantID] = strconv.FormatInt(sh.TenantID, 10)
	}
	created, updated := sh.CreatedAt.UTC(), sh.UpdatedAt.UTC()
	touched := []time.Time{created}
	if !updated.Equal(created) {
		touched = append(touched, updated)
	}
	h := &hold{
		ref:           sh.Ref,
		paymentMethod: defaultPaymentMethod,
		metadata:      meta,
		status:        sh.Status,
		amount:        sh.AmountMinor,
		captured:      sh.CapturedMinor,
		refunded:      sh.RefundedMinor,
		currency:      sh.Currency,
		declineCode:   sh.DeclineCode,
		created:       created,
		updated:       updated,
		captureBefore: sh.CaptureBefore.UTC(),
		touched:       touched,
	}
	s.holds[h.ref] = h
	s.order = append(s.order, holdSlot{live: h})
	// Its money, as of its last change (it has no operations to date
	// them by): the captured amount charged, then the refunded amount
	// refunded, neither with an idempotency key.
	if h.captured > 0 {
		s.bookLocked(updated, providers.BalanceCharge, h, h.ref, "", h.captured)
	}
	if h.refunded > 0 {
		s.bookLocked(updated, providers.BalanceRefund, h, h.ref, "", -h.refunded)
	}
	return h, nil
}

// seedDefaults checks a hold to seed and fills in its defaults.
func (s *Server) seedDefaults(sh SeedHold) (SeedHold, *apiError) {
	now := s.now()
	if sh.Status == "" {
		sh.Status = providers.StatusAuthorized
	}
	if !knownStatus(sh.Status) {
		return sh, invalid("status", "unknown status %q", sh.Status)
	}
	if sh.Status == providers.StatusRequiresAction {
		// A challenge needs its page, token and return URL: confirmation
		// makes them.
		return sh, invalid("status", "a hold waiting for authentication cannot be seeded; authorize with a 3-D Secure test method instead")
	}
	if sh.AmountMinor <= 0 {
		return sh, invalid("amount_minor", "amount_minor must be a positive integer")
	}
	if sh.RefundedMinor < 0 || sh.CapturedMinor < sh.RefundedMinor || sh.AmountMinor < sh.CapturedMinor {
		return sh, invalid("captured_minor", "amounts must satisfy 0 <= refunded_minor <= captured_minor <= amount_minor")
	}
	if !validCurrency(sh.Currency) {
		return sh, invalid("currency", "currency must be an ISO 4217 code in upper case, got %q", sh.Currency)
	}
	if sh.CreatedAt.IsZero() {
		sh.CreatedAt = now
	}
	if sh.UpdatedAt.IsZero() {
		sh.UpdatedAt = sh.CreatedAt
	}
	if sh.Status == providers.StatusDeclined {
		if sh.DeclineCode == "" {
			sh.DeclineCode = providers.CodeCardDeclined
		}
	} else if sh.CaptureBefore.IsZero() {
		sh.CaptureBefore = sh.CreatedAt.Add(s.cfg.HoldLifetime)
	}
	return sh, nil
}

// seedResult is the body of a successful POST /_admin/holds.
type seedResult struct {
	Seeded int `json:"seeded"`
}

// handleSeed serves POST /_admin/holds: a stream of SeedHold JSON values
// (JSON lines), each stored as it is read. It is not atomic: on a bad value
// the ones before it stay, and the error says which one failed. The state
// is persisted once, when the stream ends.
func (s *Server) handleSeed(w http.ResponseWriter, r *http.Request) {
	n, e := s.seedStream(w, r)
	if n > 0 {
		s.mu.Lock()
		s.persistLocked()
		s.mu.Unlock()
	}
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, seedResult{Seeded: n})
}

// seedStream stores the holds of r's body as it reads them and returns how
// many it stored, and the error that stopped it.
func (s *Server) seedStream(w http.ResponseWriter, r *http.Request) (int, *apiError) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSeedBytes))
	dec.DisallowUnknownFields()
	n := 0
	for {
		var sh SeedHold
		err := dec.Decode(&sh)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, invalid("", "hold %d: invalid JSON: %v", n+1, err)
		}
		s.mu.Lock()
		_, e := s.seed(sh)
		s.mu.Unlock()
		if e != nil {
			e.Message = fmt.Sprintf("hold %d: %s", n+1, e.Message)
			return n, e
		}
		n++
	}
}
