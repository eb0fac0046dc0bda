package orchestrator_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// syncBuffer is a log sink the delivery senders may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWebhookRefusalHidesTheAddress: an endpoint whose host name resolves
// to loopback ("localhost", from /etc/hosts: no network needed) is
// refused at connect time; the attempt the merchant reads says the
// address is not public without naming it, while the server log names it
// for operators.
func TestWebhookRefusalHidesTheAddress(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	e := newConnectorWorld(t, 0, nil, "fake").withHooks(func(c *webhooks.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}).newTenant(t)
	rcv := newReceiver(t)
	url := strings.Replace(rcv.URL, "127.0.0.1", "localhost", 1)
	e.rawEndpoint(t, url, "whsec_local", "payment.authorized")
	p := e.authorized(t, "ssrf-hide-1", 1000)
	if st := e.deliver(t); st.Sent != 1 || st.Failed != 1 {
		t.Fatalf("pass: %+v", st)
	}
	if got := rcv.requests(); len(got) != 0 {
		t.Fatalf("the receiver on loopback got %d requests", len(got))
	}
	ds, err := e.hooks.PaymentDeliveries(context.Background(), orchestrator.Scope{TenantID: e.tenant}, p.ID)
	if err != nil || len(ds) != 1 || len(ds[0].Tries) != 1 || ds[0].Tries[0].Error == nil {
		t.Fatalf("deliveries %+v (%v)", ds, err)
	}
	msg := *ds[0].Tries[0].Error
	if !strings.HasPrefix(msg, "refused: not a public address") {
		t.Fatalf("attempt error %q", msg)
	}
	for _, leak := range []string{"127.0.0.1", "::1", "127.", "loopback", "Loopback"} {
		if strings.Contains(msg, leak) {
			t.Fatalf("attempt error %q names the address (%q)", msg, leak)
		}
	}
	if l := logs.String(); !strings.Contains(l, "not a public address") || !strings.Contains(l, "127.0.0.1") {
		t.Fatalf("the log does not name the refused address:\n%s", l)
	}
}
