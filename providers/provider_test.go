package providers_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/payorch/payorch/providers"
)

func TestForwardedKey(t *testing.T) {
	t.Parallel()
	base := providers.ForwardedKey(1, "POST /v1/payments", "order-1")
	long := strings.Repeat("k", 255)
	for _, tc := range []struct {
		name      string
		tenant    int64
		operation string
		clientKey string
		same      bool // as base
	}{
		{"SameInputsSameKey", 1, "POST /v1/payments", "order-1", true},
		{"OtherTenant", 2, "POST /v1/payments", "order-1", false},
		{"OtherOperation", 1, "POST /v1/payments/{id}/capture", "order-1", false},
		{"OtherClientKey", 1, "POST /v1/payments", "order-2", false},
		{"NegativeTenant", -1, "POST /v1/payments", "order-1", false},
		{"LongestClientKey", 1, "POST /v1/payments", long, false},
		{"EmptyClientKey", 1, "POST /v1/payments", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := providers.ForwardedKey(tc.tenant, tc.operation, tc.clientKey)
			if again := providers.ForwardedKey(tc.tenant, tc.operation, tc.clientKey); again != got {
				t.Fatalf("not deterministic: %s then %s", got, again)
			}
			if (got == base) != tc.same {
				t.Errorf("ForwardedKey(%d, %q, %q) = %s; equal to base: %v, want %v",
					tc.tenant, tc.operation, tc.clientKey, got, got == base, tc.same)
			}
			if len(got) > 255 || !strings.HasPrefix(got, "po_") {
				t.Errorf("key %q: %d characters, want a po_ key of at most 255", got, len(got))
			}
			for _, r := range got {
				if r < 0x21 || r > 0x7e {
					t.Fatalf("key %q has the non-printable or non-ASCII %q", got, r)
				}
			}
		})
	}
}

func TestForwardedKeySeparatesItsParts(t *testing.T) {
	t.Parallel()
	// Without separators these pairs would hash the same bytes.
	for _, pair := range [][2]string{
		{providers.ForwardedKey(1, "2POST", "k"), providers.ForwardedKey(12, "POST", "k")},
		{providers.ForwardedKey(1, "POST", "xk"), providers.ForwardedKey(1, "POSTx", "k")},
		{providers.ForwardedKey(1, "", "POST"), providers.ForwardedKey(1, "POST", "")},
	} {
		if pair[0] == pair[1] {
			t.Errorf("two different requests forward the same key %s", pair[0])
		}
	}
}

func TestKindOfAndCodeOf(t *testing.T) {
	t.Parallel()
	declined := &providers.Error{Kind: providers.KindDeclined, Code: providers.CodeInsufficientFunds}
	for _, tc := range []struct {
		name string
		err  error
		kind providers.Kind
		code string
	}{
		{"Nil", nil, providers.KindUnknown, ""},
		{"PlainErrorIsUnknown", errors.New("boom"), providers.KindUnknown, ""},
		{"Declined", declined, providers.KindDeclined, providers.CodeInsufficientFunds},
		{"Wrapped", fmt.Errorf("authorize: %w", declined), providers.KindDeclined, providers.CodeInsufficientFunds},
		{"NotExecuted", &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeIdempotencyKeyInUse},
			providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse},
		{"Rejected", &providers.Error{Kind: providers.KindRejected, Code: providers.CodeStateConflict},
			providers.KindRejected, providers.CodeStateConflict},
		{"ZeroErrorIsUnknown", &providers.Error{}, providers.KindUnknown, ""},
		{"FirstInChain", &providers.Error{Kind: providers.KindUnknown, Code: providers.CodeProviderTimeout, Err: declined},
			providers.KindUnknown, providers.CodeProviderTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := providers.KindOf(tc.err); got != tc.kind {
				t.Errorf("KindOf = %s, want %s", got, tc.kind)
			}
			if got := providers.CodeOf(tc.err); got != tc.code {
				t.Errorf("CodeOf = %q, want %q", got, tc.code)
			}
		})
	}
}

func TestErrorMessageAndUnwrap(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset")
	err := &providers.Error{Kind: providers.KindUnknown, Code: providers.CodeProviderInternalError, Message: "capture lost", Err: cause}
	if !errors.Is(err, cause) {
		t.Error("errors.Is does not reach the cause")
	}
	if got, want := err.Error(), "provider unknown (provider_error): capture lost"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for k, want := range map[providers.Kind]string{
		providers.KindUnknown: "unknown", providers.KindNotExecuted: "not_executed",
		providers.KindDeclined: "declined", providers.KindRejected: "rejected",
	} {
		if k.String() != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, k.String(), want)
		}
	}
}
