package stripe

import (
	"net/http"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
)

// TestNewValidatesConfig: a bad Config is refused naming its field.
func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // "" when New must succeed
	}{
		{"Minimal", Config{SecretKey: "sk_test_1"}, ""},
		{"RestrictedKey", Config{SecretKey: "rk_live_1"}, ""},
		{"StripeMock", Config{SecretKey: "sk_test_1", APIBase: "http://127.0.0.1:12111"}, ""},
		{"TestKeyOverHTTPProxy", Config{SecretKey: "sk_test_1", APIBase: "http://stripe-mock:12111"}, ""},
		{"LiveKeyOverLoopbackHTTP", Config{SecretKey: "sk_live_1", APIBase: "http://localhost:8443"}, ""},
		{"LiveKeyOverHTTPS", Config{SecretKey: "sk_live_1", APIBase: "https://egress.internal/stripe", Timeout: time.Minute}, ""},
		{"OwnHTTPClient", Config{SecretKey: "sk_test_1", HTTPClient: &http.Client{}}, ""},
		{"NoKey", Config{}, "SecretKey"},
		{"PublishableKey", Config{SecretKey: "pk_test_1"}, "SecretKey"},
		{"KeyWithNewline", Config{SecretKey: "sk_test_1\n"}, "SecretKey"},
		{"NegativeTimeout", Config{SecretKey: "sk_test_1", Timeout: -time.Second}, "Timeout"},
		{"NotAURL", Config{SecretKey: "sk_test_1", APIBase: "api.stripe.com"}, "APIBase"},
		{"OtherScheme", Config{SecretKey: "sk_test_1", APIBase: "ftp://api.stripe.com"}, "APIBase"},
		{"CredentialsInURL", Config{SecretKey: "sk_test_1", APIBase: "https://u:p@api.stripe.com"}, "APIBase"},
		{"LiveKeyOverPlainHTTP", Config{SecretKey: "sk_live_1", APIBase: "http://proxy.example:80"}, "APIBase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tc.cfg)
			switch {
			case tc.field == "" && (err != nil || c == nil):
				t.Fatalf("New: %v", err)
			case tc.field != "" && err == nil:
				t.Fatalf("New accepted a bad %s", tc.field)
			case tc.field != "" && !strings.Contains(err.Error(), "Config."+tc.field):
				t.Fatalf("New: %q does not name Config.%s", err, tc.field)
			}
		})
	}
}

// TestClientsForTwoAccountsCoexist: each Client carries its own key to its
// own base URL; the global stripe.Key is never set.
func TestClientsForTwoAccountsCoexist(t *testing.T) {
	t.Parallel()
	a, b := newEmulator(t), newEmulator(t)
	b.secret = "sk_test_other_account_999"
	ca, cb := a.client(t, 5*time.Second), b.client(t, 5*time.Second)
	ha := mustAuthorize(t, ca, 100)
	hb := mustAuthorize(t, cb, 200)
	if _, err := ca.Lookup(t.Context(), hb.Ref); err == nil {
		t.Errorf("account A sees account B's %s", hb.Ref)
	}
	if got, err := cb.Lookup(t.Context(), hb.Ref); err != nil || got.AmountMinor != 200 {
		t.Errorf("account B's own hold: %+v, %v", got, err)
	}
	if ha.Ref == "" || stripego.Key != "" {
		t.Errorf("global stripe.Key is %q", stripego.Key)
	}
}

// TestName is the provider name stored with every payment.
func TestName(t *testing.T) {
	t.Parallel()
	c, err := New(Config{SecretKey: "sk_test_1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "stripe" {
		t.Fatalf("Name() = %q", c.Name())
	}
}
