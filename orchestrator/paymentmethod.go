package orchestrator

import (
	"context"
	"errors"

	"github.com/payorch/payorch/providers"
)

// A payment method is either a card of payorch's vault ("vpm_…"), which
// every connector charges (each adapter takes providers.Card), or a
// provider's own token, whose shape is the provider's to judge: each
// adapter says which it accepts (providers.Provider.CheckPaymentMethod),
// and the domain asks the adapter of the connector a payment goes to.

// checkPaymentMethod checks pm against the adapter of connector before
// anything is claimed or written. Errors: validation_failed on
// payment_method, with the adapter's message. A connector without an
// adapter (only tests of input validation build one) has no rule to apply:
// pm passes.
func (s *Service) checkPaymentMethod(connector, pm string) error {
	if IsVaulted(pm) {
		if s.vault == nil {
			return ParamError("payment_method", "payment_method names a card of payorch's vault, and the vault is not configured")
		}
		return nil
	}
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

// cardUse is a vaulted card as one authorization request uses it: the
// card is decrypted once, when the request starts (the payment shows its
// summary), and every attempt's adapter gets it from here, so a request
// reads the vault once. cvcSent records that an attempt sent its CVC: only
// then has an authorization used it, and must the vault erase it.
type cardUse struct {
	card    *providers.Card
	cvcSent bool
}

// summary is what the payment shows of the card.
func (u *cardUse) summary() *CardSummary {
	if u == nil || u.card == nil {
		return nil
	}
	return &CardSummary{Brand: u.card.Brand, Last4: u.card.Last4, ExpMonth: u.card.ExpMonth, ExpYear: u.card.ExpYear}
}

// vaultedCard decrypts the card of a new payment's vaulted method, for
// the request's authorization calls, or returns nil for a provider token.
// Errors: validation_failed on payment_method when the method does not
// exist (in the tenant's vault), was deleted, or its card expired: it can
// never be charged, and no provider is called.
func (s *Service) vaultedCard(ctx context.Context, tenantID int64, pm string) (*cardUse, error) {
	if !IsVaulted(pm) || s.vault == nil {
		return nil, nil // checkPaymentMethod refused a vaulted method without a vault
	}
	card, err := s.vault.Reveal(ctx, tenantID, pm, RevealAuthorize)
	if err != nil {
		return nil, vaultError(err)
	}
	return &cardUse{card: &card}, nil
}

// vaultError is the answer to a vault's refusal of a payment's method:
// a method that is not found (never created, of another tenant, or
// deleted) is validation_failed on payment_method, as a provider token
// the provider does not know would be; the vault's other refusals (an
// expired card) keep their code; anything else is internal.
func vaultError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return internalf("vault: %w", err)
	}
	if e.Code == CodeNotFound {
		return ParamError("payment_method", "payment_method names no card of your vault (it was never created, or was deleted)")
	}
	return e
}

// revealCard returns the card of p's vaulted method for one authorization
// call: the one the request decrypted already (use), else decrypted now
// and kept in use for the request's next attempts. A card that cannot be
// read is an error of the call, before anything is sent: KindRejected (the
// payment fails, as a refused method does) when the method was deleted
// since the payment was created, or its card expired; KindNotExecuted
// (the payment stays pending, tried again) when the vault could not be
// read, or this instance has none.
func (s *Service) revealCard(ctx context.Context, p Payment, use *cardUse) (*providers.Card, error) {
	if use.card != nil {
		return use.card, nil
	}
	if s.vault == nil {
		// An instance started without the vault's keys (a misconfigured
		// one): the payment waits for one that has them.
		return nil, &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeProviderUnavailable,
			Message: "this instance has no vault keys (PAYORCH_VAULT_KEYS); nothing was sent"}
	}
	card, err := s.vault.Reveal(ctx, p.TenantID, p.PaymentMethod, RevealAuthorize)
	if err == nil {
		use.card = &card
		return &card, nil
	}
	var e *Error
	if errors.As(err, &e) && (e.Code == CodeNotFound || e.Code == CodeValidationFailed) {
		return nil, &providers.Error{Kind: providers.KindRejected, Code: CodePaymentMethodUnavailable,
			Message: "the vaulted payment method can no longer be charged (deleted or expired)"}
	}
	return nil, &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeProviderUnavailable,
		Message: "the vault could not be read; nothing was sent", Err: err}
}

// CodePaymentMethodUnavailable is a payment's failure code when its
// vaulted method was deleted, or its card expired, before the provider
// was called.
const CodePaymentMethodUnavailable = "payment_method_unavailable"

// afterVaultedAuthorization does what a vaulted method's card rules ask
// once an authorization of payment p is answered (settled: authorized or
// failed): the CVC is erased when the authorization sent it (cvcSent; it
// must not be kept after the first authorization that used it; a card
// without one, as every card is after its first payment, costs no
// write), and a decline is counted against the method. Best effort: the
// payment is settled already; a failure is logged, and the vault's CVC
// lifetime erases the CVC regardless.
func (s *Service) afterVaultedAuthorization(ctx context.Context, p Payment, cvcSent bool) {
	if !IsVaulted(p.PaymentMethod) || s.vault == nil || p.Status == StatusPending {
		return
	}
	if cvcSent {
		if err := s.vault.ForgetCVC(ctx, p.TenantID, p.PaymentMethod); err != nil {
			s.logger.ErrorContext(ctx, "vault: CVC not erased after authorization; its lifetime will", "payment_id", p.ID, "error", err)
		}
	}
	if p.Status == StatusFailed && p.FailureCode != nil && *p.FailureCode != CodePaymentMethodUnavailable {
		if err := s.vault.CountDecline(ctx, p.TenantID, p.PaymentMethod); err != nil {
			s.logger.ErrorContext(ctx, "vault: decline not counted", "payment_id", p.ID, "error", err)
		}
	}
}
