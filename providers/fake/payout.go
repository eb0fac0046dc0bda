package fake

import (
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
)

// Payout is one payout of the fake's balance to the merchant's bank, as it
// travels on the wire (GET /v1/payouts) and, without Status, in the state
// file.
type Payout struct {
	ID          string `json:"id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	// Status is in_transit until ArrivalDate (by the fake's clock), then
	// paid, unless a drift says otherwise.
	Status string `json:"status,omitempty"`
	// ArrivalDate is midnight UTC of the day after the payout's.
	ArrivalDate time.Time `json:"arrival_date"`
	// Reference is what the bank statement shows: "FAKEPAYOUT-" and the
	// id's hex digits in upper case.
	Reference string    `json:"reference"`
	CreatedAt time.Time `json:"created_at"`
}

// Payout converts p to the seam's type.
func (p Payout) Payout() providers.Payout {
	return providers.Payout{
		ID: p.ID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status,
		ArrivalDate: p.ArrivalDate, Reference: p.Reference, CreatedAt: p.CreatedAt,
	}
}

// stored is p as the state file keeps it (no status: the clock decides).
func (p *payoutRec) stored() Payout {
	return Payout{ID: p.id, AmountMinor: p.amount, Currency: p.currency, ArrivalDate: p.arrival,
		Reference: p.reference, CreatedAt: p.created}
}

// shown is p as the listing shows it at now, drifts applied.
func (p *payoutRec) shown(now time.Time, v *moneyView) Payout {
	out := p.stored()
	out.Status = p.status(now)
	if a, ok := v.amount[p.id]; ok {
		out.AmountMinor = a
	}
	if st, ok := v.status[p.id]; ok {
		out.Status = st
	}
	return out
}

// payoutLine is one line of GET /v1/payouts.
type payoutLine struct {
	Object string `json:"object"`
	Payout
}

// handlePayouts serves GET /v1/payouts?from=&to=: one JSON line per payout
// created in [from, to) (made first when due by now), in the order they
// were made, drifts applied, then {"object":"payouts_end","count":N}. A
// payout's items are the balance transactions whose payout_id is its id,
// its own movement (type payout) aside.
func (s *Server) handlePayouts(w http.ResponseWriter, r *http.Request) {
	win, plan, view, ok := s.startListing(w, r, OpPayouts)
	if !ok {
		return
	}
	i := 0
	s.streamList(w, r, plan, objectPayoutEnd, func() ([]any, bool) {
		var lines []any
		s.mu.Lock()
		now := s.now()
		end := min(i+reportBatch, len(s.payouts))
		for ; i < end; i++ {
			if p := s.payouts[i]; win.holds(p.created) {
				lines = append(lines, payoutLine{Object: objectPayout, Payout: p.shown(now, &view)})
			}
		}
		more := i < len(s.payouts)
		s.mu.Unlock()
		return lines, more
	})
}
