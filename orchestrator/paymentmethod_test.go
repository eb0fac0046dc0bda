package orchestrator

import (
	"errors"
	"strings"
	"testing"

	"github.com/payorch/payorch/providers"
)

// prefixProvider is a provider whose adapter accepts only payment methods
// starting with prefix; nothing else of it is called.
type prefixProvider struct {
	providers.Provider
	prefix string
}

func (p prefixProvider) CheckPaymentMethod(pm string) error {
	if !strings.HasPrefix(pm, p.prefix) {
		return errors.New("payment_method must start with " + p.prefix)
	}
	return nil
}

// wantPaymentMethodError fails unless err is validation_failed on
// payment_method with message msg ("" for no error).
func wantPaymentMethodError(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if msg == "" {
		if err != nil {
			t.Errorf("%s: %v, want nil", what, err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeValidationFailed || e.Param != "payment_method" || e.Message != msg {
		t.Errorf("%s: %v, want validation_failed on payment_method: %s", what, err, msg)
	}
}

// The connector's own adapter judges a payment method, and its message is
// the merchant's.
func TestCheckPaymentMethodAsksTheConnectorsAdapter(t *testing.T) {
	t.Parallel()
	s := NewService(Config{DefaultProvider: "a", Providers: map[string]providers.Provider{
		"a": prefixProvider{prefix: "pm_"}, "b": prefixProvider{prefix: "tok_"},
	}})
	wantPaymentMethodError(t, "a, pm_x", s.checkPaymentMethod("a", "pm_x"), "")
	wantPaymentMethodError(t, "a, tok_x", s.checkPaymentMethod("a", "tok_x"), "payment_method must start with pm_")
	wantPaymentMethodError(t, "b, tok_x", s.checkPaymentMethod("b", "tok_x"), "")
	wantPaymentMethodError(t, "b, pm_x", s.checkPaymentMethod("b", "pm_x"), "payment_method must start with tok_")
}

// A payment method whose connector is not chosen yet passes when one
// enabled connector accepts it; else the default provider's message says
// why (or the first enabled connector's, when only the disabled default
// would accept it).
func TestPaymentMethodAcceptedByAnEnabledConnector(t *testing.T) {
	t.Parallel()
	s := NewService(Config{DefaultProvider: "a",
		Providers: map[string]providers.Provider{
			"a": prefixProvider{prefix: "pm_"}, "b": prefixProvider{prefix: "tok_"}, "c": prefixProvider{prefix: "src_"},
		},
		Connectors: map[string]ConnectorOptions{"c": {Disabled: true}},
	})
	wantPaymentMethodError(t, "default accepts", s.paymentMethodAccepted("pm_x"), "")
	wantPaymentMethodError(t, "another accepts", s.paymentMethodAccepted("tok_x"), "")
	wantPaymentMethodError(t, "only a disabled one accepts", s.paymentMethodAccepted("src_x"), "payment_method must start with pm_")
	wantPaymentMethodError(t, "none accepts", s.paymentMethodAccepted("card_x"), "payment_method must start with pm_")

	off := NewService(Config{DefaultProvider: "a",
		Providers:  map[string]providers.Provider{"a": prefixProvider{prefix: "pm_"}, "b": prefixProvider{prefix: "tok_"}},
		Connectors: map[string]ConnectorOptions{"a": {Disabled: true}},
	})
	wantPaymentMethodError(t, "only the disabled default accepts", off.paymentMethodAccepted("pm_x"), "payment_method must start with tok_")
	wantPaymentMethodError(t, "the enabled one accepts", off.paymentMethodAccepted("tok_x"), "")
}
