package fake

import (
	"net/http"
	"slices"

	"github.com/payorch/payorch/providers"
)

// DriftKind names how a Drift alters the report.
type DriftKind string

// Drift kinds.
const (
	// DriftAmount sets one amount of the selected row (Field, AmountMinor).
	DriftAmount DriftKind = "amount"
	// DriftStatus sets the selected row's status (Status).
	DriftStatus DriftKind = "status"
	// DriftCurrency sets the selected row's currency (Currency).
	DriftCurrency DriftKind = "currency"
	// DriftDrop leaves the selected row out.
	DriftDrop DriftKind = "drop"
	// DriftAdd adds Row, a row the fake has no hold for.
	DriftAdd DriftKind = "add"
	// DriftDuplicate shows the selected row twice.
	DriftDuplicate DriftKind = "duplicate"
)

// AmountField names the amount a DriftAmount changes.
type AmountField string

// Amount fields of a report row.
const (
	AmountAuthorized AmountField = "authorized"
	AmountCaptured   AmountField = "captured"
	AmountRefunded   AmountField = "refunded"
)

// Drift alters the report's output, never the holds themselves, so
// reconciliation tests can make the provider's record disagree with ours.
// Every kind but add selects the row of an existing hold by Ref or, when
// Ref is empty, by PaymentID. Drifts apply in the order they were added.
type Drift struct {
	Kind      DriftKind `json:"kind"`
	Ref       string    `json:"ref,omitempty"`
	PaymentID string    `json:"payment_id,omitempty"`
	// Field and AmountMinor are the amount a DriftAmount sets.
	Field       AmountField `json:"field,omitempty"`
	AmountMinor int64       `json:"amount_minor"`
	// Status is what a DriftStatus sets.
	Status providers.Status `json:"status,omitempty"`
	// Currency is what a DriftCurrency sets.
	Currency string `json:"currency,omitempty"`
	// Row is the row a DriftAdd adds. An empty Ref gets a fresh one, a zero
	// CreatedAt the current time, a zero UpdatedAt the CreatedAt; the row
	// shows in reports whose window holds either time.
	Row *Row `json:"row,omitempty"`
}

// knownStatus reports whether st is a hold status.
func knownStatus(st providers.Status) bool {
	switch st {
	case providers.StatusRequiresAction, providers.StatusAuthorized, providers.StatusDeclined, providers.StatusCaptured,
		providers.StatusCanceled, providers.StatusExpired, providers.StatusPartiallyRefunded,
		providers.StatusRefunded:
		return true
	}
	return false
}

// checkDrift validates d, fills an added row's defaults and checks that the
// selected hold exists. Called with s.mu held.
func (s *Server) checkDrift(d *Drift) *apiError {
	if d.Kind == DriftAdd {
		if d.Row == nil {
			return invalid("row", "an add drift needs a row")
		}
		row := *d.Row
		if row.Ref == "" {
			row.Ref = newID("fh_")
		}
		if row.Status == "" {
			row.Status = providers.StatusAuthorized
		}
		if !knownStatus(row.Status) {
			return invalid("row.status", "unknown status %q", row.Status)
		}
		if !validCurrency(row.Currency) {
			return invalid("row.currency", "currency must be an ISO 4217 code in upper case, got %q", row.Currency)
		}
		if row.CreatedAt.IsZero() {
			row.CreatedAt = s.now()
		}
		if row.UpdatedAt.IsZero() {
			row.UpdatedAt = row.CreatedAt
		}
		d.Row = &row
		return nil
	}
	if d.Row != nil {
		return invalid("row", "row applies to add drifts only")
	}
	switch d.Kind {
	case DriftAmount:
		switch d.Field {
		case AmountAuthorized, AmountCaptured, AmountRefunded:
		default:
			return invalid("field", "field must be authorized, captured or refunded, got %q", d.Field)
		}
		if d.AmountMinor < 0 {
			return invalid("amount_minor", "amount_minor must not be negative")
		}
	case DriftStatus:
		if !knownStatus(d.Status) {
			return invalid("status", "unknown status %q", d.Status)
		}
	case DriftCurrency:
		if !validCurrency(d.Currency) {
			return invalid("currency", "currency must be an ISO 4217 code in upper case, got %q", d.Currency)
		}
	case DriftDrop, DriftDuplicate:
	default:
		return invalid("kind", "kind must be amount, status, currency, drop, add or duplicate, got %q", d.Kind)
	}
	switch {
	case d.Ref != "":
		if s.holds[d.Ref] == nil {
			return notFound("hold", d.Ref)
		}
	case d.PaymentID != "":
		if !slices.ContainsFunc(s.order, func(h *hold) bool { return h.metadata[metaPaymentID] == d.PaymentID }) {
			return notFound("hold with payment_id", d.PaymentID)
		}
	default:
		return invalid("ref", "a %s drift needs ref or payment_id", d.Kind)
	}
	return nil
}

// AddDrift adds d to the report's drifts. It fails with an *apiError (400
// invalid_request, 404 resource_missing) when d is invalid or selects no
// hold.
func (s *Server) AddDrift(d Drift) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.checkDrift(&d); e != nil {
		return e
	}
	s.drifts = append(s.drifts, d)
	s.persistLocked()
	return nil
}

// ClearDrift removes every drift.
func (s *Server) ClearDrift() {
	s.mu.Lock()
	if len(s.drifts) > 0 {
		s.drifts = nil
		s.persistLocked()
	}
	s.mu.Unlock()
}

func (s *Server) handleDrift(w http.ResponseWriter, r *http.Request) {
	var d Drift
	if e := decodeBody(w, r, &d); e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	e := s.checkDrift(&d)
	if e == nil {
		s.drifts = append(s.drifts, d)
		s.persistLocked()
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, d)
}

func (s *Server) handleClearDrift(w http.ResponseWriter, _ *http.Request) {
	s.ClearDrift()
	w.WriteHeader(http.StatusNoContent)
}
