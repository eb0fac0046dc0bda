package stripe

import (
	"net/http"
	"net/url"
	"time"
)

// The emulator's money movements beyond captures and refunds: disputes,
// other balance transactions and payouts, planted by the test (Stripe
// makes them itself, on its own schedule). Endpoint methods run with mu
// held; the planting helpers take it.

// emuAvailableAfter is when a transaction's funds become available: the
// emulator's T+2.
const emuAvailableAfter = int64(2 * 24 * time.Hour / time.Second)

type emuDispute struct {
	id, intent, charge, currency string
	amount, created              int64
}

type emuPayout struct {
	id, currency, status, descriptor string
	amount, created, arrival         int64
	automatic                        bool
	// tx is the payout's own balance transaction.
	tx string
}

// emuPayoutSpec is a payout the test plants: it pays the listed balance
// transactions out.
type emuPayoutSpec struct {
	items      []string
	created    int64
	manual     bool
	status     string // default paid
	descriptor string
}

// lastBT returns the id of the latest balance transaction booked.
func (e *emulator) lastBT() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bts[len(e.bts)-1].id
}

// balanceIDs returns the ids of every balance transaction booked so far.
func (e *emulator) balanceIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for _, bt := range e.bts {
		ids = append(ids, bt.id)
	}
	return ids
}

// payoutTx returns the id of payout id's own balance transaction.
func (e *emulator) payoutTx(id string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.payouts[id].tx
}

// dispute books a dispute of amount against PaymentIntent ref's charge, as
// Stripe does: an adjustment of category dispute withdrawing the amount,
// with Stripe's dispute fee; it returns the transaction's id.
func (e *emulator) dispute(ref string, amount, fee int64) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	pi := e.intents[ref]
	dp := &emuDispute{id: e.newID("dp"), intent: pi.id, charge: pi.charge, currency: pi.currency, amount: amount, created: now()}
	e.disputes[dp.id] = dp
	e.balanceTx("adjustment", "dispute", dp.id, pi.currency, -amount, dp.created)
	bt := e.bts[len(e.bts)-1]
	bt.fee = fee
	return bt.id
}

// book plants any other balance transaction (a won dispute's reversal, a
// Stripe fee, a failed payout's return) and returns its id.
func (e *emulator) book(typ, category, source, currency string, amount, fee int64) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.balanceTx(typ, category, source, currency, amount, now())
	bt := e.bts[len(e.bts)-1]
	bt.fee = fee
	return bt.id
}

// backdateBT moves balance transaction id d into the past.
func (e *emulator) backdateBT(id string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, bt := range e.bts {
		if bt.id == id {
			bt.created -= int64(d / time.Second)
			bt.availableOn -= int64(d / time.Second)
		}
	}
}

// payOut plants a payout of the spec's items, in their currency, of their
// net sum, with its own balance transaction (category payout, negative) at
// its creation, and returns its id. Arrival is two days after creation.
func (e *emulator) payOut(s emuPayoutSpec) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	po := &emuPayout{id: e.newID("po"), status: s.status, descriptor: s.descriptor, created: s.created,
		arrival: s.created + emuAvailableAfter, automatic: !s.manual}
	if po.status == "" {
		po.status = "paid"
	}
	for _, bt := range e.bts {
		for _, id := range s.items {
			if bt.id == id {
				if bt.payout != "" {
					e.t.Fatalf("emulator: %s paid out twice", id)
				}
				bt.payout, po.currency, po.amount = po.id, bt.currency, po.amount+bt.amount-bt.fee
			}
		}
	}
	e.payouts[po.id] = po
	e.balanceTx("payout", "payout", po.id, po.currency, -po.amount, po.created)
	own := e.bts[len(e.bts)-1]
	own.payout, own.availableOn, po.tx = po.id, po.created, own.id
	return po.id
}

// checkPayoutFilter answers what Stripe answers a payout filter naming no
// payout, and fails the test on a manual payout's: Stripe lists the
// transactions of automatic payouts only (the emulator's refusal is a
// guess at Stripe's wording).
func (e *emulator) checkPayoutFilter(id string) *answer {
	po := e.payouts[id]
	if po == nil {
		a := stripeError(http.StatusNotFound, "invalid_request_error", "resource_missing", "No such payout: '"+id+"'", "payout")
		return &a
	}
	if !po.automatic {
		e.t.Errorf("emulator: transactions of manual payout %s asked for", id)
		a := stripeError(http.StatusBadRequest, "invalid_request_error", "",
			"Balance transaction history can only be filtered on automatic transfers, not manual.", "payout")
		return &a
	}
	return nil
}

func (e *emulator) listPayouts(_ *http.Request, q url.Values) answer {
	var items []listed
	for _, po := range e.payouts {
		items = append(items, listed{id: po.id, created: po.created, json: func() map[string]any {
			return e.payoutJSON(po)
		}})
	}
	return page("/v1/payouts", items, q)
}

func (e *emulator) payoutJSON(po *emuPayout) map[string]any {
	return map[string]any{"id": po.id, "object": "payout", "amount": po.amount, "arrival_date": po.arrival,
		"automatic": po.automatic, "balance_transaction": po.tx, "created": po.created, "currency": po.currency,
		"livemode": false, "method": "standard", "source_type": "card", "statement_descriptor": nullable(po.descriptor),
		"status": po.status, "type": "bank_account", "metadata": map[string]string{}}
}

// sourceJSON is a balance transaction's source expanded: a charge, refund,
// dispute or payout; any other source stays its id.
func (e *emulator) sourceJSON(id string) any {
	switch {
	case e.charges[id] != nil:
		return e.chargeJSON(e.charges[id])
	case e.refunds[id] != nil:
		return refundJSON(e.refunds[id])
	case e.payouts[id] != nil:
		return e.payoutJSON(e.payouts[id])
	case e.disputes[id] != nil:
		dp := e.disputes[id]
		return map[string]any{"id": dp.id, "object": "dispute", "amount": dp.amount, "charge": dp.charge,
			"payment_intent": dp.intent, "currency": dp.currency, "created": dp.created,
			"reason": "fraudulent", "status": "needs_response"}
	}
	return id
}
