package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// receiver is a webhook endpoint on loopback that answers with the next
// status of its script (then 200), and keeps what it got.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	script []int
	got    []received
}

// received is one request a receiver got.
type received struct {
	at        time.Time
	eventID   string
	signature string
	body      []byte
}

func newReceiver(t *testing.T, script ...int) *receiver {
	t.Helper()
	r := &receiver{script: script}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{at: time.Now(), eventID: req.Header.Get(webhooksig.EventIDHeader),
			signature: req.Header.Get(webhooksig.Header), body: body})
		status := http.StatusOK
		if len(r.script) > 0 {
			status, r.script = r.script[0], r.script[1:]
		}
		r.mu.Unlock()
		if status == http.StatusFound {
			http.Redirect(w, req, "/elsewhere", status)
			return
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"answer":%d}`, status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// rawEndpoint registers url as an endpoint of the tenant for types, with
// secret, straight in the database: the worker's tests choose the secret,
// and reach loopback receivers past the checks endpoint creation makes
// (the endpoints API has tests of its own). It returns the endpoint's id.
func (e *moneyEnv) rawEndpoint(t *testing.T, url, secret string, types ...string) string {
	t.Helper()
	id := fmt.Sprintf("we_%032x", time.Now().UnixNano())
	_, err := e.svc.Pool().Exec(context.Background(), `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 'test', $6, $6)`, id, e.tenant, url, types, secret, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// deliver runs one delivery pass.
func (e *moneyEnv) deliver(t *testing.T) webhooks.DeliveryStats {
	t.Helper()
	st, err := e.hooks.DeliverWebhooks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// allowPrivate lets the world's webhooks deliver to loopback receivers.
func allowPrivate(c *webhooks.Config) { c.AllowPrivate = true }

func TestWebhookDelivery(t *testing.T) {
	t.Parallel()

	// A receiver failing three times gets the same event four times,
	// each retry due by the schedule, every one signed.
	t.Run("RetriesOnTheScheduleUntilDelivered", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate).newTenant(t)
		rcv := newReceiver(t, 500, 500, 500)
		const secret = "whsec_retry"
		e.rawEndpoint(t, rcv.URL, secret, "payment.authorized")
		p := e.authorized(t, "w1", 1000)
		undelivered := func(want bool) []string {
			t.Helper()
			evs, _, err := e.svc.ListEvents(context.Background(), orchestrator.Scope{TenantID: e.tenant},
				orchestrator.EventFilter{Delivered: &want})
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, ev := range evs {
				types = append(types, ev.Type)
			}
			return types
		}
		// Only payment.authorized is wanted by the endpoint.
		if got := undelivered(false); !slices.Equal(got, []string{"payment.authorized"}) {
			t.Fatalf("undelivered before: %q", got)
		}
		var dues []time.Time
		for n := 1; n <= 4; n++ {
			if st := e.deliver(t); st.Sent != 1 {
				t.Fatalf("pass %d sent %+v", n, st)
			}
			if st := e.deliver(t); st.Sent != 0 { // not due again yet
				t.Fatalf("pass %d again sent %+v", n, st)
			}
			var next time.Time
			var status string
			if err := e.svc.Pool().QueryRow(context.Background(), `SELECT status, next_attempt_at FROM webhook_deliveries d
				JOIN events ev ON ev.id = d.event_id WHERE ev.payment_id = $1`, p.ID).Scan(&status, &next); err != nil {
				t.Fatal(err)
			}
			dues = append(dues, next)
			if n < 4 {
				// Due after the n-th backoff (30 s tripling), ±10%.
				want := 30 * time.Second
				for range n - 1 {
					want *= 3
				}
				if d := next.Sub(e.clk.Now()); status != "pending" || d < want*9/10 || d > want*11/10 {
					t.Fatalf("after failure %d: %s, due in %s, want %s ±10%%", n, status, d, want)
				}
				e.clk.Set(next)
			} else if status != "delivered" {
				t.Fatalf("after the 200: %s", status)
			}
		}
		if got, done := undelivered(false), undelivered(true); len(got) != 0 || !slices.Equal(done, []string{"payment.authorized"}) {
			t.Fatalf("after: undelivered %q, delivered %q", got, done)
		}
		got := rcv.requests()
		if len(got) != 4 {
			t.Fatalf("receiver got %d requests", len(got))
		}
		for _, r := range got {
			if r.eventID != got[0].eventID || !slices.Equal(r.body, got[0].body) {
				t.Fatalf("not the same event: %s vs %s", r.eventID, got[0].eventID)
			}
			if err := webhooksig.Verify(r.signature, r.body, secret, 0, time.Now()); err != nil {
				t.Fatalf("signature: %v", err)
			}
		}
		var ev orchestrator.WebhookEvent
		if err := json.Unmarshal(got[0].body, &ev); err != nil || ev.Type != "payment.authorized" || *ev.PaymentID != p.ID || ev.ID != got[0].eventID {
			t.Fatalf("body: %s (%v)", got[0].body, err)
		}
		if n := e.count(t, `SELECT count(*) FROM webhook_delivery_attempts WHERE event_id = $1`, ev.ID); n != 4 {
			t.Fatalf("%d attempts recorded", n)
		}
	})

	// During a rotation both secrets sign; after it, the new one alone.
	t.Run("RotationSignsWithBothSecrets", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate).newTenant(t)
		rcv := newReceiver(t)
		id := e.rawEndpoint(t, rcv.URL, "whsec_new", "payment.authorized")
		if _, err := e.svc.Pool().Exec(context.Background(), `UPDATE webhook_endpoints SET previous_secret = 'whsec_old',
			previous_secret_until = $2 WHERE id = $1`, id, e.clk.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		e.authorized(t, "w6", 1000)
		e.deliver(t)
		e.clk.Add(2 * time.Hour)
		e.authorized(t, "w7", 1000)
		e.deliver(t)
		got := rcv.requests()
		if len(got) != 2 {
			t.Fatalf("%d requests", len(got))
		}
		for i, wantOld := range []bool{true, false} {
			r := got[i]
			if err := webhooksig.Verify(r.signature, r.body, "whsec_new", 0, time.Now()); err != nil {
				t.Fatalf("request %d, new secret: %v", i, err)
			}
			if err := webhooksig.Verify(r.signature, r.body, "whsec_old", 0, time.Now()); (err == nil) != wantOld {
				t.Fatalf("request %d, old secret: %v, want valid %v", i, err, wantOld)
			}
		}
	})

	// Without PAYORCH_WEBHOOK_ALLOW_PRIVATE a loopback address is refused
	// at connect time; a redirect is never followed.
	t.Run("PrivateAddressesAndRedirectsAreRefused", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, nil, "fake").newTenant(t)
		rcv := newReceiver(t)
		e.rawEndpoint(t, rcv.URL, "whsec_p", "*")
		e.authorized(t, "w2", 1000)
		if st := e.deliver(t); st.Sent != 2 || st.Failed != 2 {
			t.Fatalf("pass: %+v", st)
		}
		if got := rcv.requests(); len(got) != 0 {
			t.Fatalf("a private receiver got %d requests", len(got))
		}
		var errText string
		if err := e.svc.Pool().QueryRow(context.Background(), `SELECT error FROM webhook_delivery_attempts LIMIT 1`).Scan(&errText); err != nil ||
			errText == "" {
			t.Fatalf("attempt error %q (%v)", errText, err)
		}

		e2 := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate).newTenant(t)
		redirecting := newReceiver(t, http.StatusFound)
		e2.rawEndpoint(t, redirecting.URL, "whsec_r", "payment.pending")
		e2.authorized(t, "w3", 1000)
		if st := e2.deliver(t); st.Sent != 1 || st.Failed != 1 {
			t.Fatalf("pass: %+v", st)
		}
		if got := redirecting.requests(); len(got) != 1 {
			t.Fatalf("the redirect was followed: %d requests", len(got))
		}
	})

	// Three days of failures: the delivery is given up, the endpoint
	// disabled, and an event says so to the tenant's other endpoints.
	t.Run("AnEndpointFailingThreeDaysIsDisabled", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate).newTenant(t)
		failing := newReceiver(t, slices.Repeat([]int{503}, 100)...)
		healthy := newReceiver(t)
		id := e.rawEndpoint(t, failing.URL, "whsec_f", "payment.authorized")
		e.rawEndpoint(t, healthy.URL, "whsec_h", "webhook_endpoint.disabled")
		e.authorized(t, "w4", 1000)
		for range 40 {
			e.deliver(t)
			e.clk.Add(2 * time.Hour)
		}
		var enabled bool
		var status string
		if err := e.svc.Pool().QueryRow(context.Background(), `SELECT w.enabled, d.status FROM webhook_endpoints w
			JOIN webhook_deliveries d ON d.endpoint_id = w.id WHERE w.id = $1`, id).Scan(&enabled, &status); err != nil {
			t.Fatal(err)
		}
		if enabled || status != "failed" {
			t.Fatalf("after 3 days: enabled %v, delivery %s", enabled, status)
		}
		e.deliver(t)
		got := healthy.requests()
		if len(got) != 1 {
			t.Fatalf("the healthy endpoint got %d requests", len(got))
		}
		var ev orchestrator.WebhookEvent
		if err := json.Unmarshal(got[0].body, &ev); err != nil || ev.Type != "webhook_endpoint.disabled" || ev.PaymentID != nil {
			t.Fatalf("event: %s", got[0].body)
		}
	})

	// Three instances deliver 1,000 events together: each exactly once.
	t.Run("ThreeInstancesDeliverEachEventOnce", func(t *testing.T) {
		t.Parallel()
		w := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate)
		e := w.newTenant(t)
		rcv := newReceiver(t)
		e.rawEndpoint(t, rcv.URL, "whsec_m", "*")
		e.authorized(t, "w5", 1000) // 2 events
		// 998 more payments, inserted as the service inserts them (the
		// outbox trigger makes each a payment.pending event).
		if _, err := w.svc.Pool().Exec(context.Background(), `
			INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
				provider, payment_method, description, metadata, created_at, updated_at, route)
			SELECT $1, 'pay_' || md5(i::text), 'many-' || i, '\x00', '{}', 'pending', 100, 'EUR', 'fake', 'pm_card_visa', '', '{}',
				$2, $2, '{fake}'
			FROM generate_series(1, 998) i`, e.tenant, w.clk.Now()); err != nil {
			t.Fatal(err)
		}
		instances := []*webhooks.Service{w.hooks,
			webhooks.New(webhooks.Config{Pool: w.svc.Pool(), Clock: w.clk.Now, AllowPrivate: true}),
			webhooks.New(webhooks.Config{Pool: w.svc.Pool(), Clock: w.clk.Now, AllowPrivate: true})}
		var wg sync.WaitGroup
		for _, svc := range instances {
			wg.Go(func() {
				for {
					st, err := svc.DeliverWebhooks(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					if st.Sent == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		seen := map[string]int{}
		for _, r := range rcv.requests() {
			seen[r.eventID]++
		}
		twice := 0
		for _, n := range seen {
			if n > 1 {
				twice++
			}
		}
		if len(seen) != 1000 || twice != 0 {
			t.Fatalf("%d events delivered, %d more than once", len(seen), twice)
		}
		if n := e.count(t, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`); n != 1000 {
			t.Fatalf("%d deliveries recorded delivered", n)
		}
	})
}
