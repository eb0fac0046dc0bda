package fake_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/providers/providertest"
)

// TestProvider runs the behaviour suite against a fake on loopback, over
// real HTTP, with every subtest sharing the one server.
func TestProvider(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	providertest.Run(t, providertest.Harness{
		New: func(*testing.T) providers.Provider { return c },
		TimeoutAfterExecute: func(t *testing.T, op providertest.Op, key string) {
			t.Helper()
			f := fake.Fault{Operation: fake.Op(op), Kind: fake.FaultTimeoutAfterExecute, Count: 1, IdempotencyKey: key}
			if err := c.InjectFault(t.Context(), f); err != nil {
				t.Fatalf("InjectFault: %v", err)
			}
		},
		Executed: func(t *testing.T, key string) int {
			t.Helper()
			return len(operations(t, c, key))
		},
	})
}

// testToken is the bearer token of the fakes start runs, which do sends.
const testToken = "fake-test-token"

// start runs a fake on loopback for the test (with testToken unless cfg
// names a token) and returns it with a client that sends the token.
func start(t *testing.T, cfg fake.Config) (*fake.Running, *fake.Client) {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	r, err := fake.Start("", cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return r, r.Client(nil)
}

// operations lists the executed operations carrying key.
func operations(t *testing.T, c *fake.Client, key string) []fake.Operation {
	t.Helper()
	ops, err := c.Operations(t.Context(), key)
	if err != nil {
		t.Fatalf("Operations: %v", err)
	}
	return ops
}

// inject arms f, failing the test on error.
func inject(t *testing.T, c *fake.Client, f fake.Fault) {
	t.Helper()
	if err := c.InjectFault(t.Context(), f); err != nil {
		t.Fatalf("InjectFault(%+v): %v", f, err)
	}
}

var keySeq struct {
	sync.Mutex
	n int
}

// newKey returns a forwarded key no other call in this test binary uses.
func newKey(t *testing.T) string {
	keySeq.Lock()
	defer keySeq.Unlock()
	keySeq.n++
	return providers.ForwardedKey(int64(keySeq.n), t.Name(), time.Now().String())
}

// authReq is an approving authorization of amount with a fresh key.
func authReq(t *testing.T, amount int64) providers.AuthorizeRequest {
	return providers.AuthorizeRequest{
		Key: newKey(t), PaymentID: "pay_" + newKey(t)[3:19], TenantID: 7,
		AmountMinor: amount, Currency: "EUR", PaymentMethod: "pm_card_visa",
	}
}

// authorize places a hold, failing the test on error.
func authorize(t *testing.T, c *fake.Client, amount int64) providers.Hold {
	t.Helper()
	h, err := c.Authorize(t.Context(), authReq(t, amount))
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	return h
}

// wantKind checks err's kind and, when code is not empty, its code.
func wantKind(t *testing.T, err error, kind providers.Kind, code string) {
	t.Helper()
	var pe *providers.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *providers.Error", err, err)
	}
	if pe.Kind != kind || (code != "" && pe.Code != code) {
		t.Fatalf("error %v: kind %s code %q, want %s %q", err, pe.Kind, pe.Code, kind, code)
	}
}

// rawResponse is an answer read whole.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// do sends a raw request to the fake, with testToken unless header has
// an Authorization of its own.
func do(t *testing.T, method, url string, header map[string]string, body []byte) rawResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
}
