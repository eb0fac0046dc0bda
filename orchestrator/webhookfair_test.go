package orchestrator_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// tarpit is an endpoint that accepts connections and never answers.
type tarpit struct {
	url      string
	accepted atomic.Int32
}

func newTarpit(t *testing.T) *tarpit {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tarpit{url: "http://" + l.Addr().String() + "/hooks"}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tp.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return tp
}

// otherTenant returns an env on e's world with a tenant of its own.
func (e *moneyEnv) otherTenant(t *testing.T, name string) *moneyEnv {
	t.Helper()
	tenant, _, _, err := e.svc.CreateTenant(context.Background(), t.Name()+"-"+name)
	if err != nil {
		t.Fatal(err)
	}
	return &moneyEnv{moneyWorld: e.moneyWorld, tenant: tenant.ID}
}

// pendingPayments inserts n payments of e's tenant as the service inserts
// them: the outbox trigger makes each a payment.pending event.
func (e *moneyEnv) pendingPayments(t *testing.T, prefix string, n int) {
	t.Helper()
	if _, err := e.svc.Pool().Exec(context.Background(), `
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
			provider, payment_method, description, metadata, created_at, updated_at, route)
		SELECT $1, 'pay_' || md5($3 || i), $3 || i, '\x00', '{}', 'pending', 100, 'EUR', 'fake', 'pm_card_visa', '', '{}',
			$2, $2, '{fake}'
		FROM generate_series(1, $4) i`, e.tenant, e.clk.Now(), prefix, n); err != nil {
		t.Fatal(err)
	}
}

// runDeliveryWorker runs svc's delivery passes as `serve` does (back to
// back while they find work, else every 100 ms) until the test ends.
func runDeliveryWorker(t *testing.T, svc *webhooks.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			st, err := svc.DeliverWebhooks(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("delivery pass: %v", err)
				return
			}
			if st.Sent == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitWithin polls cond until it holds, failing the test with what after
// timeout.
func waitWithin(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, timeout, what, testkit.Until(cond))
}

// An endpoint of tenant A that accepts connections and never answers,
// with 500 events due, holds at most its share of the senders: tenant B's
// event, due after A's, is delivered within 5 s, and A's attempts are
// recorded as they time out. Default senders and attempt timeout, as in
// production.
func TestWebhookTarpitDoesNotDelayOtherTenants(t *testing.T) {
	t.Parallel()
	a := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate).newTenant(t)
	b := a.otherTenant(t, "b")
	tp := newTarpit(t)
	tarpitID := a.rawEndpoint(t, tp.url, "whsec_tarpit", "*")
	a.pendingPayments(t, "tarpit-", 500)
	rcv := newReceiver(t)
	b.rawEndpoint(t, rcv.URL, "whsec_b", "payment.authorized")

	runDeliveryWorker(t, a.hooks)
	waitWithin(t, 10*time.Second, "the tarpit gets a connection", func() bool { return tp.accepted.Load() > 0 })

	a.clk.Add(time.Second) // B's event is due after every one of A's
	p := b.authorized(t, "b-1", 100)
	due := time.Now()
	waitWithin(t, 5*time.Second, "tenant B's event delivered", func() bool {
		for _, r := range rcv.requests() {
			if strings.Contains(string(r.body), p.ID) {
				return true
			}
		}
		return false
	})
	t.Logf("tenant B's event delivered %v after it was due; the tarpit got %d connections", time.Since(due),
		tp.accepted.Load())
	if n := tp.accepted.Load(); n > webhooks.DefaultWebhookSenders/4 {
		t.Fatalf("the tarpit holds %d senders at once", n)
	}

	want := fmt.Sprintf("no answer within %s", webhooks.WebhookTimeout)
	waitWithin(t, webhooks.WebhookTimeout+20*time.Second, "the tarpit's attempts recorded", func() bool {
		return a.count(t, `SELECT count(*) FROM webhook_delivery_attempts WHERE endpoint_id = $1 AND error = $2`,
			tarpitID, want) > 0
	})
	if n := a.count(t, `SELECT count(*) FROM webhook_delivery_attempts WHERE endpoint_id = $1 AND error IS DISTINCT FROM $2`,
		tarpitID, want); n != 0 {
		t.Fatalf("%d of the tarpit's attempts recorded with another error", n)
	}
}

// An endpoint that gives no answer 5 times in a row is paused by its own
// breaker, then probed once per pause (each twice the last); an answer
// closes it. The tenant's other endpoint, and another tenant's, get every
// event meanwhile.
func TestWebhookEndpointBreaker(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	a := newConnectorWorld(t, 0, nil, "fake").withHooks(func(c *webhooks.Config) {
		c.AllowPrivate, c.Senders, c.Timeout = true, 4, timeout
	}).newTenant(t)
	b := a.otherTenant(t, "b")
	var answering atomic.Bool
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client leave
		if !answering.Load() {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(slow.Close)
	slowID := a.rawEndpoint(t, slow.URL, "whsec_slow", "payment.authorized")
	sameTenant, otherTenant := newReceiver(t), newReceiver(t)
	a.rawEndpoint(t, sameTenant.URL, "whsec_same", "payment.authorized")
	b.rawEndpoint(t, otherTenant.URL, "whsec_other", "payment.authorized")
	for i := range 8 {
		a.authorized(t, fmt.Sprint("a-", i), 100)
	}
	for i := range 3 {
		b.authorized(t, fmt.Sprint("b-", i), 100)
	}
	attempts := func() int {
		return a.count(t, `SELECT count(*) FROM webhook_delivery_attempts WHERE endpoint_id = $1`, slowID)
	}
	breaker := func() (timeouts, opens int, pausedFor time.Duration) {
		t.Helper()
		var until *time.Time
		if err := a.svc.Pool().QueryRow(context.Background(), `SELECT consecutive_timeouts, breaker_opens, paused_until
			FROM webhook_endpoints WHERE id = $1`, slowID).Scan(&timeouts, &opens, &until); err != nil {
			t.Fatal(err)
		}
		if until != nil {
			pausedFor = until.Sub(a.clk.Now())
		}
		return timeouts, opens, pausedFor
	}

	st := a.deliver(t)
	if n := attempts(); n != 5 || st.BreakerOpens != 1 {
		t.Fatalf("first pass: %d attempts to the slow endpoint, %+v", n, st)
	}
	if timeouts, opens, paused := breaker(); timeouts != 5 || opens != 1 || paused != 30*time.Second {
		t.Fatalf("after 5 timeouts: %d in a row, %d opens, paused for %s", timeouts, opens, paused)
	}
	if got, other := len(sameTenant.requests()), len(otherTenant.requests()); got != 8 || other != 3 {
		t.Fatalf("while the slow endpoint failed: its tenant's other endpoint got %d of 8, the other tenant's %d of 3",
			got, other)
	}
	if st := a.deliver(t); attempts() != 5 || st.Sent != 0 {
		t.Fatalf("a pass while paused: %+v, %d attempts", st, attempts())
	}

	// The pause over, one probe; no answer: paused twice as long.
	a.clk.Add(31 * time.Second)
	a.deliver(t)
	if timeouts, opens, paused := breaker(); attempts() != 6 || timeouts != 6 || opens != 2 || paused != time.Minute {
		t.Fatalf("after the probe: %d attempts, %d in a row, %d opens, paused for %s", attempts(), timeouts, opens, paused)
	}

	// It answers: the probe closes the breaker, and the rest go.
	answering.Store(true)
	a.clk.Add(61 * time.Second)
	a.deliver(t)
	if timeouts, opens, paused := breaker(); timeouts != 0 || opens != 0 || paused != 0 {
		t.Fatalf("after an answer: %d in a row, %d opens, paused for %s", timeouts, opens, paused)
	}
	a.clk.Add(time.Hour)
	a.deliver(t)
	if n := a.count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, slowID); n != 8 {
		t.Fatalf("%d of the slow endpoint's 8 deliveries delivered once it answered", n)
	}
}
