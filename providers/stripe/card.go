package stripe

import (
	"strconv"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// A card in the clear (providers.AuthorizeRequest.Card, from payorch's
// vault) goes to Stripe as the confirmation's payment_method_data: Stripe
// creates a PaymentMethod of it and charges it in the one request.
//
// Stripe accepts raw card numbers only from an account it has enabled for
// its raw card data APIs: on request to Stripe support, with a short
// description of the systems that handle card data and a current PCI DSS
// attestation (a completed Self-Assessment Questionnaire, SAQ D for a
// server that receives card numbers, or a Level 1 Attestation of
// Compliance), renewed every year. Without it, Stripe refuses every card
// authorization with an invalid_request_error ("Sending credit card
// numbers directly to the Stripe API is generally unsafe…"): the payment
// fails and no money moves, while payment method ids (pm_…) keep working. Once enabled, test-mode keys take Stripe's test
// card numbers (4242424242424242, ...).
//
// The card rides on the confirmation, not the creation, because of the
// CVC. Stripe refuses a key resent with other parameters, and payorch's
// vault erases the CVC after the first answer, so a resumed authorization
// resends the card without it. The creation, which carries no card, still
// replays and names the PaymentIntent; the confirmation's key is then
// refused (an idempotency_error), which says the first confirmation
// executed, and one retrieve of the PaymentIntent gives its outcome: taken
// as the answer only when the PaymentIntent was charged to this card (its
// last four digits and expiry), so that another card under the same key
// is still a mismatch.

// addCard sets card as the confirmation's payment_method_data. stripe-go
// has no fields for raw card data (Stripe keeps them out of its typed
// libraries), hence the extra parameters; the billing name is typed.
func addCard(p *stripego.PaymentIntentConfirmParams, card *providers.Card) {
	p.PaymentMethodData = &stripego.PaymentIntentPaymentMethodDataParams{
		Type: stripego.String(string(stripego.PaymentMethodTypeCard)),
	}
	if card.HolderName != "" {
		p.PaymentMethodData.BillingDetails = &stripego.PaymentIntentPaymentMethodDataBillingDetailsParams{
			Name: stripego.String(card.HolderName),
		}
	}
	p.AddExtra("payment_method_data[card][number]", card.Number)
	p.AddExtra("payment_method_data[card][exp_month]", strconv.Itoa(card.ExpMonth))
	p.AddExtra("payment_method_data[card][exp_year]", strconv.Itoa(card.ExpYear))
	if card.CVC != "" {
		p.AddExtra("payment_method_data[card][cvc]", card.CVC)
	}
}

// resentWithoutCVC reports whether perr is Stripe refusing the key of a
// card's confirmation resent without the CVC: the first one carried it.
func resentWithoutCVC(perr *providers.Error, card *providers.Card) bool {
	return card != nil && card.CVC == "" &&
		perr.Kind == providers.KindRejected && perr.Code == providers.CodeIdempotencyMismatch
}

// chargedWith reports whether PaymentIntent pi was confirmed with card, as
// far as Stripe shows a card: the last four digits and expiry of its
// latest charge's card, or of the payment method its last error names
// (card data refused before any charge), or of its own payment method when
// expanded (waiting for the cardholder's authentication: no charge yet; the
// PaymentIntent is created without one, so it is the confirmation's card).
func chargedWith(pi *stripego.PaymentIntent, card *providers.Card) bool {
	var last4 string
	var month, year int64
	switch {
	case pi.LatestCharge != nil && pi.LatestCharge.PaymentMethodDetails != nil && pi.LatestCharge.PaymentMethodDetails.Card != nil:
		c := pi.LatestCharge.PaymentMethodDetails.Card
		last4, month, year = c.Last4, c.ExpMonth, c.ExpYear
	case pi.LastPaymentError != nil && pi.LastPaymentError.PaymentMethod != nil && pi.LastPaymentError.PaymentMethod.Card != nil:
		c := pi.LastPaymentError.PaymentMethod.Card
		last4, month, year = c.Last4, c.ExpMonth, c.ExpYear
	case pi.PaymentMethod != nil && pi.PaymentMethod.Card != nil:
		c := pi.PaymentMethod.Card
		last4, month, year = c.Last4, c.ExpMonth, c.ExpYear
	default:
		return false
	}
	n := card.Number
	return len(n) >= 4 && last4 == n[len(n)-4:] && month == int64(card.ExpMonth) && year == int64(card.ExpYear)
}

// scrubbed returns err without the card in its text: the messages of the
// *stripe.Error it carries (Stripe's own, and its PaymentIntent's last
// error, which may quote the request), then the whole error
// (providers.ScrubError).
func scrubbed(err error, card *providers.Card) error {
	if pe, ok := err.(*providers.Error); ok {
		if se, ok := pe.Err.(*stripego.Error); ok {
			cp := *pe
			cp.Err = scrubStripeError(se, card)
			err = &cp
		}
	}
	return providers.ScrubError(err, card)
}

// scrubStripeError copies se with its messages scrubbed of the card.
func scrubStripeError(se *stripego.Error, card *providers.Card) *stripego.Error {
	c := *se
	c.Msg = providers.ScrubCard(se.Msg, card)
	if se.PaymentIntent != nil && se.PaymentIntent.LastPaymentError != nil {
		pi := *se.PaymentIntent
		pi.LastPaymentError = scrubStripeError(se.PaymentIntent.LastPaymentError, card)
		c.PaymentIntent = &pi
	}
	return &c
}
