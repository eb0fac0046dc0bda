package vault

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/payorch/payorch/orchestrator"
)

// CardInput is a card as a client sends it. Number may hold spaces
// between digits (as printed on the card); nothing else but digits.
type CardInput struct {
	Number     string `json:"number"`
	ExpMonth   int    `json:"exp_month"`
	ExpYear    int    `json:"exp_year"`
	CVC        string `json:"cvc,omitempty"`
	HolderName string `json:"holder_name,omitempty"`
}

// Limits on a card's fields. maxNumberInput bounds the number as sent
// (spaces included) before any work is spent on it.
const (
	maxNumberInput = 64
	maxHolderName  = 200
)

// brandRange is a range of issuer identification numbers (IINs) of one
// card network: numbers whose first len(lo) digits are from lo to hi, of
// one of lengths.
type brandRange struct {
	brand   string
	lo, hi  string
	lengths []int
}

// brandRanges are the IIN ranges of the networks the vault accepts, the
// longest prefixes first where ranges nest (Discover's 6011 before
// Maestro's 6). Sources: the networks' published IIN tables, as Stripe's
// and Adyen's card-brand detection use them.
var brandRanges = []brandRange{
	{"amex", "34", "34", []int{15}},
	{"amex", "37", "37", []int{15}},
	{"diners", "300", "305", []int{14, 15, 16, 17, 18, 19}},
	{"diners", "3095", "3095", []int{14, 15, 16, 17, 18, 19}},
	{"diners", "36", "36", []int{14, 15, 16, 17, 18, 19}},
	{"diners", "38", "39", []int{14, 15, 16, 17, 18, 19}},
	{"jcb", "3528", "3589", []int{16, 17, 18, 19}},
	{"visa", "4", "4", []int{13, 16, 19}},
	{"mastercard", "51", "55", []int{16}},
	{"mastercard", "2221", "2720", []int{16}},
	{"maestro", "50", "50", []int{12, 13, 14, 15, 16, 17, 18, 19}},
	{"maestro", "56", "58", []int{12, 13, 14, 15, 16, 17, 18, 19}},
	{"discover", "6011", "6011", []int{16, 17, 18, 19}},
	{"discover", "644", "649", []int{16, 17, 18, 19}},
	{"discover", "65", "65", []int{16, 17, 18, 19}},
	{"unionpay", "62", "62", []int{16, 17, 18, 19}},
	{"maestro", "6", "6", []int{12, 13, 14, 15, 16, 17, 18, 19}},
}

// cardBrand returns the network of a number (digits only) and the
// lengths its numbers have; "" when no network the vault accepts issues it.
func cardBrand(number string) (string, []int) {
	for _, r := range brandRanges {
		if len(number) >= len(r.lo) && number[:len(r.lo)] >= r.lo && number[:len(r.lo)] <= r.hi {
			return r.brand, r.lengths
		}
	}
	return "", nil
}

// luhn reports whether a number (digits only) passes the Luhn check.
func luhn(number string) bool {
	sum := 0
	for i := len(number) - 1; i >= 0; i-- {
		d := int(number[i] - '0')
		if (len(number)-1-i)%2 == 1 {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}

// allDigits reports whether s is not empty and holds ASCII digits only.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// normalizeNumber strips the spaces of a card number as sent.
func normalizeNumber(number string) string { return strings.ReplaceAll(number, " ", "") }

// validateNumber checks a card number and returns its digits and brand.
// No message quotes the number, not even in part.
func validateNumber(number string) (digits, brand string, err error) {
	if len(number) > maxNumberInput {
		return "", "", orchestrator.ParamError("card.number", "card.number is too long")
	}
	digits = normalizeNumber(number)
	if !allDigits(digits) {
		return "", "", orchestrator.ParamError("card.number", "card.number must be digits, optionally separated by spaces")
	}
	brand, lengths := cardBrand(digits)
	if brand == "" {
		return "", "", orchestrator.ParamError("card.number", "card.number is not of a card network the vault accepts")
	}
	ok := false
	for _, l := range lengths {
		ok = ok || len(digits) == l
	}
	if !ok {
		return "", "", orchestrator.ParamError("card.number", "card.number has the wrong number of digits for a %s card", brand)
	}
	if !luhn(digits) {
		return "", "", orchestrator.ParamError("card.number", "card.number is not a valid card number (check digit)")
	}
	return digits, brand, nil
}

// ValidateCard checks a card as of now: the number (digits after
// stripping spaces, a known network's length, Luhn), the expiry (month 1
// to 12, year of four digits, not past the end of the month in UTC), the
// CVC (optional; 3 digits, 4 for American Express) and the holder name
// (UTF-8 text, at most 200 characters). Errors: validation_failed naming
// card.number, card.exp_month, card.exp_year, card.cvc or
// card.holder_name, never quoting the value.
func ValidateCard(in CardInput, now time.Time) error {
	_, brand, err := validateNumber(in.Number)
	if err != nil {
		return err
	}
	if err := validateExpiry(in.ExpMonth, in.ExpYear, now); err != nil {
		return err
	}
	cvcLen := 3
	if brand == "amex" {
		cvcLen = 4
	}
	if in.CVC != "" && (len(in.CVC) != cvcLen || !allDigits(in.CVC)) {
		return orchestrator.ParamError("card.cvc", "card.cvc must be %d digits for this card", cvcLen)
	}
	if !orchestrator.ValidText(in.HolderName) || utf8.RuneCountInString(in.HolderName) > maxHolderName {
		return orchestrator.ParamError("card.holder_name", "card.holder_name must be UTF-8 text of at most %d characters", maxHolderName)
	}
	return nil
}

// validateExpiry checks an expiry month and year: a card is good until
// the end of its expiry month, taken in UTC.
func validateExpiry(month, year int, now time.Time) error {
	if month < 1 || month > 12 {
		return orchestrator.ParamError("card.exp_month", "card.exp_month must be 1 to 12")
	}
	if year < 1000 || year > 9999 {
		return orchestrator.ParamError("card.exp_year", "card.exp_year must have four digits")
	}
	if expired(month, year, now) {
		if year < now.UTC().Year() {
			return orchestrator.ParamError("card.exp_year", "the card has expired")
		}
		return orchestrator.ParamError("card.exp_month", "the card has expired")
	}
	return nil
}

// expired reports whether a card expiring at the end of month/year (UTC)
// has expired by now.
func expired(month, year int, now time.Time) bool {
	return !now.Before(time.Date(year, time.Month(month)+1, 1, 0, 0, 0, 0, time.UTC))
}

// Address is a billing address; Country is an ISO 3166-1 alpha-2 code.
type Address struct {
	Line1      string `json:"line1,omitempty"`
	Line2      string `json:"line2,omitempty"`
	City       string `json:"city,omitempty"`
	PostalCode string `json:"postal_code,omitempty"`
	State      string `json:"state,omitempty"`
	Country    string `json:"country,omitempty"`
}

// BillingDetails is who pays with the card and where they are billed.
type BillingDetails struct {
	Name    string   `json:"name,omitempty"`
	Email   string   `json:"email,omitempty"`
	Phone   string   `json:"phone,omitempty"`
	Address *Address `json:"address,omitempty"`
}

// Limits on billing details, in characters (Stripe's where it has one).
const (
	maxBillingText = 200
	maxEmail       = 320
	maxPhone       = 40
	maxPostalCode  = 20
)

// textField is one text field of a request and its limit.
type textField struct {
	param, value string
	max          int
}

// ValidateBilling checks billing details, as Create does; exported so the
// API refuses them before it claims a key. Errors: validation_failed
// naming the field (billing_details.address.city, ...).
func ValidateBilling(b *BillingDetails) error {
	if b == nil {
		return nil
	}
	fields := []textField{{"billing_details.name", b.Name, maxBillingText},
		{"billing_details.email", b.Email, maxEmail}, {"billing_details.phone", b.Phone, maxPhone}}
	if a := b.Address; a != nil {
		fields = append(fields, textField{"billing_details.address.line1", a.Line1, maxBillingText},
			textField{"billing_details.address.line2", a.Line2, maxBillingText},
			textField{"billing_details.address.city", a.City, maxBillingText},
			textField{"billing_details.address.postal_code", a.PostalCode, maxPostalCode},
			textField{"billing_details.address.state", a.State, maxBillingText})
		if c := a.Country; c != "" && (len(c) != 2 || c[0] < 'A' || c[0] > 'Z' || c[1] < 'A' || c[1] > 'Z') {
			return orchestrator.ParamError("billing_details.address.country",
				"billing_details.address.country must be an upper-case ISO 3166-1 alpha-2 code such as DE")
		}
	}
	for _, f := range fields {
		if !orchestrator.ValidText(f.value) || utf8.RuneCountInString(f.value) > f.max {
			return orchestrator.ParamError(f.param, "%s must be UTF-8 text of at most %d characters", f.param, f.max)
		}
	}
	return nil
}

// last4 is the last four digits of a number (digits only, 12 or more).
func last4(digits string) string { return digits[len(digits)-4:] }
