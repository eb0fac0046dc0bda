package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// inboundSecret is the webhook secret of the connector fake in these tests.
const inboundSecret = "whsec_inbound_test"

// verifyingProvider is a gated fake connector that also verifies the
// fake's webhooks (with inboundSecret).
type verifyingProvider struct {
	*gatedProvider
	v providers.WebhookVerifier
}

func (p verifyingProvider) ParseWebhook(h http.Header, body []byte, now time.Time) (providers.WebhookEvent, error) {
	return p.v.ParseWebhook(h, body, now)
}

// newInboundWorld is a money world whose connector fake takes webhooks
// signed with inboundSecret, and whose connector nosecret (a fake too)
// has no webhook secret.
func newInboundWorld(t *testing.T, providerTimeout time.Duration) *moneyWorld {
	t.Helper()
	return newConnectorWorld(t, providerTimeout, func(cfg *orchestrator.Config) {
		g := cfg.Providers["fake"].(*gatedProvider)
		cfg.Providers["fake"] = verifyingProvider{g, g.Provider.(*fake.Client).WithWebhookSecret(inboundSecret)}
		n := cfg.Providers["nosecret"].(*gatedProvider)
		cfg.Providers["nosecret"] = verifyingProvider{n, n.Provider.(*fake.Client)}
	}, "fake", "nosecret")
}

// event is a fake provider event of type typ about p's hold.
func event(p orchestrator.Payment, typ string, amount int64) fake.Event {
	return fake.Event{ID: fmt.Sprintf("fevt_%s_%d", typ, time.Now().UnixNano()), Object: "event", Type: typ,
		CreatedAt: moneyStart, Data: fake.EventData{HoldRef: *p.ProviderRef, PaymentID: p.ID, ObjectID: *p.ProviderRef,
			AmountMinor: amount, Currency: p.Currency}}
}

// deliverSigned hands ev to the connector as POST /webhooks/{connector}
// would, signed with secret at signedAt.
func (e *moneyEnv) deliverSigned(svc *orchestrator.Service, connector string, ev fake.Event, secret string, signedAt time.Time) (orchestrator.InboundResult, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(fake.SignatureHeader, providers.SignWebhook(secret, signedAt, body))
	return svc.ReceiveWebhook(context.Background(), connector, h, body)
}

// deliverEvent delivers ev to connector fake, signed now with its secret, and
// fails the test unless it is accepted with outcome want.
func (e *moneyEnv) deliverEvent(t *testing.T, ev fake.Event, want string) orchestrator.InboundResult {
	t.Helper()
	res, err := e.deliverSigned(e.svc, "fake", ev, inboundSecret, e.clk.Now())
	if err != nil || res.Outcome != want || res.ID != ev.ID || res.Type != ev.Type {
		t.Fatalf("deliver %s: %+v %v, want outcome %s", ev.Type, res, err, want)
	}
	return res
}

// storedOutcome is the stored outcome of the provider event id ("" when
// none is stored).
func (w *moneyWorld) storedOutcome(t *testing.T, id string) string {
	t.Helper()
	var out []string
	rows, err := w.svc.Pool().Query(context.Background(),
		`SELECT outcome FROM provider_webhook_events WHERE connector = 'fake' AND provider_event_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if len(out) > 1 {
		t.Fatalf("event %s stored %d times", id, len(out))
	}
	if len(out) == 0 {
		return ""
	}
	return out[0]
}

func TestInboundWebhook(t *testing.T) {
	t.Parallel()
	shared := newInboundWorld(t, 0)

	t.Run("SignedExpiryIsApplied", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		ev := event(p, fake.EventHoldExpired, 1000)
		res := e.deliverEvent(t, ev, orchestrator.InboundApplied)
		if res.Duplicate {
			t.Fatalf("first delivery is a duplicate: %+v", res)
		}
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusExpired {
			t.Fatalf("payment after hold.expired: %s", got.Status)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized",
			"state_changed authorized>expired", "provider_event hold_expired applied")
		if n := e.count(t, `SELECT count(*) FROM provider_webhook_events WHERE provider_event_id = $1 AND payment_id = $2
			AND tenant_id = $3 AND raw IS NOT NULL AND type = 'hold.expired' AND kind = 'hold_expired'`, ev.ID, p.ID, e.tenant); n != 1 {
			t.Fatalf("stored event rows: %d", n)
		}
		if n := e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1 AND type = 'payment.expired'`, p.ID); n != 1 {
			t.Fatalf("outbound payment.expired events: %d", n)
		}
	})

	t.Run("UntrustedDeliveryIs400AndChangesNothing", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		ev := event(p, fake.EventHoldExpired, 1000)
		body, _ := json.Marshal(ev)
		now := e.clk.Now()
		sig := func(secret string, at time.Time, b []byte) http.Header {
			h := http.Header{}
			h.Set(fake.SignatureHeader, providers.SignWebhook(secret, at, b))
			return h
		}
		tampered := append([]byte{}, body...)
		tampered[len(tampered)-2] = ' '
		for name, tc := range map[string]struct {
			connector string
			header    http.Header
			body      []byte
			param     string
		}{
			"Missing":           {"fake", http.Header{}, body, "signature"},
			"OtherSecret":       {"fake", sig("whsec_other", now, body), body, "signature"},
			"Stale":             {"fake", sig(inboundSecret, now.Add(-6*time.Minute), body), body, "signature"},
			"FromTheFuture":     {"fake", sig(inboundSecret, now.Add(6*time.Minute), body), body, "signature"},
			"BodyAltered":       {"fake", sig(inboundSecret, now, body), tampered, "signature"},
			"Malformed":         {"fake", http.Header{fake.SignatureHeader: {"t=x,v1=zz"}}, body, "signature"},
			"UnknownConnector":  {"nope", sig(inboundSecret, now, body), body, "connector"},
			"ConnectorNoSecret": {"nosecret", sig("", now, body), body, "connector"},
			"SignedButNotEvent": {"fake", sig(inboundSecret, now, []byte(`[1,2]`)), []byte(`[1,2]`), "body"},
			"SignedWithoutAnID": {"fake", sig(inboundSecret, now, []byte(`{"type":"hold.expired"}`)), []byte(`{"type":"hold.expired"}`), "body"},
		} {
			_, err := e.svc.ReceiveWebhook(context.Background(), tc.connector, tc.header, tc.body)
			var ae *orchestrator.Error
			if orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed || !errors.As(err, &ae) || ae.Param != tc.param {
				t.Errorf("%s: %v, want validation_failed on %s", name, err, tc.param)
			}
		}
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusAuthorized {
			t.Fatalf("payment after untrusted deliveries: %s", got.Status)
		}
		if o := e.storedOutcome(t, ev.ID); o != "" {
			t.Fatalf("an untrusted delivery was stored: %s", o)
		}
	})

	t.Run("DuplicateChangesNothing", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		ev := event(p, fake.EventHoldExpired, 1000)
		e.deliverEvent(t, ev, orchestrator.InboundApplied)
		before := e.history(t, p.ID)
		if res := e.deliverEvent(t, ev, orchestrator.InboundApplied); !res.Duplicate {
			t.Fatalf("second delivery: %+v", res)
		}
		if after := e.history(t, p.ID); !slices.Equal(before, after) {
			t.Fatalf("a duplicate changed the history:\n%v\n%v", before, after)
		}
		// A retry weeks later (a provider retries for days; a replayed
		// event may come any time) is received in another month, a
		// partition of its own: still a duplicate.
		later := e.clk.Now().AddDate(0, 0, 40)
		laterSvc := orchestrator.NewService(orchestrator.Config{Pool: e.svc.Pool(), Clock: func() time.Time { return later },
			Providers:       map[string]providers.Provider{"fake": verifyingProvider{e.gates, e.fake.WithWebhookSecret(inboundSecret)}},
			DefaultProvider: "fake"})
		if res, err := e.deliverSigned(laterSvc, "fake", ev, inboundSecret, later); err != nil || !res.Duplicate {
			t.Fatalf("delivery 40 days later: %+v %v", res, err)
		}
		if o := e.storedOutcome(t, ev.ID); o != orchestrator.InboundApplied {
			t.Fatalf("stored outcome %q", o)
		}
	})

	t.Run("ConcurrentDeliveriesOnThreeInstancesChangeOnce", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		// Three instances: three Services on one database, their clocks a
		// millisecond apart, so that only the event's lock (not the key of
		// a row received at the same instant) keeps a duplicate out.
		instances := []*orchestrator.Service{e.svc}
		for i := range 2 {
			clock := func() time.Time { return e.clk.Now().Add(time.Duration(i+1) * time.Millisecond) }
			instances = append(instances, orchestrator.NewService(orchestrator.Config{Pool: e.svc.Pool(), Clock: clock,
				Providers:       map[string]providers.Provider{"fake": verifyingProvider{e.gates, e.fake.WithWebhookSecret(inboundSecret)}},
				DefaultProvider: "fake"}))
		}
		for round := range 5 {
			p := e.authorized(t, fmt.Sprintf("p%d", round), 1000)
			same := event(p, fake.EventHoldExpired, 1000)
			// The same event three times, and two other events saying the
			// same, all at once.
			evs := []fake.Event{same, same, same, event(p, fake.EventHoldExpired, 1000), event(p, fake.EventHoldCanceled, 0)}
			results := make([]orchestrator.InboundResult, len(evs))
			errs := make([]error, len(evs))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, ev := range evs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i], errs[i] = e.deliverSigned(instances[i%len(instances)], "fake", ev, inboundSecret, e.clk.Now())
				}()
			}
			close(start)
			wg.Wait()
			firsts, applied := 0, 0
			for i, r := range results {
				if errs[i] != nil {
					t.Fatalf("delivery %d: %v", i, errs[i])
				}
				if !r.Duplicate {
					firsts++
					if r.Outcome == orchestrator.InboundApplied {
						applied++
					}
				}
			}
			if firsts != 3 || applied != 1 {
				t.Fatalf("round %d: %d first deliveries (want 3 events), %d applied (want 1): %+v", round, firsts, applied, results)
			}
			changes := 0
			for _, h := range e.history(t, p.ID) {
				if h == "state_changed authorized>expired" || h == "state_changed authorized>canceled" {
					changes++
				}
			}
			if changes != 1 {
				t.Fatalf("round %d: %d state changes: %v", round, changes, e.history(t, p.ID))
			}
			if n := e.count(t, `SELECT count(*) FROM provider_webhook_events WHERE payment_id = $1`, p.ID); n != 3 {
				t.Fatalf("round %d: %d events stored, want 3", round, n)
			}
		}
	})

	t.Run("OlderAuthorizedAfterCapturedIsIgnored", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		ev := event(p, fake.EventHoldAuthorized, 1000)
		e.deliverEvent(t, ev, orchestrator.InboundIgnoredStale)
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusCaptured || got.CapturedMinor != 1000 {
			t.Fatalf("payment regressed: %+v", got)
		}
		if o := e.storedOutcome(t, ev.ID); o != orchestrator.InboundIgnoredStale {
			t.Fatalf("stored outcome %q", o)
		}
		h := e.history(t, p.ID)
		if h[len(h)-1] != "provider_event authorized ignored_stale" {
			t.Fatalf("history: %v", h)
		}
		// So is an expiry after the capture.
		e.deliverEvent(t, event(p, fake.EventHoldExpired, 1000), orchestrator.InboundIgnoredStale)
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusCaptured {
			t.Fatalf("payment regressed: %+v", got)
		}
	})

	t.Run("UnknownObjectIsStored", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		ev := fake.Event{ID: "fevt_unknown_" + t.Name(), Type: fake.EventHoldAuthorized, CreatedAt: moneyStart,
			Data: fake.EventData{HoldRef: "fh_not_ours", ObjectID: "fh_not_ours", AmountMinor: 500, Currency: "EUR"}}
		e.deliverEvent(t, ev, orchestrator.InboundUnknownObject)
		if n := e.count(t, `SELECT count(*) FROM provider_webhook_events WHERE provider_event_id = $1 AND payment_id IS NULL
			AND tenant_id IS NULL AND hold_ref = 'fh_not_ours'`, ev.ID); n != 1 {
			t.Fatalf("stored: %d", n)
		}
	})

	t.Run("LostCaptureAnswerIsSettledByWebhook", func(t *testing.T) {
		t.Parallel()
		e := newInboundWorld(t, 500*time.Millisecond).newTenant(t)
		p := e.authorized(t, "p1", 1000)
		e.arm(t, orchestrator.OpCapture, "c1", fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
		if a := e.capture(t, p.ID, "c1", `{"amount_minor":600}`); a.err != nil || !a.out.Pending {
			t.Fatalf("capture with a lost answer: %+v %v", a.out, a.err)
		}
		ev := event(p, fake.EventHoldCaptured, 600)
		ev.IdempotencyKey = providers.ForwardedKey(e.tenant, orchestrator.OpCapture, "c1")
		e.deliverEvent(t, ev, orchestrator.InboundApplied)
		got := e.payment(t, p.ID)
		if got.Status != orchestrator.StatusCaptured || got.CapturedMinor != 600 {
			t.Fatalf("payment after hold.captured: %+v", got)
		}
		if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1 AND status = 'succeeded' AND kind = 'capture'`, p.ID); n != 1 {
			t.Fatalf("succeeded captures: %d", n)
		}
		// The retry of the request answers from what the webhook settled.
		if a := e.capture(t, p.ID, "c1", `{"amount_minor":600}`); a.err != nil || a.out.Pending || a.out.Payment.CapturedMinor != 600 {
			t.Fatalf("retry: %+v %v", a.out, a.err)
		}
		if ops := e.fakeOps(t, orchestrator.OpCapture, "c1"); len(ops) != 1 {
			t.Fatalf("the provider captured %d times", len(ops))
		}
	})

	t.Run("LostRefundAnswerIsSettledByWebhookAndAFailureFailsIt", func(t *testing.T) {
		t.Parallel()
		e := newInboundWorld(t, 500*time.Millisecond).newTenant(t)
		p := e.captured(t, "p1", 1000)
		e.arm(t, orchestrator.OpRefund, "r1", fake.Fault{Operation: fake.OpRefund, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
		if a := e.refund(t, p.ID, "r1", `{"amount_minor":300}`); a.err != nil || !a.out.Pending {
			t.Fatalf("refund with a lost answer: %+v %v", a.out, a.err)
		}
		ev := event(p, fake.EventRefundSucceeded, 300)
		ev.IdempotencyKey = providers.ForwardedKey(e.tenant, orchestrator.OpRefund, "r1")
		ev.Data.ObjectID = "fr_ours"
		e.deliverEvent(t, ev, orchestrator.InboundApplied)
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusPartiallyRefunded || got.RefundedMinor != 300 {
			t.Fatalf("payment after refund.succeeded: %+v", got)
		}
		// The same refund told again under another event id: known.
		again := event(p, fake.EventRefundSucceeded, 300)
		again.Data.ObjectID = "fr_ours"
		e.deliverEvent(t, again, orchestrator.InboundIgnoredStale)

		e.arm(t, orchestrator.OpRefund, "r2", fake.Fault{Operation: fake.OpRefund, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
		if a := e.refund(t, p.ID, "r2", `{"amount_minor":100}`); a.err != nil || !a.out.Pending {
			t.Fatalf("second refund: %+v %v", a.out, a.err)
		}
		failed := event(p, fake.EventRefundFailed, 100)
		failed.IdempotencyKey = providers.ForwardedKey(e.tenant, orchestrator.OpRefund, "r2")
		failed.Data.FailureCode = "expired_or_canceled_card"
		e.deliverEvent(t, failed, orchestrator.InboundApplied)
		if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1 AND status = 'failed'
			AND failure_code = 'expired_or_canceled_card'`, p.ID); n != 1 {
			t.Fatalf("failed refunds: %d", n)
		}
		if got := e.payment(t, p.ID); got.RefundedMinor != 300 {
			t.Fatalf("a failed refund moved the amounts: %+v", got)
		}
	})

	t.Run("RefundMadeAtTheProviderIsRecorded", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		ev := event(p, fake.EventRefundSucceeded, 300)
		ev.IdempotencyKey, ev.Data.ObjectID = "dashboard-refund-1", "fr_dashboard"
		e.deliverEvent(t, ev, orchestrator.InboundApplied)
		got := e.payment(t, p.ID)
		if got.Status != orchestrator.StatusPartiallyRefunded || got.RefundedMinor != 300 {
			t.Fatalf("payment after an outside refund: %+v", got)
		}
		if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1 AND kind = 'refund' AND status = 'succeeded'
			AND provider_ref = 'fr_dashboard' AND amount_minor = 300`, p.ID); n != 1 {
			t.Fatalf("recorded refunds: %d", n)
		}
		if n := e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1 AND type IN ('refund.succeeded', 'payment.partially_refunded')`, p.ID); n != 2 {
			t.Fatalf("outbound events: %d", n)
		}
		// Told again: known. And the merchant can refund only the rest.
		dup := event(p, fake.EventRefundSucceeded, 300)
		dup.Data.ObjectID = "fr_dashboard"
		e.deliverEvent(t, dup, orchestrator.InboundIgnoredStale)
		r := e.refund(t, p.ID, "r1", `{}`)
		if r.err != nil || r.out.Refund == nil || r.out.Refund.AmountMinor != 700 || r.out.Payment.Status != orchestrator.StatusRefunded {
			t.Fatalf("refund of the rest: %+v %v", r.out, r.err)
		}
	})

	t.Run("HoldVoidedAtTheProviderIsCanceled", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		e.deliverEvent(t, event(p, fake.EventHoldCanceled, 0), orchestrator.InboundApplied)
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusCanceled {
			t.Fatalf("payment: %+v", got)
		}
		wantRefusal(t, e.capture(t, p.ID, "c1", `{}`).err, orchestrator.CodePaymentStateConflict, "")
	})

	t.Run("DisputeIsRecordedOnce", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		ev := event(p, fake.EventDisputeCreated, 1000)
		ev.Data.ObjectID, ev.Data.Reason = "fdp_1", "fraudulent"
		e.deliverEvent(t, ev, orchestrator.InboundApplied)
		again := event(p, fake.EventDisputeCreated, 1000)
		again.Data.ObjectID = "fdp_1"
		e.deliverEvent(t, again, orchestrator.InboundIgnoredStale)
		if n := e.count(t, `SELECT count(*) FROM payment_disputes WHERE payment_id = $1 AND provider_ref = 'fdp_1'
			AND reason = 'fraudulent' AND amount_minor = 1000`, p.ID); n != 1 {
			t.Fatalf("disputes: %d", n)
		}
		if n := e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1 AND type = 'payment.disputed'
			AND object->>'object' = 'dispute'`, p.ID); n != 1 {
			t.Fatalf("payment.disputed events: %d", n)
		}
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusCaptured {
			t.Fatalf("a dispute moved the state: %+v", got)
		}
		h := e.history(t, p.ID)
		if h[len(h)-2] != "provider_event dispute_opened applied" || h[len(h)-1] != "provider_event dispute_opened ignored_stale" {
			t.Fatalf("history: %v", h)
		}
	})
}
