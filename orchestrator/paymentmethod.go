package orchestrator

// A payment method's shape is the provider's to judge: each adapter says
// which it accepts (providers.Provider.CheckPaymentMethod), and the domain
// asks the adapter of the connector a payment goes to.

// checkPaymentMethod checks pm against the adapter of connector before
// anything is claimed or written. Errors: validation_failed on
// payment_method, with the adapter's message. A connector without an
// adapter (only tests of input validation build one) has no rule to apply:
// pm passes.
func (s *Service) checkPaymentMethod(connector, pm string) error {
	p := s.providers[connector]
	if p == nil {
		return nil
	}
	if err := p.CheckPaymentMethod(pm); err != nil {
		return ParamError("payment_method", "%s", err.Error())
	}
	return nil
}

// paymentMethodAccepted reports whether at least one enabled connector
// (connectorEnabled) accepts pm, for a payment whose connector is not
// chosen yet (routing). Errors: validation_failed on payment_method when
// none does, with the default provider's message (or, when the default
// provider would accept pm but is disabled, the first enabled connector's
// by name).
func (s *Service) paymentMethodAccepted(pm string) error {
	// Every authorization that names no provider asks, twice (httpapi and
	// Authorize validate): the enabled default connector answers it
	// without a look at the others.
	if s.connectorEnabled(s.defaultProvider) && s.checkPaymentMethod(s.defaultProvider, pm) == nil {
		return nil
	}
	var first error
	for _, name := range s.connectorNames() {
		if !s.connectorEnabled(name) {
			continue
		}
		err := s.checkPaymentMethod(name, pm)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if err := s.checkPaymentMethod(s.defaultProvider, pm); err != nil {
		return err
	}
	if first != nil {
		return first
	}
	return ParamError("payment_method", "no enabled connector accepts payment_method")
}
