package stripe

import (
	"net/http"
	"net/url"
	"strconv"
)

// The emulator's flexible holds. Stripe grants each feature per card
// (network, merchant category, account); the emulator's grants are by
// brand, its own choice so tests have cards with and without each:
//
//	visa         incremental authorization, multicapture, overcapture (to amount + 20%)
//	mastercard   incremental authorization, multicapture
//	amex         none
//
// An increment whose new total is over three times the first authorized
// amount is declined by the issuer (402 card_declined, insufficient_funds),
// and Stripe's 10 attempts per PaymentIntent are counted, declines included.

// The flexible-hold features, as the charge names them.
const (
	emuIncremental  = "incremental_authorization"
	emuMulticapture = "multicapture"
	emuOvercapture  = "overcapture"
)

// emuFlexGrants are the features each brand is granted.
var emuFlexGrants = map[string][]string{
	"visa":       {emuIncremental, emuMulticapture, emuOvercapture},
	"mastercard": {emuIncremental, emuMulticapture},
}

// emuFlexBrands are the brands of the test payment methods the emulator
// knows; any other is a visa.
var emuFlexBrands = map[string]string{"pm_card_mastercard": "mastercard", "pm_card_amex": "amex"}

// emuMaxIncrements is Stripe's limit of increment attempts per
// PaymentIntent.
const emuMaxIncrements = 10

// emuFlexAsked is what a creation asked for: the features whose
// payment_method_options[card][request_*] was if_available.
type emuFlexAsked map[string]bool

func flexAsked(f url.Values) emuFlexAsked {
	asked := emuFlexAsked{}
	for _, feature := range []string{emuIncremental, emuMulticapture, emuOvercapture} {
		switch v := f.Get("payment_method_options[card][request_" + feature + "]"); v {
		case "if_available":
			asked[feature] = true
		case "", "never":
		default:
			return asked // Stripe would refuse the value; the adapter sends only if_available
		}
	}
	return asked
}

// emuFlex is what a charge was granted: a status per feature asked for
// ("available" or "unavailable"; absent when not asked), and the limits.
type emuFlex struct {
	status map[string]string
	// overMax is overcapture's maximum_amount_capturable.
	overMax int64
	// issuerMax is the highest total the issuer approves an increment to.
	issuerMax  int64
	increments int
}

// grantFlex is what pi's card is granted of what its creation asked for;
// nil when it asked for nothing.
func grantFlex(pi *emuIntent) *emuFlex {
	if len(pi.flex) == 0 {
		return nil
	}
	brand := "visa"
	if b, ok := emuFlexBrands[pi.paymentMethod]; ok {
		brand = b
	}
	if pi.card != nil {
		brand = pi.card.brand
	}
	f := &emuFlex{status: map[string]string{}, issuerMax: 3 * pi.amount}
	for feature := range pi.flex {
		f.status[feature] = "unavailable"
	}
	for _, feature := range emuFlexGrants[brand] {
		if pi.flex[feature] {
			f.status[feature] = "available"
		}
	}
	f.setAmount(pi.amount)
	return f
}

// setAmount sets the overcapture limit for a hold of amount.
func (f *emuFlex) setAmount(amount int64) {
	if f.granted(emuOvercapture) {
		f.overMax = amount + amount/5
	}
}

func (f *emuFlex) granted(feature string) bool {
	return f != nil && f.status[feature] == "available"
}

// addTo adds the charge's payment_method_details.card fields of what was
// asked for.
func (f *emuFlex) addTo(card map[string]any, amount int64) {
	if f == nil {
		return
	}
	for feature, status := range f.status {
		m := map[string]any{"status": status}
		if feature == emuOvercapture {
			m["maximum_amount_capturable"] = amount
			if status == "available" {
				m["maximum_amount_capturable"] = f.overMax
			}
		}
		card[feature] = m
	}
}

// incrementIntent is POST /v1/payment_intents/{id}/increment_authorization:
// amount is the new total. A decline changes nothing but the attempts.
func (e *emulator) incrementIntent(r *http.Request, f url.Values) answer {
	pi, missing := e.intent(r)
	if missing != nil {
		return *missing
	}
	if pi.status != "requires_capture" || pi.received > 0 {
		// "After it's captured, a PaymentIntent can no longer be
		// incremented", a multicapture hold's first part included.
		return e.unexpectedState(pi, "increment the authorization of")
	}
	ch := e.charges[pi.charge]
	if !ch.flex.granted(emuIncremental) {
		// Wording and code are the emulator's guess (refineRefusal).
		return stripeError(http.StatusBadRequest, "invalid_request_error", "",
			"This PaymentIntent is not eligible for incremental authorization.", "")
	}
	n, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	if err != nil || n <= pi.amount {
		a := stripeError(http.StatusBadRequest, "invalid_request_error", "",
			"amount must be greater than the currently authorized amount.", "amount")
		a.noStore = true
		return a
	}
	if ch.flex.increments >= emuMaxIncrements {
		return stripeError(http.StatusBadRequest, "invalid_request_error", "",
			"This PaymentIntent has reached the maximum number of incremental authorization attempts.", "")
	}
	ch.flex.increments++
	if n > ch.flex.issuerMax {
		a := stripeError(http.StatusPaymentRequired, "card_error", "card_declined", "Your card was declined.", "")
		errBody := a.body.(map[string]any)["error"].(map[string]any)
		errBody["decline_code"], errBody["charge"] = "insufficient_funds", ch.id
		return withIntent(a, e.intentJSON(pi, false))
	}
	pi.amount, pi.capturable, ch.amount = n, n, n
	ch.flex.setAmount(n)
	e.event("payment_intent.amount_capturable_updated", pi, r.Header.Get("Idempotency-Key"))
	return answer{status: http.StatusOK, body: e.intentJSON(pi, expands(f, "latest_charge"))}
}
