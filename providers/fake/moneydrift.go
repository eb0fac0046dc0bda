package fake

import (
	"net/http"
	"slices"

	"github.com/payorch/payorch/providers"
)

// MoneyDriftKind names how a MoneyDrift alters the money listings.
type MoneyDriftKind string

// Money drift kinds.
const (
	// DriftFee shows the selected balance transaction with FeeMinor as its
	// fee, and its net following (gross − fee): the provider charged
	// another fee. The payout that paid it, if any, and that payout's own
	// movement follow too, so the payout still adds up: only the fee is
	// wrong.
	DriftFee MoneyDriftKind = "fee"
	// DriftBalanceDrop leaves the selected balance transaction out of the
	// listing (its payout's amount unchanged).
	DriftBalanceDrop MoneyDriftKind = "balance_transaction_drop"
	// DriftPayoutItemDrop shows the selected balance transaction without
	// its payout (payout_id empty), the payout's amount unchanged: the
	// payout no longer adds up.
	DriftPayoutItemDrop MoneyDriftKind = "payout_item_drop"
	// DriftPayoutItemAdd adds Item, a balance transaction the fake never
	// booked, to the selected payout, whose amount (and own movement)
	// grows by the item's net: the payout adds up, but with an item of
	// nothing we know.
	DriftPayoutItemAdd MoneyDriftKind = "payout_item_add"
	// DriftPayoutAmount shows the selected payout (and its own movement)
	// with AmountMinor, whatever other drifts do; its items unchanged.
	DriftPayoutAmount MoneyDriftKind = "payout_amount"
	// DriftPayoutStatus shows the selected payout with Status whatever the
	// clock says: failed, canceled, or in_transit (or pending) forever, a
	// payout that never arrives.
	DriftPayoutStatus MoneyDriftKind = "payout_status"
)

// maxDriftMinor bounds the amounts a MoneyDrift gives, so that applying
// them cannot overflow.
const maxDriftMinor = 1_000_000_000_000_000

// MoneyDrift alters the output of the balance transaction and payout
// listings, never what the fake booked, so reconciliation tests can make
// the provider's money disagree with what it should be. fee,
// balance_transaction_drop and payout_item_drop select a balance
// transaction by its id (BalanceTransaction); payout_item_add,
// payout_amount and payout_status a payout by its id (Payout): list them
// first, which makes the payouts due. Drifts apply in the order they were
// added, the last of a kind on one object winning.
type MoneyDrift struct {
	Kind               MoneyDriftKind `json:"kind"`
	BalanceTransaction string         `json:"balance_transaction,omitempty"`
	Payout             string         `json:"payout,omitempty"`
	// FeeMinor is the fee a DriftFee shows (0 to 10^15).
	FeeMinor int64 `json:"fee_minor,omitempty"`
	// AmountMinor is the amount a DriftPayoutAmount shows (0 to 10^15).
	AmountMinor int64 `json:"amount_minor,omitempty"`
	// Status is what a DriftPayoutStatus shows (a providers Payout
	// status).
	Status string `json:"status,omitempty"`
	// Item is the balance transaction a DriftPayoutItemAdd adds: a
	// non-zero GrossMinor (within ±10^15) is required; Type defaults to
	// charge, ID to a fresh one, Currency to the payout's (no other is
	// allowed), CreatedAt to the payout's time less PayoutDelayDays days;
	// FeeMinor (0 to 10^15) is as given, NetMinor is gross − fee,
	// PayoutID the payout's and AvailableOn the payout's time.
	Item *BalanceTransaction `json:"item,omitempty"`
}

// moneyView is the drifts of the money listings, read once per listing.
type moneyView struct {
	fee    map[string]int64  // balance transaction → fee shown
	drop   map[string]bool   // balance transactions left out
	unlink map[string]bool   // balance transactions shown without payout
	amount map[string]int64  // payout → amount shown, when not the stored one
	status map[string]string // payout → status shown
	added  []BalanceTransaction
}

// moneyViewLocked reads the money drifts. Called with s.mu held.
func (s *Server) moneyViewLocked() moneyView {
	v := moneyView{fee: map[string]int64{}, drop: map[string]bool{}, unlink: map[string]bool{},
		amount: map[string]int64{}, status: map[string]string{}}
	if len(s.moneyDrifts) == 0 {
		return v
	}
	delta, set := map[string]int64{}, map[string]int64{}
	for _, d := range s.moneyDrifts {
		switch d.Kind {
		case DriftFee:
			v.fee[d.BalanceTransaction] = d.FeeMinor
		case DriftBalanceDrop:
			v.drop[d.BalanceTransaction] = true
		case DriftPayoutItemDrop:
			v.unlink[d.BalanceTransaction] = true
		case DriftPayoutItemAdd:
			v.added = append(v.added, *d.Item)
			delta[d.Payout] += d.Item.NetMinor
		case DriftPayoutAmount:
			set[d.Payout] = d.AmountMinor
		case DriftPayoutStatus:
			v.status[d.Payout] = d.Status
		}
	}
	if len(v.fee) > 0 { // one pass over the movements, only with fee drifts
		for _, bt := range s.bts {
			if f, ok := v.fee[bt.id]; ok && bt.payoutID != "" {
				delta[bt.payoutID] += bt.fee - f
			}
		}
	}
	for _, p := range s.payouts {
		if d, ok := delta[p.id]; ok {
			v.amount[p.id] = p.amount + d
		}
		if a, ok := set[p.id]; ok {
			v.amount[p.id] = a
		}
	}
	return v
}

// knownPayoutStatus reports whether st is a payout status.
func knownPayoutStatus(st string) bool {
	switch st {
	case providers.PayoutPending, providers.PayoutInTransit, providers.PayoutPaid, providers.PayoutFailed, providers.PayoutCanceled:
		return true
	}
	return false
}

// checkMoneyDrift validates d, fills its item's defaults and checks that
// what it selects exists. Called with s.mu held.
func (s *Server) checkMoneyDrift(d *MoneyDrift) *apiError {
	switch d.Kind {
	case DriftFee, DriftBalanceDrop, DriftPayoutItemDrop:
		if d.Payout != "" || d.Item != nil || d.AmountMinor != 0 || d.Status != "" {
			return invalid("kind", "a %s drift takes balance_transaction (and fee_minor for fee) only", d.Kind)
		}
		return s.checkBalanceDrift(d)
	case DriftPayoutItemAdd, DriftPayoutAmount, DriftPayoutStatus:
		if d.BalanceTransaction != "" || d.FeeMinor != 0 {
			return invalid("kind", "a %s drift selects a payout, not a balance transaction", d.Kind)
		}
		return s.checkPayoutDrift(d)
	}
	return invalid("kind", "kind must be fee, balance_transaction_drop, payout_item_drop, payout_item_add, payout_amount or payout_status, got %q", d.Kind)
}

// checkBalanceDrift checks a drift that selects a balance transaction.
func (s *Server) checkBalanceDrift(d *MoneyDrift) *apiError {
	if d.Kind == DriftFee && (d.FeeMinor < 0 || d.FeeMinor > maxDriftMinor) {
		return invalid("fee_minor", "fee_minor must be within [0, %d]", int64(maxDriftMinor))
	}
	if d.Kind != DriftFee && d.FeeMinor != 0 {
		return invalid("fee_minor", "fee_minor applies to fee drifts only")
	}
	if d.BalanceTransaction == "" {
		return invalid("balance_transaction", "a %s drift needs balance_transaction", d.Kind)
	}
	i := slices.IndexFunc(s.bts, func(bt *balanceTxn) bool { return bt.id == d.BalanceTransaction })
	if i < 0 {
		return notFound("balance transaction", d.BalanceTransaction)
	}
	if s.bts[i].typ == providers.BalancePayout && d.Kind != DriftBalanceDrop {
		return invalid("balance_transaction", "a payout's own balance transaction has no fee and is no item; drift the payout instead")
	}
	return nil
}

// checkPayoutDrift checks a drift that selects a payout.
func (s *Server) checkPayoutDrift(d *MoneyDrift) *apiError {
	if d.Payout == "" {
		return invalid("payout", "a %s drift needs payout", d.Kind)
	}
	i := slices.IndexFunc(s.payouts, func(p *payoutRec) bool { return p.id == d.Payout })
	if i < 0 {
		return notFound("payout", d.Payout)
	}
	p := s.payouts[i]
	if (d.Item != nil) != (d.Kind == DriftPayoutItemAdd) {
		return invalid("item", "a payout_item_add drift needs an item, and only it takes one")
	}
	if (d.Status != "") != (d.Kind == DriftPayoutStatus) || (d.Status != "" && !knownPayoutStatus(d.Status)) {
		return invalid("status", "a payout_status drift needs a payout status (pending, in_transit, paid, failed, canceled), and only it takes one")
	}
	switch d.Kind {
	case DriftPayoutAmount:
		if d.AmountMinor < 0 || d.AmountMinor > maxDriftMinor {
			return invalid("amount_minor", "amount_minor must be within [0, %d]", int64(maxDriftMinor))
		}
	case DriftPayoutItemAdd:
		if d.AmountMinor != 0 {
			return invalid("amount_minor", "amount_minor applies to payout_amount drifts only")
		}
		return s.fillItem(d, p)
	default:
		if d.AmountMinor != 0 {
			return invalid("amount_minor", "amount_minor applies to payout_amount drifts only")
		}
	}
	return nil
}

// fillItem checks the item of a payout_item_add drift and fills its
// defaults from p.
func (s *Server) fillItem(d *MoneyDrift, p *payoutRec) *apiError {
	it := *d.Item
	switch {
	case it.GrossMinor == 0 || it.GrossMinor > maxDriftMinor || it.GrossMinor < -maxDriftMinor:
		return invalid("item.gross_minor", "an item needs a gross_minor other than 0, within ±%d", int64(maxDriftMinor))
	case it.FeeMinor < 0 || it.FeeMinor > maxDriftMinor:
		return invalid("item.fee_minor", "an item's fee_minor must be within [0, %d]", int64(maxDriftMinor))
	case it.Currency != "" && it.Currency != p.currency:
		return invalid("item.currency", "an item of payout %s is in %s", p.id, p.currency)
	case it.PayoutID != "" && it.PayoutID != p.id:
		return invalid("item.payout_id", "the item's payout is the drift's payout")
	}
	if it.Type == "" {
		it.Type = providers.BalanceCharge
	}
	switch it.Type {
	case providers.BalanceCharge, providers.BalanceRefund, providers.BalanceDispute, providers.BalanceAdjustment:
	default:
		return invalid("item.type", "an item's type must be charge, refund, dispute or adjustment, got %q", it.Type)
	}
	if it.ID == "" {
		it.ID = newID("fbt_")
	}
	if it.CreatedAt.IsZero() {
		it.CreatedAt = p.created.AddDate(0, 0, -s.cfg.PayoutDelayDays)
	}
	it.Currency, it.PayoutID, it.AvailableOn = p.currency, p.id, p.created
	it.NetMinor = it.GrossMinor - it.FeeMinor
	d.Item = &it
	return nil
}

// AddMoneyDrift adds d to the money listings' drifts. It fails with an
// *apiError (400 invalid_request, 404 resource_missing) when d is invalid
// or selects nothing the fake has.
func (s *Server) AddMoneyDrift(d MoneyDrift) (MoneyDrift, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A payout due by now can be selected even if nobody listed it yet.
	if s.settleLocked(s.now()) {
		s.persistLocked()
	}
	if e := s.checkMoneyDrift(&d); e != nil {
		return MoneyDrift{}, e
	}
	s.moneyDrifts = append(s.moneyDrifts, d)
	s.persistLocked()
	return d, nil
}

// ClearMoneyDrift removes every money drift.
func (s *Server) ClearMoneyDrift() {
	s.mu.Lock()
	if len(s.moneyDrifts) > 0 {
		s.moneyDrifts = nil
		s.persistLocked()
	}
	s.mu.Unlock()
}

// handleMoneyDrift serves POST /_admin/money/drift: 201 with the drift as
// stored (an added item with its defaults).
func (s *Server) handleMoneyDrift(w http.ResponseWriter, r *http.Request) {
	var d MoneyDrift
	if e := decodeBody(w, r, &d); e != nil {
		writeError(w, e)
		return
	}
	d, err := s.AddMoneyDrift(d)
	if err != nil {
		writeError(w, err.(*apiError))
		return
	}
	writeJSON(w, http.StatusCreated, d)
}

func (s *Server) handleClearMoneyDrift(w http.ResponseWriter, _ *http.Request) {
	s.ClearMoneyDrift()
	w.WriteHeader(http.StatusNoContent)
}
