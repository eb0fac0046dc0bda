package fake_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

const hookSecret = "whsec_fake_test"

// receiver is a webhook endpoint: it verifies each delivery as payorch
// does (Client.ParseWebhook) and keeps the events in arrival order.
type receiver struct {
	verifier *fake.Client
	mu       sync.Mutex
	got      []providers.WebhookEvent
	bad      int
	// failFirst answers 500 to that many deliveries first.
	failFirst int
	// block, when set, holds every delivery until it is closed.
	block chan struct{}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rc.block != nil {
		select {
		case <-rc.block:
		case <-r.Context().Done():
		}
	}
	body, _ := io.ReadAll(r.Body)
	ev, err := rc.verifier.ParseWebhook(r.Header, body, time.Now())
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil {
		rc.bad++
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rc.failFirst > 0 {
		rc.failFirst--
		http.Error(w, "not now", http.StatusInternalServerError)
		return
	}
	rc.got = append(rc.got, ev)
}

func (rc *receiver) events() []providers.WebhookEvent {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// types lists the types of the events received about hold ref.
func (rc *receiver) types(ref string) []string {
	var out []string
	for _, ev := range rc.events() {
		if ev.HoldRef == ref {
			out = append(out, ev.Type)
		}
	}
	return out
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, what, testkit.Until(cond))
}

// startHooked starts a fake that sends its webhooks to a new receiver.
func startHooked(t *testing.T, cfg fake.Config) (*fake.Running, *fake.Client, *receiver) {
	t.Helper()
	rc := &receiver{verifier: fake.NewClient("http://unused", nil).WithWebhookSecret(hookSecret)}
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)
	cfg.WebhookURL, cfg.WebhookSecret = hs.URL+"/webhooks/fake", hookSecret
	r, c := start(t, cfg)
	return r, c, rc
}

func TestWebhooksSent(t *testing.T) {
	t.Parallel()

	t.Run("EveryChangeIsSignedAndSent", func(t *testing.T) {
		t.Parallel()
		clk := testkit.NewClock(time.Now())
		r, c, rc := startHooked(t, fake.Config{Clock: clk.Now, ExpiryCheck: 10 * time.Millisecond, HoldLifetime: time.Hour})
		h := authorize(t, c, 1000)
		capKey := newKey(t)
		if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: capKey, Ref: h.Ref, AmountMinor: 800}); err != nil {
			t.Fatal(err)
		}
		rf, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 300})
		if err != nil {
			t.Fatal(err)
		}
		// A capture refused after it executed: capture.failed.
		if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref}); err == nil {
			t.Fatal("second capture succeeded")
		}
		if _, err := c.OpenDispute(t.Context(), fake.Dispute{HoldRef: h.Ref, Reason: "fraudulent"}); err != nil {
			t.Fatal(err)
		}
		lapsing := authorize(t, c, 500)
		clk.Add(2 * time.Hour)
		want := []string{fake.EventHoldAuthorized, fake.EventHoldCaptured, fake.EventRefundSucceeded, fake.EventCaptureFailed,
			fake.EventDisputeCreated}
		waitFor(t, "the hold's events", func() bool { return len(rc.types(h.Ref)) == len(want) })
		waitFor(t, "the expiry", func() bool { return len(rc.types(lapsing.Ref)) == 2 })
		if got := rc.types(h.Ref); !slices.Equal(got, want) {
			t.Fatalf("events: %v, want %v", got, want)
		}
		if got := rc.types(lapsing.Ref); !slices.Equal(got, []string{fake.EventHoldAuthorized, fake.EventHoldExpired}) {
			t.Fatalf("events of the lapsed hold: %v", got)
		}
		for _, ev := range rc.events() {
			switch ev.Type {
			case fake.EventHoldCaptured:
				if ev.Kind != providers.WebhookCaptureSucceeded || ev.AmountMinor != 800 || ev.IdempotencyKey != capKey || ev.Currency != "EUR" {
					t.Errorf("capture event: %+v", ev)
				}
			case fake.EventRefundSucceeded:
				if ev.Kind != providers.WebhookRefundSucceeded || ev.ObjectID != rf.Ref || ev.AmountMinor != 300 {
					t.Errorf("refund event: %+v", ev)
				}
			case fake.EventDisputeCreated:
				if ev.Kind != providers.WebhookDisputeOpened || ev.AmountMinor != 800 || ev.Reason != "fraudulent" {
					t.Errorf("dispute event: %+v", ev)
				}
			case fake.EventHoldExpired:
				if ev.Kind != providers.WebhookHoldExpired {
					t.Errorf("expiry event: %+v", ev)
				}
			}
		}
		// The expiry is announced once.
		if n := r.Server().NotifyExpiredHolds(); n != 0 {
			t.Fatalf("expiry announced again: %d", n)
		}
		rc.mu.Lock()
		bad := rc.bad
		rc.mu.Unlock()
		if bad != 0 {
			t.Fatalf("%d deliveries failed verification", bad)
		}
	})

	t.Run("AFailedDeliveryIsTriedAgain", func(t *testing.T) {
		t.Parallel()
		_, c, rc := startHooked(t, fake.Config{})
		rc.mu.Lock()
		rc.failFirst = 2
		rc.mu.Unlock()
		h := authorize(t, c, 1000)
		waitFor(t, "the retried delivery", func() bool { return len(rc.types(h.Ref)) == 1 })
		// The sender records the delivery once the receiver's answer is
		// back, which can come after the receiver kept the event.
		var ds []fake.WebhookDelivery
		waitFor(t, "the delivery recorded", func() bool {
			var err error
			if ds, err = c.WebhookDeliveries(t.Context()); err != nil {
				t.Fatal(err)
			}
			return len(ds) == 3
		})
		var outcomes []string
		for _, d := range ds {
			outcomes = append(outcomes, d.Outcome)
		}
		if !slices.Equal(outcomes, []string{"failed", "failed", "delivered"}) {
			t.Fatalf("deliveries: %+v", ds)
		}
	})

	t.Run("AStuckReceiverNeverDelaysTheAPI", func(t *testing.T) {
		t.Parallel()
		_, c, rc := startHooked(t, fake.Config{})
		rc.block = make(chan struct{})
		defer close(rc.block)
		for range 5 {
			start := time.Now()
			authorize(t, c, 1000)
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("an authorization took %s while the receiver hangs", d)
			}
		}
	})

	t.Run("Faults", func(t *testing.T) {
		t.Parallel()
		_, c, rc := startHooked(t, fake.Config{})
		arm := func(f fake.WebhookFault) {
			t.Helper()
			if err := c.InjectWebhookFault(t.Context(), f); err != nil {
				t.Fatal(err)
			}
		}
		capture := func(h providers.Hold) {
			t.Helper()
			if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
				t.Fatal(err)
			}
		}
		// Each case uses holds of its own; faults are armed for the next
		// event of one type, so they run one after the other.
		dropped := authorize(t, c, 1000)
		arm(fake.WebhookFault{Kind: fake.WebhookDrop, Type: fake.EventHoldCaptured, Count: 1})
		capture(dropped)
		after := authorize(t, c, 1000)
		waitFor(t, "the event after the dropped one", func() bool { return len(rc.types(after.Ref)) == 1 })
		if got := rc.types(dropped.Ref); !slices.Equal(got, []string{fake.EventHoldAuthorized}) {
			t.Fatalf("drop: %v", got)
		}

		dup := authorize(t, c, 1000)
		arm(fake.WebhookFault{Kind: fake.WebhookDuplicate, Type: fake.EventHoldCaptured, Count: 1})
		capture(dup)
		waitFor(t, "the duplicate", func() bool { return len(rc.types(dup.Ref)) == 3 })
		var ids []string
		for _, ev := range rc.events() {
			if ev.HoldRef == dup.Ref && ev.Type == fake.EventHoldCaptured {
				ids = append(ids, ev.ID)
			}
		}
		if len(ids) != 2 || ids[0] != ids[1] {
			t.Fatalf("duplicate: %v", ids)
		}

		reordered := authorize(t, c, 1000)
		arm(fake.WebhookFault{Kind: fake.WebhookReorder, Type: fake.EventHoldCaptured, Count: 1})
		capture(reordered)
		if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: reordered.Ref}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reordered events", func() bool { return len(rc.types(reordered.Ref)) == 3 })
		if got := rc.types(reordered.Ref); !slices.Equal(got, []string{fake.EventHoldAuthorized, fake.EventRefundSucceeded, fake.EventHoldCaptured}) {
			t.Fatalf("reorder: %v", got)
		}

		delayed := authorize(t, c, 1000)
		arm(fake.WebhookFault{Kind: fake.WebhookDelay, Type: fake.EventHoldCaptured, Count: 1, DelayMS: 300})
		capture(delayed)
		if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: delayed.Ref}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the delayed event", func() bool { return len(rc.types(delayed.Ref)) == 3 })
		if got := rc.types(delayed.Ref); !slices.Equal(got, []string{fake.EventHoldAuthorized, fake.EventRefundSucceeded, fake.EventHoldCaptured}) {
			t.Fatalf("delay: %v", got)
		}
		if fs, err := c.WebhookDeliveries(t.Context()); err != nil || len(fs) == 0 {
			t.Fatalf("deliveries: %v %v", fs, err)
		}
	})

	t.Run("FaultsNeedAWebhookURLAndAreValidated", func(t *testing.T) {
		t.Parallel()
		_, plain := start(t, fake.Config{})
		if err := plain.InjectWebhookFault(t.Context(), fake.WebhookFault{Kind: fake.WebhookDrop}); err == nil {
			t.Fatal("a fake without a webhook URL armed a webhook fault")
		}
		_, c, _ := startHooked(t, fake.Config{})
		for _, f := range []fake.WebhookFault{{Kind: "explode"}, {Kind: fake.WebhookDelay}, {Kind: fake.WebhookDrop, Type: "nope"}} {
			if err := c.InjectWebhookFault(t.Context(), f); err == nil {
				t.Errorf("%+v was armed", f)
			}
		}
	})
}
