package orchestrator_test

import (
	"errors"
	"testing"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
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

// TestAuthorizeInputRefusesUnstorableText: whatever the caller (the HTTP
// API checks bodies first, but not every caller is the HTTP API), text
// PostgreSQL cannot store is validation_failed naming the field, never a
// database error.
func TestAuthorizeInputRefusesUnstorableText(t *testing.T) {
	t.Parallel()
	svc := orchestrator.NewService(orchestrator.Config{Providers: map[string]providers.Provider{"fake": nil}, DefaultProvider: "fake"})
	for name, tc := range map[string]struct {
		in    orchestrator.AuthorizeInput
		param string
	}{
		"NULInDescription":     {orchestrator.AuthorizeInput{Description: "a\x00b"}, "description"},
		"BadUTF8Description":   {orchestrator.AuthorizeInput{Description: "\xff"}, "description"},
		"NULInMetadataKey":     {orchestrator.AuthorizeInput{Metadata: map[string]string{"\x00": "v"}}, "metadata"},
		"NULInMetadataValue":   {orchestrator.AuthorizeInput{Metadata: map[string]string{"k": "v\x00"}}, "metadata"},
		"BadUTF8MetadataValue": {orchestrator.AuthorizeInput{Metadata: map[string]string{"k": "\xc3\x28"}}, "metadata"},
	} {
		tc.in.AmountMinor, tc.in.Currency = 100, "EUR"
		err := tc.in.Validate(svc)
		var e *orchestrator.Error
		if !errors.As(err, &e) || e.Code != orchestrator.CodeValidationFailed || e.Param != tc.param {
			t.Errorf("%s: %v, want validation_failed on %s", name, err, tc.param)
		}
	}
	ok := orchestrator.AuthorizeInput{AmountMinor: 100, Currency: "EUR", Description: "café\tau lait", Metadata: map[string]string{"k": "é"}}
	if err := ok.Validate(svc); err != nil {
		t.Fatalf("valid text refused: %v", err)
	}
}

// Statuses is the list of states the state machine moves between: each
// once, and each reached from pending.
func TestStatusesAreTheStateMachinesStates(t *testing.T) {
	t.Parallel()
	seen := map[orchestrator.Status]bool{}
	for _, st := range orchestrator.Statuses {
		if seen[st] || !st.Known() {
			t.Fatalf("%s twice in Statuses, or not Known", st)
		}
		seen[st] = true
	}
	if orchestrator.Status("lost").Known() {
		t.Fatal("an unknown state is Known")
	}
	reached := map[orchestrator.Status]bool{orchestrator.StatusPending: true}
	for changed := true; changed; {
		changed = false
		for _, from := range orchestrator.Statuses {
			for _, to := range orchestrator.Statuses {
				if reached[from] && !reached[to] && orchestrator.CanTransition(from, to) {
					reached[to], changed = true, true
				}
			}
		}
	}
	for _, st := range orchestrator.Statuses {
		if !reached[st] {
			t.Errorf("%s is not reached from pending", st)
		}
	}
}
