package orchestrator_test

import (
	"testing"

	"github.com/payorch/payorch/orchestrator"
)

func TestStateMachine(t *testing.T) {
	t.Parallel()
	all := []orchestrator.Status{
		orchestrator.StatusPending, orchestrator.StatusAuthorized, orchestrator.StatusFailed, orchestrator.StatusCaptured,
		orchestrator.StatusCanceled, orchestrator.StatusExpired, orchestrator.StatusPartiallyRefunded, orchestrator.StatusRefunded,
	}
	allowed := map[[2]orchestrator.Status]bool{
		{"pending", "authorized"}:                    true,
		{"pending", "failed"}:                        true,
		{"authorized", "captured"}:                   true,
		{"authorized", "canceled"}:                   true,
		{"authorized", "expired"}:                    true,
		{"captured", "partially_refunded"}:           true,
		{"captured", "refunded"}:                     true,
		{"partially_refunded", "partially_refunded"}: true,
		{"partially_refunded", "refunded"}:           true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := orchestrator.CanTransition(from, to); got != allowed[[2]orchestrator.Status{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %v", from, to, got)
			}
		}
	}
}

func TestPaymentIDIsDeterministicPerTenantAndKey(t *testing.T) {
	t.Parallel()
	a := orchestrator.PaymentID(1, "k")
	if a != orchestrator.PaymentID(1, "k") || len(a) != 36 || a[:4] != "pay_" {
		t.Fatalf("PaymentID(1, k) = %s", a)
	}
	for _, other := range []string{orchestrator.PaymentID(2, "k"), orchestrator.PaymentID(1, "k2"), orchestrator.PaymentID(11, ""), orchestrator.PaymentID(1, "1:k")} {
		if other == a {
			t.Fatalf("collision with %s", other)
		}
	}
}
