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
	// DriftPartAmount sets the amount of the selected row's Part-th part
	// (from 1) to AmountMinor: a capture of another amount, an increment
	// to another total.
	DriftPartAmount DriftKind = "part_amount"
	// DriftPartDrop leaves the selected row's Part-th part (from 1) out.
	DriftPartDrop DriftKind = "part_drop"
	// DriftPartAdd adds NewPart to the selected row's parts, in the order
	// of their times: an increment or a capture we know nothing of.
	DriftPartAdd DriftKind = "part_add"
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
	// shows in reports whose window holds either time. Its parts, if any,
	// are shown as given.
	Row *Row `json:"row,omitempty"`
	// Part is the part (from 1, in the row's order) a DriftPartAmount
	// sets or a DriftPartDrop drops; a row without that part (yet) is
	// left as it is.
	Part int `json:"part,omitempty"`
	// NewPart is the part a DriftPartAdd adds; a zero CreatedAt gets the
	// current time.
	NewPart *Part `json:"new_part,omitempty"`
}

// applyToParts returns parts as the part drift d alters them, never
// changing the slice it is given.
func (d Drift) applyToParts(parts []Part) []Part {
	i := d.Part - 1
	switch {
	case d.Kind == DriftPartAdd:
		out := append(slices.Clip(parts), *d.NewPart)
		slices.SortStableFunc(out, func(a, b Part) int { return a.CreatedAt.Compare(b.CreatedAt) })
		return out
	case i < 0 || i >= len(parts):
		return parts
	case d.Kind == DriftPartDrop:
		return slices.Delete(slices.Clone(parts), i, i+1)
	}
	out := slices.Clone(parts)
	out[i].AmountMinor = d.AmountMinor
	return out
}

// checkPart validates a part given to a drift and fills its default time.
func (s *Server) checkPart(p *Part, param string) *apiError {
	if !validPartKind(p.Kind) {
		return invalid(param+".kind", "a part's kind must be increment or capture, got %q", p.Kind)
	}
	if p.AmountMinor <= 0 {
		return invalid(param+".amount_minor", "a part's amount_minor must be a positive integer")
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = s.now()
	}
	return nil
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
		return s.checkAddDrift(d)
	}
	if d.Row != nil {
		return invalid("row", "row applies to add drifts only")
	}
	if e := s.checkPartDrift(d); e != nil {
		return e
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
	case DriftDrop, DriftDuplicate, DriftPartAmount, DriftPartDrop, DriftPartAdd:
	default:
		return invalid("kind", "kind must be amount, status, currency, drop, add, duplicate, part_amount, part_drop or part_add, got %q", d.Kind)
	}
	switch {
	case d.Ref != "":
		if s.readHoldLocked(d.Ref) == nil {
			return notFound("hold", d.Ref)
		}
	case d.PaymentID != "":
		if !s.anyHoldPaidLocked(d.PaymentID) {
			return notFound("hold with payment_id", d.PaymentID)
		}
	default:
		return invalid("ref", "a %s drift needs ref or payment_id", d.Kind)
	}
	return nil
}

// checkAddDrift validates an add drift and fills its row's defaults.
func (s *Server) checkAddDrift(d *Drift) *apiError {
	if e := s.checkPartDrift(d); e != nil {
		return e
	}
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
	row.Parts = slices.Clone(row.Parts)
	for i := range row.Parts {
		if e := s.checkPart(&row.Parts[i], "row.parts"); e != nil {
			return e
		}
	}
	d.Row = &row
	return nil
}

// checkPartDrift validates the part fields of a drift that selects a row:
// Part for part_amount and part_drop, NewPart for part_add, neither for
// the others.
func (s *Server) checkPartDrift(d *Drift) *apiError {
	switch d.Kind {
	case DriftPartAmount, DriftPartDrop:
		if d.Part < 1 {
			return invalid("part", "a %s drift needs part, the part's position from 1", d.Kind)
		}
		if d.Kind == DriftPartAmount && d.AmountMinor <= 0 {
			return invalid("amount_minor", "a part_amount drift needs a positive amount_minor")
		}
	case DriftPartAdd:
		if d.NewPart == nil {
			return invalid("new_part", "a part_add drift needs a new_part")
		}
		p := *d.NewPart
		if e := s.checkPart(&p, "new_part"); e != nil {
			return e
		}
		d.NewPart = &p
	}
	if d.Part != 0 && d.Kind != DriftPartAmount && d.Kind != DriftPartDrop {
		return invalid("part", "part applies to part_amount and part_drop drifts only")
	}
	if d.NewPart != nil && d.Kind != DriftPartAdd {
		return invalid("new_part", "new_part applies to part_add drifts only")
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
