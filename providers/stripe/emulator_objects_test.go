package stripe

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The emulator's objects. Endpoint methods run with the emulator's mu held.

type emuIntent struct {
	id, currency, description, paymentMethod string
	metadata                                 map[string]string
	status, cancellationReason               string
	amount, capturable, received             int64
	created, canceledAt                      int64
	charge                                   string
	lastError                                map[string]any
}

type emuCharge struct {
	id, intent, currency, status, failureCode string
	amount, captured, refunded                int64
	isCaptured                                bool
	created, captureBefore                    int64
}

type emuRefund struct {
	id, intent, charge, currency string
	amount, created              int64
	// release marks the refund Stripe books for the uncaptured rest of a
	// partial capture: no refund to the customer.
	release bool
}

type emuBT struct {
	id, typ, category, currency, source string
	amount, fee, created                int64
}

type emuEvent struct {
	id, typ string
	created int64
	object  map[string]any
}

// holdLife is how long an authorized hold lasts at Stripe.
const holdLife = 7 * 24 * time.Hour

// Stripe's test payment methods the emulator knows, and their declines.
var emuDeclines = map[string]string{
	"pm_card_visa":                            "",
	"pm_card_chargeDeclined":                  "generic_decline",
	"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
}

func now() int64 { return time.Now().Unix() }

func (e *emulator) createIntent(_ *http.Request, f url.Values) answer {
	amount, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	if err != nil || amount <= 0 || f.Get("currency") == "" {
		return invalidParam("amount")
	}
	if f.Get("capture_method") != "manual" || f.Get("payment_method_types[0]") != "card" {
		e.t.Errorf("emulator: PaymentIntent created with capture_method %q, payment_method_types %q",
			f.Get("capture_method"), f.Get("payment_method_types[0]"))
	}
	pm := f.Get("payment_method")
	if _, ok := emuDeclines[pm]; !ok {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such PaymentMethod: "+pm, "payment_method")
	}
	pi := &emuIntent{
		id: e.newID("pi"), amount: amount, currency: f.Get("currency"), description: f.Get("description"),
		paymentMethod: pm, metadata: map[string]string{}, status: "requires_confirmation", created: now(),
	}
	for k, v := range f {
		if name, ok := strings.CutPrefix(k, "metadata["); ok {
			pi.metadata[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	e.intents[pi.id] = pi
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

// intent finds the PaymentIntent of the path.
func (e *emulator) intent(r *http.Request) (*emuIntent, *answer) {
	pi := e.intents[r.PathValue("id")]
	if pi == nil {
		a := stripeError(http.StatusNotFound, "invalid_request_error", "resource_missing",
			"No such payment_intent: '"+r.PathValue("id")+"'", "intent")
		return nil, &a
	}
	return pi, nil
}

func (e *emulator) unexpectedState(pi *emuIntent, verb string) answer {
	return withIntent(stripeError(http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state",
		"You cannot "+verb+" this PaymentIntent because it has a status of "+pi.status+".", ""), e.intentJSON(pi, false))
}

func (e *emulator) confirmIntent(r *http.Request, f url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	if pi.status != "requires_confirmation" {
		return e.unexpectedState(pi, "confirm")
	}
	ch := &emuCharge{id: e.newID("ch"), intent: pi.id, currency: pi.currency, amount: pi.amount, created: now()}
	e.charges[ch.id] = ch
	pi.charge = ch.id
	if decline := emuDeclines[pi.paymentMethod]; decline != "" {
		ch.status, ch.failureCode = "failed", "card_declined"
		pi.status = "requires_payment_method"
		pi.lastError = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": decline,
			"message": "Your card was declined.", "charge": ch.id}
		a := stripeError(http.StatusPaymentRequired, "card_error", "card_declined", "Your card was declined.", "")
		errBody := a.body.(map[string]any)["error"].(map[string]any)
		errBody["decline_code"], errBody["charge"] = decline, ch.id
		return withIntent(a, e.intentJSON(pi, false))
	}
	ch.status, ch.captureBefore = "succeeded", time.Unix(ch.created, 0).Add(holdLife).Unix()
	pi.status, pi.capturable = "requires_capture", pi.amount
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

func (e *emulator) captureIntent(r *http.Request, f url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	if pi.status != "requires_capture" {
		return e.unexpectedState(pi, "capture")
	}
	amount := pi.capturable
	if s := f.Get("amount_to_capture"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return invalidParam("amount_to_capture")
		}
		if n > pi.capturable {
			return stripeError(http.StatusBadRequest, "invalid_request_error", "amount_too_large",
				"amount_to_capture must be less than or equal to the amount_capturable", "amount_to_capture")
		}
		amount = n
	}
	ch := e.charges[pi.charge]
	ch.captured, ch.isCaptured = amount, true
	pi.status, pi.received, pi.capturable = "succeeded", amount, 0
	t := now()
	e.balanceTx("charge", "charge", ch.id, pi.currency, pi.amount, t)
	if rest := pi.amount - amount; rest > 0 {
		re := &emuRefund{id: e.newID("re"), intent: pi.id, charge: ch.id, currency: pi.currency, amount: rest, created: t, release: true}
		e.refunds[re.id] = re
		ch.refunded += rest
		e.balanceTx("refund", "partial_capture_reversal", re.id, pi.currency, -rest, t)
	}
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

func (e *emulator) cancelIntent(r *http.Request, f url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	switch pi.status {
	case "requires_payment_method", "requires_confirmation", "requires_capture", "requires_action":
	default:
		return e.unexpectedState(pi, "cancel")
	}
	e.cancel(pi, f.Get("cancellation_reason"))
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

// cancel voids pi; Stripe refunds (releases) an authorized charge whole.
func (e *emulator) cancel(pi *emuIntent, reason string) {
	if ch := e.charges[pi.charge]; ch != nil && ch.status == "succeeded" && !ch.isCaptured {
		ch.refunded = ch.amount
	}
	pi.status, pi.cancellationReason, pi.canceledAt, pi.capturable = "canceled", reason, now(), 0
	e.events = append(e.events, &emuEvent{id: e.newID("evt"), typ: "payment_intent.canceled",
		created: pi.canceledAt, object: e.intentJSON(pi, false)})
}

func (e *emulator) createRefund(_ *http.Request, f url.Values) answer {
	pi := e.intents[f.Get("payment_intent")]
	if pi == nil {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "resource_missing",
			"No such payment_intent: '"+f.Get("payment_intent")+"'", "payment_intent")
	}
	if pi.status != "succeeded" {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "charge_not_refundable",
			"This PaymentIntent has no successful charge to refund.", "payment_intent")
	}
	ch := e.charges[pi.charge]
	left := ch.captured
	for _, re := range e.refunds {
		if re.charge == ch.id && !re.release {
			left -= re.amount
		}
	}
	if left <= 0 {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "charge_already_refunded",
			"Charge "+ch.id+" has already been refunded.", "")
	}
	amount := left
	if s := f.Get("amount"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return invalidParam("amount")
		}
		if n > left {
			// Stripe gives this refusal no code, only the parameter.
			return stripeError(http.StatusBadRequest, "invalid_request_error", "",
				"Refund amount is greater than unrefunded amount on charge", "amount")
		}
		amount = n
	}
	re := &emuRefund{id: e.newID("re"), intent: pi.id, charge: ch.id, currency: pi.currency, amount: amount, created: now()}
	e.refunds[re.id] = re
	ch.refunded += amount
	e.balanceTx("refund", "refund", re.id, pi.currency, -amount, re.created)
	return answer{status: http.StatusOK, body: refundJSON(re)}
}

func (e *emulator) balanceTx(typ, category, source, currency string, amount, created int64) {
	fee := int64(0)
	if typ == "charge" {
		fee = 25 + amount*14/1000
	}
	e.bts = append(e.bts, &emuBT{id: e.newID("txn"), typ: typ, category: category, currency: currency,
		source: source, amount: amount, fee: fee, created: created})
}

func (e *emulator) getIntent(r *http.Request, q url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(q, "latest_charge"))}
}

// listed is one object of a list, for pagination.
type listed struct {
	id      string
	created int64
	seq     int
	json    func() map[string]any
}

func (e *emulator) listIntents(_ *http.Request, q url.Values) answer {
	var items []listed
	for _, pi := range e.intents {
		items = append(items, listed{id: pi.id, created: pi.created, json: func() map[string]any {
			return e.intentJSON(pi, expands(q, "data.latest_charge"))
		}})
	}
	return page("/v1/payment_intents", items, q)
}

func (e *emulator) listBalance(_ *http.Request, q url.Values) answer {
	var items []listed
	for i, bt := range e.bts {
		items = append(items, listed{id: bt.id, created: bt.created, seq: i, json: func() map[string]any {
			var src any = bt.source
			if expands(q, "data.source") {
				if re := e.refunds[bt.source]; re != nil {
					src = refundJSON(re)
				} else {
					src = e.chargeJSON(e.charges[bt.source])
				}
			}
			return map[string]any{"id": bt.id, "object": "balance_transaction", "amount": bt.amount, "fee": bt.fee,
				"net": bt.amount - bt.fee, "currency": bt.currency, "created": bt.created, "type": bt.typ,
				"reporting_category": bt.category, "status": "available", "source": src}
		}})
	}
	return page("/v1/balance_transactions", items, q)
}

func (e *emulator) listEvents(_ *http.Request, q url.Values) answer {
	var items []listed
	for i, ev := range e.events {
		if t := q.Get("type"); t != "" && t != ev.typ {
			continue
		}
		items = append(items, listed{id: ev.id, created: ev.created, seq: i, json: func() map[string]any {
			return map[string]any{"id": ev.id, "object": "event", "type": ev.typ, "created": ev.created,
				"api_version": "2023-10-16", "livemode": false, "data": map[string]any{"object": ev.object}}
		}})
	}
	return page("/v1/events", items, q)
}

// page answers one page of a list: newest first, created[...] filters,
// starting_after and limit (default 10, at most 100).
func page(path string, items []listed, q url.Values) answer {
	for op, test := range map[string]func(c, v int64) bool{
		"gte": func(c, v int64) bool { return c >= v }, "gt": func(c, v int64) bool { return c > v },
		"lte": func(c, v int64) bool { return c <= v }, "lt": func(c, v int64) bool { return c < v },
	} {
		if s := q.Get("created[" + op + "]"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return invalidParam("created")
			}
			items = slices.DeleteFunc(items, func(it listed) bool { return !test(it.created, v) })
		}
	}
	slices.SortFunc(items, func(a, b listed) int {
		return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.seq, a.seq), strings.Compare(b.id, a.id))
	})
	if after := q.Get("starting_after"); after != "" {
		i := slices.IndexFunc(items, func(it listed) bool { return it.id == after })
		if i < 0 {
			return invalidParam("starting_after")
		}
		items = items[i+1:]
	}
	limit := 10
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return invalidParam("limit")
		}
		limit = n
	}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	data := make([]map[string]any, len(items))
	for i, it := range items {
		data[i] = it.json()
	}
	return answer{status: http.StatusOK, body: map[string]any{"object": "list", "url": path, "has_more": more, "data": data}}
}

func (e *emulator) intentJSON(pi *emuIntent, expandCharge bool) map[string]any {
	m := map[string]any{
		"id": pi.id, "object": "payment_intent", "amount": pi.amount, "amount_capturable": pi.capturable,
		"amount_received": pi.received, "capture_method": "manual", "client_secret": pi.id + "_secret_emulated",
		"confirmation_method": "automatic", "created": pi.created, "currency": pi.currency,
		"description": nullable(pi.description), "metadata": pi.metadata, "livemode": false,
		"payment_method": pi.paymentMethod, "payment_method_types": []string{"card"}, "status": pi.status,
		"canceled_at": nil, "cancellation_reason": nullable(pi.cancellationReason),
		"last_payment_error": nil, "latest_charge": nil,
	}
	if pi.canceledAt != 0 {
		m["canceled_at"] = pi.canceledAt
	}
	if pi.lastError != nil {
		m["last_payment_error"] = pi.lastError
	}
	if pi.charge != "" {
		m["latest_charge"] = pi.charge
		if expandCharge {
			m["latest_charge"] = e.chargeJSON(e.charges[pi.charge])
		}
	}
	return m
}

func (e *emulator) chargeJSON(ch *emuCharge) map[string]any {
	card := map[string]any{"brand": "visa", "last4": "4242", "capture_before": nil}
	if ch.captureBefore != 0 {
		card["capture_before"] = ch.captureBefore
	}
	return map[string]any{
		"id": ch.id, "object": "charge", "amount": ch.amount, "amount_captured": ch.captured,
		"amount_refunded": ch.refunded, "captured": ch.isCaptured, "created": ch.created, "currency": ch.currency,
		"paid": ch.status == "succeeded", "refunded": ch.refunded == ch.amount, "status": ch.status,
		"failure_code": nullable(ch.failureCode), "payment_intent": ch.intent,
		"payment_method_details": map[string]any{"type": "card", "card": card},
	}
}

func refundJSON(re *emuRefund) map[string]any {
	return map[string]any{"id": re.id, "object": "refund", "amount": re.amount, "currency": re.currency,
		"charge": re.charge, "payment_intent": re.intent, "status": "succeeded", "created": re.created}
}

// lapse lets the hold of PaymentIntent id lapse, as Stripe does after its
// capture_before: canceled, reason automatic, the charge released.
func (e *emulator) lapse(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancel(e.intents[id], "automatic")
}

// backdate moves PaymentIntent id and its charge d into the past, as if
// created on an earlier day.
func (e *emulator) backdate(id string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pi := e.intents[id]
	pi.created -= int64(d / time.Second)
	if ch := e.charges[pi.charge]; ch != nil {
		ch.created -= int64(d / time.Second)
		ch.captureBefore -= int64(d / time.Second)
	}
}

// expands reports whether the request expands field.
func expands(q url.Values, field string) bool {
	for k, v := range q {
		if strings.HasPrefix(k, "expand[") && slices.Contains(v, field) {
			return true
		}
	}
	return false
}

func invalidParam(param string) answer {
	a := stripeError(http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "Invalid "+param, param)
	a.noStore = true
	return a
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
