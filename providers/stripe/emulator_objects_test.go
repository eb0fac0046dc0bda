package stripe

import (
	"cmp"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/payorch/payorch/providers"
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
	// card is the card sent with the confirmation (payment_method_data).
	card *emuCard
	// threeDS is the creation's request_three_d_secure; returnURL the
	// confirmation's return_url, shown in next_action while status is
	// requires_action.
	threeDS, returnURL string
	// flex is what the creation asked for of the flexible-hold features.
	flex emuFlexAsked
}

// emuCard is what the emulator keeps of a card it was sent: what Stripe
// shows of it, and the outcome its number gives.
type emuCard struct {
	brand, last4      string
	expMonth, expYear int
	code, declineCode string
	// threeDS is what the card's issuer does about authentication
	// (emuThreeDS).
	threeDS string
}

type emuCharge struct {
	card                                      *emuCard
	id, intent, currency, status, failureCode string
	amount, captured, refunded                int64
	isCaptured                                bool
	created, captureBefore                    int64
	// flex is what the card was granted (emuFlex), nil when nothing was
	// asked for.
	flex *emuFlex
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
	amount, fee, created, availableOn   int64
	// payout is the payout that paid it out ("" while none has; a
	// payout's own transaction names it).
	payout string
}

type emuEvent struct {
	id, typ string
	created int64
	object  map[string]any
	// key is the Idempotency-Key of the request that caused the event, ""
	// when none did (the cardholder, or Stripe itself).
	key string
}

// holdLife is how long an authorized hold lasts at Stripe.
const holdLife = 7 * 24 * time.Hour

// Stripe's test payment methods the emulator knows, and their declines.
var emuDeclines = map[string]string{
	"pm_card_visa":                            "",
	"pm_card_mastercard":                      "",
	"pm_card_amex":                            "",
	"pm_card_chargeDeclined":                  "generic_decline",
	"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
	"pm_card_threeDSecure2Required":           "",
	"pm_card_threeDSecureOptional":            "",
	"pm_card_authenticationRequired":          "",
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
	// No payment method: a card comes with the confirmation.
	pm := f.Get("payment_method")
	status := "requires_confirmation"
	if _, ok := emuDeclines[pm]; pm == "" {
		status = "requires_payment_method"
	} else if !ok {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such PaymentMethod: "+pm, "payment_method")
	}
	pi := &emuIntent{
		id: e.newID("pi"), amount: amount, currency: f.Get("currency"), description: f.Get("description"),
		paymentMethod: pm, metadata: map[string]string{}, status: status, created: now(),
		threeDS: f.Get("payment_method_options[card][request_three_d_secure]"),
		flex:    flexAsked(f),
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
	card, refused := e.cardOf(f)
	withCard := card != nil || refused != nil
	// Stripe confirms a PaymentIntent that has its payment method, or one
	// still waiting for it when the confirmation brings a card.
	if pi.status != "requires_confirmation" && (!withCard || pi.status != "requires_payment_method") {
		return e.unexpectedState(pi, "confirm")
	}
	if refused != nil {
		pi.status = "requires_payment_method"
		pi.lastError = maps.Clone(refused.body.(map[string]any)["error"].(map[string]any))
		return withIntent(*refused, e.intentJSON(pi, false))
	}
	code, decline := "card_declined", emuDeclines[pi.paymentMethod]
	issuer := emuThreeDS[pi.paymentMethod]
	if card != nil {
		pi.paymentMethod, pi.card = e.newID("pm"), card
		code, decline, issuer = card.code, card.declineCode, card.threeDS
	}
	if issuer == threeDSRequired || pi.threeDS == "any" {
		if f.Get("error_on_requires_action") != "true" {
			return e.challenge(pi, f, r.Header.Get("Idempotency-Key"))
		}
		// Nobody is there to authenticate: Stripe declines.
		code, decline = "authentication_required", "authentication_required"
	}
	ch := &emuCharge{id: e.newID("ch"), intent: pi.id, currency: pi.currency, amount: pi.amount, created: now(), card: pi.card}
	e.charges[ch.id] = ch
	pi.charge = ch.id
	if decline != "" || card != nil && code != "" {
		ch.status, ch.failureCode = "failed", code
		pi.status = "requires_payment_method"
		a := stripeError(http.StatusPaymentRequired, "card_error", code, "Your card was declined.", "")
		errBody := a.body.(map[string]any)["error"].(map[string]any)
		errBody["charge"] = ch.id
		if decline != "" {
			errBody["decline_code"] = decline
		}
		pi.lastError = maps.Clone(errBody)
		e.event("payment_intent.payment_failed", pi, r.Header.Get("Idempotency-Key"))
		return withIntent(a, e.intentJSON(pi, false))
	}
	ch.status, ch.captureBefore = "succeeded", time.Unix(ch.created, 0).Add(holdLife).Unix()
	ch.flex = grantFlex(pi)
	pi.status, pi.capturable = "requires_capture", pi.amount
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

// emuCardOutcomes are Stripe's test numbers the emulator declines, with
// the error code and decline code Stripe answers; any other number that
// passes the Luhn check approves.
var emuCardOutcomes = map[string][2]string{
	"4000000000000002": {"card_declined", "generic_decline"},
	"4000000000009995": {"card_declined", "insufficient_funds"},
	"4000000000000119": {"processing_error", ""},
	"4000000000000127": {"incorrect_cvc", "incorrect_cvc"},
}

// cardOf reads the card of a confirmation's payment_method_data: nil when
// there is none, or the 402 card_error Stripe answers card data that
// cannot be right with (its message never quotes the data).
func (e *emulator) cardOf(f url.Values) (*emuCard, *answer) {
	if f.Get("payment_method_data[type]") == "" {
		return nil, nil
	}
	if f.Get("payment_method_data[type]") != "card" || f.Get("payment_method") != "" {
		e.t.Errorf("emulator: confirmation with payment_method_data of type %q and payment_method %q",
			f.Get("payment_method_data[type]"), f.Get("payment_method"))
	}
	number, cvc := f.Get("payment_method_data[card][number]"), f.Get("payment_method_data[card][cvc]")
	month, errM := strconv.Atoi(f.Get("payment_method_data[card][exp_month]"))
	year, errY := strconv.Atoi(f.Get("payment_method_data[card][exp_year]"))
	refuse := func(code, param, msg string) (*emuCard, *answer) {
		a := stripeError(http.StatusPaymentRequired, "card_error", code, msg, "payment_method_data[card]["+param+"]")
		return nil, &a
	}
	switch {
	case !providers.LuhnValid(number) || len(number) < 13 || len(number) > 19:
		return refuse("incorrect_number", "number", "Your card number is incorrect.")
	case errM != nil || month < 1 || month > 12:
		return refuse("invalid_expiry_month", "exp_month", "Your card's expiration month is invalid.")
	case errY != nil || year < time.Now().Year():
		return refuse("invalid_expiry_year", "exp_year", "Your card's expiration year is invalid.")
	case cvc != "" && len(cvc) != 3 && len(cvc) != 4:
		return refuse("invalid_cvc", "cvc", "Your card's security code is invalid.")
	}
	out := emuCardOutcomes[number]
	brand := map[byte]string{'4': "visa", '5': "mastercard", '3': "amex", '6': "discover"}[number[0]]
	return &emuCard{brand: brand, last4: number[len(number)-4:], expMonth: month, expYear: year,
		code: out[0], declineCode: out[1], threeDS: emuThreeDS[number]}, nil
}

func (e *emulator) captureIntent(r *http.Request, f url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	if pi.status != "requires_capture" {
		return e.unexpectedState(pi, "capture")
	}
	ch := e.charges[pi.charge]
	final := f.Get("final_capture") != "false"
	if !final && !ch.flex.granted(emuMulticapture) {
		// Stripe's wording and code are the emulator's guess: the adapter
		// tells the refusal from the PaymentIntent (refineRefusal).
		return stripeError(http.StatusBadRequest, "invalid_request_error", "",
			"final_capture=false can only be used when multicapture is available for this PaymentIntent.", "final_capture")
	}
	amount, limit := pi.capturable, pi.capturable
	if final && pi.received == 0 && ch.flex.granted(emuOvercapture) {
		limit = ch.flex.overMax
	}
	if s := f.Get("amount_to_capture"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return invalidParam("amount_to_capture")
		}
		if n > limit {
			return stripeError(http.StatusBadRequest, "invalid_request_error", "amount_too_large",
				"amount_to_capture must be less than or equal to the amount_capturable", "amount_to_capture")
		}
		amount = n
	}
	e.capture(pi, ch, amount, final)
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}

// capture captures amount of pi; final (or nothing left) releases the
// rest. A hold captured once and finally books one charge transaction of
// its amount and a partial_capture_reversal of the rest, as Stripe does;
// the parts of a multicapture hold book one charge transaction each.
func (e *emulator) capture(pi *emuIntent, ch *emuCharge, amount int64, final bool) {
	first := pi.received == 0
	pi.received += amount
	ch.captured, ch.isCaptured = ch.captured+amount, true
	t := now()
	if first && final {
		e.balanceTx("charge", "charge", ch.id, pi.currency, max(pi.amount, amount), t)
	} else {
		e.balanceTx("charge", "charge", ch.id, pi.currency, amount, t)
	}
	rest := pi.amount - pi.received
	if !final && rest > 0 {
		pi.capturable = rest
		return
	}
	pi.status, pi.capturable = "succeeded", 0
	if rest > 0 {
		re := &emuRefund{id: e.newID("re"), intent: pi.id, charge: ch.id, currency: pi.currency, amount: rest, created: t, release: true}
		e.refunds[re.id] = re
		ch.refunded += rest
		if first {
			e.balanceTx("refund", "partial_capture_reversal", re.id, pi.currency, -rest, t)
		}
	}
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

// cancel voids pi; Stripe refunds (releases) the uncaptured rest of an
// authorized charge: all of it, or what a multicapture hold's captures
// left (amount_capturable), the captures standing.
func (e *emulator) cancel(pi *emuIntent, reason string) {
	if ch := e.charges[pi.charge]; ch != nil && ch.status == "succeeded" && pi.status == "requires_capture" {
		ch.refunded += pi.capturable
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
	if pi.received == 0 {
		// A multicapture hold's captures are refundable before its final
		// capture.
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
		source: source, amount: amount, fee: fee, created: created, availableOn: created + emuAvailableAfter})
}

func (e *emulator) getIntent(r *http.Request, q url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	m := e.intentJSON(pi, expands(q, "latest_charge"))
	if expands(q, "payment_method") && pi.paymentMethod != "" {
		m["payment_method"] = e.paymentMethodJSON(pi)
	}
	return answer{status: http.StatusOK, body: m}
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

// listBalance lists balance transactions; with payout=po_…, only those
// that automatic payout paid out (its own transaction among them).
func (e *emulator) listBalance(_ *http.Request, q url.Values) answer {
	if id := q.Get("payout"); id != "" {
		if bad := e.checkPayoutFilter(id); bad != nil {
			return *bad
		}
	}
	var items []listed
	for i, bt := range e.bts {
		if id := q.Get("payout"); id != "" && bt.payout != id {
			continue
		}
		items = append(items, listed{id: bt.id, created: bt.created, seq: i, json: func() map[string]any {
			var src any = bt.source
			if expands(q, "data.source") {
				src = e.sourceJSON(bt.source)
			}
			status := "available"
			if bt.availableOn > now() {
				status = "pending"
			}
			return map[string]any{"id": bt.id, "object": "balance_transaction", "amount": bt.amount, "fee": bt.fee,
				"net": bt.amount - bt.fee, "currency": bt.currency, "created": bt.created, "type": bt.typ,
				"available_on": bt.availableOn, "reporting_category": bt.category, "status": status, "source": src}
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
			return eventJSON(ev)
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

// intentJSON is pi as Stripe shows it; latest_charge expanded when
// expandCharge.
func (e *emulator) intentJSON(pi *emuIntent, expandCharge bool) map[string]any {
	m := map[string]any{
		"id": pi.id, "object": "payment_intent", "amount": pi.amount, "amount_capturable": pi.capturable,
		"amount_received": pi.received, "capture_method": "manual", "client_secret": pi.id + "_secret_emulated",
		"confirmation_method": "automatic", "created": pi.created, "currency": pi.currency,
		"description": nullable(pi.description), "metadata": pi.metadata, "livemode": false,
		"payment_method": nullable(pi.paymentMethod), "payment_method_types": []string{"card"}, "status": pi.status,
		"canceled_at": nil, "cancellation_reason": nullable(pi.cancellationReason),
		"last_payment_error": nil, "latest_charge": nil,
	}
	if pi.canceledAt != 0 {
		m["canceled_at"] = pi.canceledAt
	}
	m["next_action"] = e.nextAction(pi)
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
	if c := ch.card; c != nil {
		card = map[string]any{"brand": c.brand, "last4": c.last4, "exp_month": c.expMonth, "exp_year": c.expYear,
			"capture_before": nil}
	}
	if ch.captureBefore != 0 {
		card["capture_before"] = ch.captureBefore
	}
	ch.flex.addTo(card, ch.amount)
	return map[string]any{
		"id": ch.id, "object": "charge", "amount": ch.amount, "amount_captured": ch.captured,
		"amount_refunded": ch.refunded, "captured": ch.isCaptured, "created": ch.created, "currency": ch.currency,
		"paid": ch.status == "succeeded", "refunded": ch.refunded == ch.amount, "status": ch.status,
		"failure_code": nullable(ch.failureCode), "payment_intent": ch.intent, "metadata": e.intents[ch.intent].metadata,
		"payment_method_details": map[string]any{"type": "card", "card": card},
	}
}

func refundJSON(re *emuRefund) map[string]any {
	return map[string]any{"id": re.id, "object": "refund", "amount": re.amount, "currency": re.currency,
		"charge": re.charge, "payment_intent": re.intent, "status": "succeeded", "created": re.created}
}

// captureBefore is the capture_before of PaymentIntent id's charge: the
// charge is made at confirmation, which may fall in a later second than the
// intent's creation.
func (e *emulator) captureBefore(id string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Unix(e.charges[e.intents[id].charge].captureBefore, 0)
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
