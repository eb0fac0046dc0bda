package fake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/payorch/payorch/providers"
)

// Card numbers the fake gives an outcome of its own: the codes of a soft
// decline for which Stripe publishes no test card. Like Stripe's, they
// pass the Luhn check and work with any future expiry and any CVC.
const (
	// TestCardIssuerUnavailable declines with issuer_not_available.
	TestCardIssuerUnavailable = "4000009900000012"
	// TestCardTryAgainLater declines with try_again_later.
	TestCardTryAgainLater = "4000009900000020"
)

// testCards are Stripe's published test card numbers that do not approve,
// with the decline code each gives (the same as the matching pm_card_*
// method where there is one), and the fake's own two. Any other number
// that passes the Luhn check approves, as Stripe's success numbers do
// (4242424242424242, 5555555555554444, 378282246310005, ...).
var testCards = map[string]string{
	"4000000000000002":        providers.CodeCardDeclined,
	"4000000000009995":        providers.CodeInsufficientFunds,
	"4000000000009987":        "lost_card",
	"4000000000009979":        "stolen_card",
	"4000000000000069":        "expired_card",
	"4000000000000127":        "incorrect_cvc",
	"4000000000000119":        "processing_error",
	"4000000000006975":        "card_velocity_exceeded",
	"4100000000000019":        "fraudulent",
	TestCardIssuerUnavailable: "issuer_not_available",
	TestCardTryAgainLater:     "try_again_later",
}

// cvcCheckFails is Stripe's number whose CVC check fails: declined with
// incorrect_cvc when a CVC is given, approved without one.
const cvcCheckFails = "4000000000000101"

// cardParams is a card in the clear, in the body of POST /v1/holds. The
// server reads it into an outcome, a brand and the last four digits and
// keeps nothing else of it: not in the hold, the state file, the log or
// an answer. Its idempotency fingerprint covers the number only as an HMAC
// and leaves the CVC out (cardParams.fingerprinted).
type cardParams struct {
	Number     string `json:"number"`
	ExpMonth   int    `json:"exp_month"`
	ExpYear    int    `json:"exp_year"`
	CVC        string `json:"cvc,omitempty"`
	HolderName string `json:"holder_name,omitempty"`
}

// validate checks the shape that needs no clock; check does the rest.
func (c *cardParams) validate() *apiError {
	if len(c.HolderName) > 200 {
		return invalid("card[holder_name]", "card holder_name is longer than 200 characters")
	}
	return nil
}

// check refuses, as Stripe does before charging, a card whose data cannot
// be right: a 402 card_error whose code names the field, never its value.
func (c *cardParams) check(now time.Time) *apiError {
	n := c.Number
	switch {
	case len(n) < 13 || len(n) > 19 || strings.Trim(n, "0123456789") != "":
		return cardError("invalid_number", "card[number]", "The card number is not a valid credit card number.")
	case !providers.LuhnValid(n):
		return cardError("incorrect_number", "card[number]", "The card number is incorrect.")
	case c.ExpMonth < 1 || c.ExpMonth > 12:
		return cardError("invalid_expiry_month", "card[exp_month]", "The card's expiration month is invalid.")
	case c.ExpYear < now.Year() || c.ExpYear > now.Year()+50:
		return cardError("invalid_expiry_year", "card[exp_year]", "The card's expiration year is invalid.")
	case c.ExpYear == now.Year() && c.ExpMonth < int(now.Month()):
		return cardError("invalid_expiry_month", "card[exp_month]", "The card's expiration month is in the past.")
	}
	if c.CVC != "" {
		want := 3
		if cardBrand(n) == "amex" {
			want = 4
		}
		if len(c.CVC) != want || strings.Trim(c.CVC, "0123456789") != "" {
			return cardError("invalid_cvc", "card[cvc]", "The card's security code is invalid.")
		}
	}
	return nil
}

// decline is the decline code the card gets, "" when it approves.
func (c *cardParams) decline() string {
	if c.Number == cvcCheckFails && c.CVC != "" {
		return "incorrect_cvc"
	}
	return testCards[c.Number]
}

// cardFingerprint is what the idempotency fingerprint covers of a card:
// its number as an HMAC under the server's card key, no CVC. A retry that
// lacks the CVC (erased by payorch's vault after the first answer) is the
// same request; another number, expiry or holder is not.
type cardFingerprint struct {
	NumberHMAC string `json:"number_hmac"`
	ExpMonth   int    `json:"exp_month"`
	ExpYear    int    `json:"exp_year"`
	HolderName string `json:"holder_name,omitempty"`
}

func (c *cardParams) fingerprinted(key []byte) *cardFingerprint {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(c.Number))
	return &cardFingerprint{NumberHMAC: hex.EncodeToString(m.Sum(nil)),
		ExpMonth: c.ExpMonth, ExpYear: c.ExpYear, HolderName: c.HolderName}
}

// cardKey derives the key of the cards' HMAC from the server's token, a
// secret the state file does not hold: the fingerprints stored there
// cannot be tested against guessed numbers without it, and a restart with
// the same token keeps comparing retries the same way.
func cardKey(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("payorch fake provider: card number fingerprint"))
	return m.Sum(nil)
}

// cardJSON is all a hold keeps and shows of its card.
type cardJSON struct {
	Brand string `json:"brand"`
	Last4 string `json:"last4"`
}

func (c *cardParams) shown() *cardJSON {
	return &cardJSON{Brand: cardBrand(c.Number), Last4: c.Number[len(c.Number)-4:]}
}

// cardBrand names the card network of a number by its leading digits.
func cardBrand(n string) string {
	prefix := func(digits int) int {
		v := 0
		for i := 0; i < digits && i < len(n); i++ {
			v = v*10 + int(n[i]-'0')
		}
		return v
	}
	switch p2, p3, p4 := prefix(2), prefix(3), prefix(4); {
	case n[0] == '4':
		return "visa"
	case p2 == 34 || p2 == 37:
		return "amex"
	case p2 >= 51 && p2 <= 55, p4 >= 2221 && p4 <= 2720:
		return "mastercard"
	case p4 == 6011, p2 == 65, p3 >= 644 && p3 <= 649:
		return "discover"
	case p4 >= 3528 && p4 <= 3589:
		return "jcb"
	case p2 == 36, p2 == 38, p2 == 39, p3 >= 300 && p3 <= 305:
		return "diners"
	case p2 == 62:
		return "unionpay"
	}
	return "unknown"
}

// cardError is a refusal of the card's data (Stripe's 402 card_error).
func cardError(code, param, msg string) *apiError {
	return &apiError{status: http.StatusPaymentRequired, wireError: wireError{
		Type: typeCard, Code: code, Message: msg, Param: param,
	}}
}
