package fake

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/payorch/payorch/providers"
)

// reportBatch is how many holds the report reads per hold of the state lock.
const reportBatch = 1000

// Row is one line of the fake's daily report as it travels on the wire.
type Row struct {
	Ref           string           `json:"ref"`
	PaymentID     string           `json:"payment_id"`
	Status        providers.Status `json:"status"`
	AmountMinor   int64            `json:"amount_minor"`
	CapturedMinor int64            `json:"captured_minor"`
	RefundedMinor int64            `json:"refunded_minor"`
	Currency      string           `json:"currency"`
	CreatedAt     time.Time        `json:"created_at"`
	UpdatedAt     time.Time        `json:"updated_at"`
	// Parts are the hold's increments and captures, in order; none for a
	// hold that had neither, or was seeded.
	Parts []Part `json:"parts,omitempty"`
}

// ReportRow converts r to the seam's type.
func (r Row) ReportRow() providers.ReportRow {
	return providers.ReportRow{
		Ref:           r.Ref,
		PaymentID:     r.PaymentID,
		Status:        r.Status,
		AmountMinor:   r.AmountMinor,
		CapturedMinor: r.CapturedMinor,
		RefundedMinor: r.RefundedMinor,
		Currency:      r.Currency,
		CreatedAt:     r.CreatedAt,
		UpdatedAt:     r.UpdatedAt,
		Parts:         reportParts(r.Parts),
	}
}

// Objects of the report's lines: every row, then one end marker carrying
// the number of rows, so a cut stream is told from a complete one.
const (
	objectReportRow = "report_row"
	objectReportEnd = "report_end"
)

// reportLine is one line of GET /v1/report: a row, or the end marker.
type reportLine struct {
	Object string `json:"object"`
	Row
}

// reportEnd is the last line of a complete report.
type reportEnd struct {
	Object string `json:"object"`
	Rows   int    `json:"rows"`
}

// changedWithin reports whether h was created or changed in [from, to), its
// lapse at capture_before counting as a change.
func (h *hold) changedWithin(from, to, now time.Time) bool {
	for _, t := range h.touched {
		if !t.Before(from) && t.Before(to) {
			return true
		}
	}
	return h.lapsed(now) && !h.captureBefore.Before(from) && h.captureBefore.Before(to)
}

// row is h's report row as read at now.
func (h *hold) row(now time.Time) Row {
	v := h.view(now)
	return Row{
		Ref: v.Ref, PaymentID: v.PaymentID, Status: v.Status,
		AmountMinor: v.AmountMinor, CapturedMinor: v.CapturedMinor, RefundedMinor: v.RefundedMinor,
		Currency: v.Currency, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		// Shared with the hold, read after the state lock is released:
		// safe, as a part never changes once appended and drifts copy
		// before they alter (Drift.applyToParts).
		Parts: h.parts,
	}
}

// handleReport serves GET /v1/report?from=RFC3339&to=RFC3339: one JSON line
// per hold created or changed in [from, to), in the order the fake stored
// them, drifts applied, then {"object":"report_end","rows":N}. Rows are read
// in batches and flushed as they go, so neither side holds the whole report.
func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := time.Parse(time.RFC3339Nano, q.Get("from"))
	if err != nil {
		writeError(w, invalid("from", "from must be an RFC 3339 time, got %q", q.Get("from")))
		return
	}
	to, err := time.Parse(time.RFC3339Nano, q.Get("to"))
	if err != nil {
		writeError(w, invalid("to", "to must be an RFC 3339 time, got %q", q.Get("to")))
		return
	}
	if !from.Before(to) {
		writeError(w, invalid("to", "to must be after from"))
		return
	}
	plan := s.faults.take(OpReport, "")
	s.sleep(r.Context().Done(), plan.latency)
	if plan.errStatus != 0 {
		writeError(w, unavailable(plan.errStatus))
		return
	}

	s.mu.Lock()
	drift := newDriftIndex(s.drifts)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	n := 0
	write := func(rows []Row) error {
		for _, row := range rows {
			if err := enc.Encode(reportLine{Object: objectReportRow, Row: row}); err != nil {
				return err
			}
			n++
		}
		return nil
	}
	batch := make([]Row, 0, reportBatch)
	for i, more := 0, true; more; {
		batch = batch[:0]
		s.mu.Lock()
		now := s.now()
		end := min(i+reportBatch, len(s.order))
		for ; i < end; i++ {
			if sl := &s.order[i]; sl.live == nil && !sl.cold.mayChangeWithin(from, to) {
				continue
			}
			if h := s.readSlotLocked(i); h.changedWithin(from, to, now) {
				batch = append(batch, h.row(now))
			}
		}
		more = i < len(s.order)
		s.mu.Unlock()
		for _, row := range batch {
			if write(drift.apply(row)) != nil {
				return
			}
		}
		if r.Context().Err() != nil || rc.Flush() != nil {
			return
		}
	}
	if write(drift.added(from, to)) != nil {
		return
	}
	if plan.timeout {
		_ = rc.Flush()
		s.hang(r)
	}
	_ = enc.Encode(reportEnd{Object: objectReportEnd, Rows: n})
}

// driftIndex finds the drifts of a row quickly.
type driftIndex struct {
	byRef       map[string][]Drift
	byPaymentID map[string][]Drift
	add         []Row
}

func newDriftIndex(drifts []Drift) driftIndex {
	d := driftIndex{byRef: map[string][]Drift{}, byPaymentID: map[string][]Drift{}}
	for _, x := range drifts {
		switch {
		case x.Kind == DriftAdd:
			d.add = append(d.add, *x.Row)
		case x.Ref != "":
			d.byRef[x.Ref] = append(d.byRef[x.Ref], x)
		default:
			d.byPaymentID[x.PaymentID] = append(d.byPaymentID[x.PaymentID], x)
		}
	}
	return d
}

// apply returns the rows the report shows for row: none when dropped, more
// than one when duplicated, altered as the drifts say.
func (d driftIndex) apply(row Row) []Row {
	drifts := d.byRef[row.Ref]
	if row.PaymentID != "" {
		drifts = append(slices.Clip(drifts), d.byPaymentID[row.PaymentID]...)
	}
	copies := 1
	for _, x := range drifts {
		switch x.Kind {
		case DriftDrop:
			return nil
		case DriftDuplicate:
			copies++
		case DriftStatus:
			row.Status = x.Status
		case DriftCurrency:
			row.Currency = x.Currency
		case DriftAmount:
			switch x.Field {
			case AmountAuthorized:
				row.AmountMinor = x.AmountMinor
			case AmountCaptured:
				row.CapturedMinor = x.AmountMinor
			case AmountRefunded:
				row.RefundedMinor = x.AmountMinor
			}
		case DriftPartAmount, DriftPartDrop, DriftPartAdd:
			row.Parts = x.applyToParts(row.Parts)
		}
	}
	out := make([]Row, copies)
	for i := range out {
		out[i] = row
	}
	return out
}

// added returns the added rows created or updated in [from, to).
func (d driftIndex) added(from, to time.Time) []Row {
	var out []Row
	for _, row := range d.add {
		in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
		if in(row.CreatedAt) || in(row.UpdatedAt) {
			out = append(out, row)
		}
	}
	return out
}
