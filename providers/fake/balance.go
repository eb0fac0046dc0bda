package fake

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/payorch/payorch/providers"
)

// BalanceTransaction is one movement of the fake's balance as it travels
// on the wire (GET /v1/balance_transactions) and in the state file.
type BalanceTransaction struct {
	ID string `json:"id"`
	// Type is one of providers' Balance constants: charge, refund,
	// dispute, adjustment (drifts only) or payout.
	Type string `json:"type"`
	// Source is the hold a charge captured, the refund, the dispute, the
	// payout.
	Source       string `json:"source"`
	HoldRef      string `json:"hold_ref,omitempty"`
	PaymentID    string `json:"payment_id,omitempty"`
	OperationKey string `json:"operation_key,omitempty"`
	GrossMinor   int64  `json:"gross_minor"`
	FeeMinor     int64  `json:"fee_minor"`
	NetMinor     int64  `json:"net_minor"`
	Currency     string `json:"currency"`
	// PayoutID is the payout that paid it out, "" while none has.
	PayoutID    string    `json:"payout_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	AvailableOn time.Time `json:"available_on"`
}

// BalanceTransaction converts b to the seam's type.
func (b BalanceTransaction) BalanceTransaction() providers.BalanceTransaction {
	return providers.BalanceTransaction{
		ID: b.ID, Type: b.Type, Source: b.Source, HoldRef: b.HoldRef, PaymentID: b.PaymentID,
		OperationKey: b.OperationKey, GrossMinor: b.GrossMinor, FeeMinor: b.FeeMinor, NetMinor: b.NetMinor,
		Currency: b.Currency, PayoutID: b.PayoutID, CreatedAt: b.CreatedAt, AvailableOn: b.AvailableOn,
	}
}

// stored is bt as the state file keeps it.
func (bt *balanceTxn) stored() BalanceTransaction {
	return BalanceTransaction{
		ID: bt.id, Type: bt.typ, Source: bt.source, HoldRef: bt.holdRef, PaymentID: bt.paymentID,
		OperationKey: bt.opKey, GrossMinor: bt.gross, FeeMinor: bt.fee, NetMinor: netOf(bt.gross, bt.fee),
		Currency: bt.currency, PayoutID: bt.payoutID, CreatedAt: bt.created, AvailableOn: bt.availableOn,
	}
}

// shown is bt as the listing shows it, drifts applied; false when a drift
// leaves it out.
func (bt *balanceTxn) shown(v *moneyView) (BalanceTransaction, bool) {
	if v.drop[bt.id] {
		return BalanceTransaction{}, false
	}
	b := bt.stored()
	if f, ok := v.fee[bt.id]; ok {
		b.FeeMinor = f
	}
	if a, ok := v.amount[bt.payoutID]; ok && bt.typ == providers.BalancePayout {
		b.GrossMinor = -a
	}
	b.NetMinor = netOf(b.GrossMinor, b.FeeMinor)
	if v.unlink[bt.id] {
		b.PayoutID = ""
	}
	return b, true
}

// Objects of the listings' lines: every item, then one end marker carrying
// the number of items, so a cut stream is told from a complete one.
const (
	objectBalanceTransaction = "balance_transaction"
	objectBalanceEnd         = "balance_transactions_end"
	objectPayout             = "payout"
	objectPayoutEnd          = "payouts_end"
)

// balanceLine is one line of GET /v1/balance_transactions.
type balanceLine struct {
	Object string `json:"object"`
	BalanceTransaction
}

// listEnd is the last line of a complete listing.
type listEnd struct {
	Object string `json:"object"`
	Count  int    `json:"count"`
}

// window is the [from, to) a listing asks for.
type window struct{ from, to time.Time }

func (w window) holds(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// parseWindow reads a listing's from and to (RFC 3339, from before to).
func parseWindow(r *http.Request) (window, *apiError) {
	q := r.URL.Query()
	from, err := time.Parse(time.RFC3339Nano, q.Get("from"))
	if err != nil {
		return window{}, invalid("from", "from must be an RFC 3339 time, got %q", q.Get("from"))
	}
	to, err := time.Parse(time.RFC3339Nano, q.Get("to"))
	if err != nil {
		return window{}, invalid("to", "to must be an RFC 3339 time, got %q", q.Get("to"))
	}
	if !from.Before(to) {
		return window{}, invalid("to", "to must be after from")
	}
	return window{from: from, to: to}, nil
}

// startListing validates a money listing's window, then opens it
// (openListing). false: it answered already (an error).
func (s *Server) startListing(w http.ResponseWriter, r *http.Request, op Op) (window, faultPlan, moneyView, bool) {
	win, e := parseWindow(r)
	if e != nil {
		writeError(w, e)
		return window{}, faultPlan{}, moneyView{}, false
	}
	plan, view, ok := s.openListing(w, r, op)
	return win, plan, view, ok
}

// openListing applies op's faults to a money listing, makes the payouts
// due by now and reads the drifts. false: it answered already (an
// error).
func (s *Server) openListing(w http.ResponseWriter, r *http.Request, op Op) (faultPlan, moneyView, bool) {
	plan := s.faults.take(op, "")
	s.sleep(r.Context().Done(), plan.latency)
	if plan.errStatus != 0 {
		writeError(w, unavailable(plan.errStatus))
		return faultPlan{}, moneyView{}, false
	}
	s.mu.Lock()
	if s.settleLocked(s.now()) {
		s.persistLocked()
	}
	view := s.moneyViewLocked()
	s.mu.Unlock()
	return plan, view, true
}

// streamList writes a listing as JSON lines: the lines of each batch next
// returns (more false with the last), flushed as they go, then the end
// marker {"object": end, "count": N}; a timeout fault cuts it before the
// marker.
func (s *Server) streamList(w http.ResponseWriter, r *http.Request, plan faultPlan, end string, next func() (lines []any, more bool)) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	n := 0
	for more := true; more; {
		var lines []any
		lines, more = next()
		for _, l := range lines {
			if enc.Encode(l) != nil {
				return
			}
			n++
		}
		if r.Context().Err() != nil || rc.Flush() != nil {
			return
		}
	}
	if plan.timeout {
		s.hang(r)
	}
	_ = enc.Encode(listEnd{Object: end, Count: n})
}

// handleBalanceTransactions serves GET /v1/balance_transactions?from=&to=:
// one JSON line per movement created in [from, to), in the order the fake
// booked them (a payout's own movement when its payout was made), drifts
// applied, then {"object":"balance_transactions_end","count":N}. The
// payouts due by now are made first, so each movement shows the payout
// that paid it.
func (s *Server) handleBalanceTransactions(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("payout") {
		s.handlePayoutItems(w, r)
		return
	}
	win, plan, view, ok := s.startListing(w, r, OpBalanceTransactions)
	if !ok {
		return
	}
	i := 0
	s.streamList(w, r, plan, objectBalanceEnd, func() ([]any, bool) {
		var lines []any
		s.mu.Lock()
		end := min(i+reportBatch, len(s.bts))
		for ; i < end; i++ {
			if bt := s.bts[i]; win.holds(bt.created) {
				if b, ok := bt.shown(&view); ok {
					lines = append(lines, balanceLine{Object: objectBalanceTransaction, BalanceTransaction: b})
				}
			}
		}
		more := i < len(s.bts)
		s.mu.Unlock()
		if !more {
			for _, b := range view.added {
				if win.holds(b.CreatedAt) {
					lines = append(lines, balanceLine{Object: objectBalanceTransaction, BalanceTransaction: b})
				}
			}
		}
		return lines, more
	})
}

// handlePayoutItems serves GET /v1/balance_transactions?payout=ID: one
// JSON line per movement the payout paid out, its own included (as
// Stripe lists them), whenever created, in booking order, drifts applied
// (an item a drift unlinks is not listed, one it adds is), then the end
// marker. A payout the fake never made is 404 resource_missing; a window
// is refused, as the payout's list is whole.
func (s *Server) handlePayoutItems(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get("payout")
	if q.Has("from") || q.Has("to") {
		writeError(w, invalid("payout", "a payout's items are listed whole: from and to do not apply"))
		return
	}
	plan, view, ok := s.openListing(w, r, OpBalanceTransactions)
	if !ok {
		return
	}
	s.mu.Lock()
	known := slices.ContainsFunc(s.payouts, func(p *payoutRec) bool { return p.id == id })
	s.mu.Unlock()
	if !known {
		writeError(w, notFound("payout", id))
		return
	}
	i := 0
	s.streamList(w, r, plan, objectBalanceEnd, func() ([]any, bool) {
		var lines []any
		s.mu.Lock()
		end := min(i+reportBatch, len(s.bts))
		for ; i < end; i++ {
			if bt := s.bts[i]; bt.payoutID == id {
				if b, ok := bt.shown(&view); ok && b.PayoutID == id {
					lines = append(lines, balanceLine{Object: objectBalanceTransaction, BalanceTransaction: b})
				}
			}
		}
		more := i < len(s.bts)
		s.mu.Unlock()
		if !more {
			for _, b := range view.added {
				if b.PayoutID == id {
					lines = append(lines, balanceLine{Object: objectBalanceTransaction, BalanceTransaction: b})
				}
			}
		}
		return lines, more
	})
}
