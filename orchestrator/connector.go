package orchestrator

import "slices"

// A connector is a named, configured instance of a provider adapter
// (fake_a, fake_b, stripe): Config.Providers holds its adapter by name, and
// Config.Connectors its options. payments.provider and
// payment_attempts.connector hold connector names.

// ConnectorOptions configures one connector beyond its adapter.
type ConnectorOptions struct {
	// Disabled: no new payment is routed to it, and routing rules may not
	// name it; payments it holds are still captured, canceled, refunded,
	// resolved and reconciled there.
	Disabled bool
	// SoftDeclines are the decline codes after which the next connector of
	// the payment's route is tried (the card was refused here for a reason
	// of this connector's, not the card's). Nil means
	// DefaultSoftDeclines.
	SoftDeclines []string
}

// DefaultSoftDeclines are the decline codes, Stripe's, that say the
// connector or the issuer could not decide now, not that the card is bad:
// another connector may approve the same card.
var DefaultSoftDeclines = []string{"processing_error", "issuer_not_available", "try_again_later"}

// DefaultMaxAttempts bounds the attempts of one payment across connectors.
const DefaultMaxAttempts = 3

// connectorEnabled reports whether name is a configured connector that new
// payments may be routed to.
func (s *Service) connectorEnabled(name string) bool {
	_, ok := s.providers[name]
	return ok && !s.connectors[name].Disabled
}

// connectorNames returns the configured connectors' names, sorted.
func (s *Service) connectorNames() []string {
	names := make([]string, 0, len(s.providers))
	for name := range s.providers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
