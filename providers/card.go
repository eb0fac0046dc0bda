package providers

import (
	"fmt"
	"log/slog"
)

// Card is a card's data in the clear, for the one provider call that
// charges it: an authorization of a payment whose method is in payorch's
// vault. It exists only in memory, only while that call runs.
//
// Every way Go prints or encodes a value is redacted (String, GoString,
// Format, LogValue, MarshalJSON, MarshalText), so a Card logged, traced or
// marshalled by mistake shows "card(redacted)" and never its number or CVC.
// Adapters read the fields one by one into the request they send.
type Card struct {
	// Number is the card number, digits only.
	Number string
	// ExpMonth is 1 to 12, ExpYear four digits.
	ExpMonth int
	ExpYear  int
	// CVC is 3 or 4 digits, or empty once the vault erased it (card rules
	// forbid keeping it after the first authorization that used it).
	CVC string
	// HolderName is the name on the card, possibly empty.
	HolderName string
	// Brand is the card network ("visa", "mastercard", "amex", ...) and
	// Last4 the number's last four digits: safe to show and to log.
	Brand string
	Last4 string
}

const redactedCard = "card(redacted)"

// String redacts the card.
func (c Card) String() string { return redactedCard }

// GoString redacts the card (%#v).
func (c Card) GoString() string { return redactedCard }

// Format redacts the card for every verb of package fmt.
func (c Card) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redactedCard)) }

// LogValue shows only what may be shown: brand and last4.
func (c Card) LogValue() slog.Value {
	return slog.GroupValue(slog.String("brand", c.Brand), slog.String("last4", c.Last4))
}

// MarshalJSON redacts the card.
func (c Card) MarshalJSON() ([]byte, error) { return []byte(`"` + redactedCard + `"`), nil }

// MarshalText redacts the card.
func (c Card) MarshalText() ([]byte, error) { return []byte(redactedCard), nil }
