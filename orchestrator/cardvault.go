package orchestrator

import (
	"context"
	"strings"

	"github.com/payorch/payorch/providers"
)

// VaultPrefix starts the id of every payment method of payorch's vault
// ("vpm_…"). No provider's ids start so, so a payment's method names
// either a vaulted card, which every connector can charge, or a provider's
// own token, bound to the connectors of that provider.
const VaultPrefix = "vpm_"

// IsVaulted reports whether pm names a payment method of payorch's vault.
func IsVaulted(pm string) bool { return strings.HasPrefix(pm, VaultPrefix) }

// CardSummary is what anyone may see of a vaulted card: never its number
// or CVC. A payment with a vaulted method shows it as "card".
type CardSummary struct {
	Brand    string `json:"brand"`
	Last4    string `json:"last4"`
	ExpMonth int    `json:"exp_month"`
	ExpYear  int    `json:"exp_year"`
}

// Reasons a vaulted card is decrypted, one metric label each, so an
// unexpected decryption shows.
const (
	RevealAuthorize = "authorize"
)

// CardVault is payorch's vault as the payment domain uses it; package
// orchestrator/vault implements it over PostgreSQL, and serve wires it in
// (Config.Vault). Every method is scoped to a tenant: a method id of
// another tenant is not found.
type CardVault interface {
	// Reveal decrypts the card of payment method id, for the calls of one
	// authorization (reason: RevealAuthorize), and counts the decryption.
	// A method that does not exist or was deleted is a *Error not_found
	// on payment_method (it cannot be charged); an expired card is
	// validation_failed on payment_method.
	Reveal(ctx context.Context, tenantID int64, id, reason string) (providers.Card, error)
	// ForgetCVC erases the method's CVC: an authorization that used it
	// has been answered, and card rules forbid keeping it. Idempotent.
	ForgetCVC(ctx context.Context, tenantID int64, id string) error
	// CountDecline records a decline of a payment charged to the method
	// (card testing shows as many declines per new method).
	CountDecline(ctx context.Context, tenantID int64, id string) error
}
