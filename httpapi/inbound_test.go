package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// inboundSecret is the webhook secret of connector fake.
const inboundSecret = "whsec_httpapi_test"

// inboundEnv is an API server whose connector fake is a fake provider
// sending its webhooks to the server's POST /webhooks/fake, signed with
// inboundSecret, on a clock of the test's (holds last an hour).
type inboundEnv struct {
	*env
	clk     *testkit.Clock
	running *fake.Running
	provs   map[string]providers.Provider
}

func newInboundEnv(t *testing.T) *inboundEnv {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	base := "http://" + hs.Listener.Addr().String()
	clk := testkit.NewClock(time.Now())
	fr, err := fake.Start("127.0.0.1:0", fake.Config{Clock: clk.Now, HoldLifetime: time.Hour, TimeoutHang: 10 * time.Second,
		WebhookURL: base + "/webhooks/fake", WebhookSecret: inboundSecret, ExpiryCheck: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	fc := fr.Client(&http.Client{}).WithWebhookSecret(inboundSecret)
	pool := pgtest.DB(t)
	provs := map[string]providers.Provider{"fake": fc}
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Providers: provs, DefaultProvider: "fake",
		ProviderTimeout: 500 * time.Millisecond})
	// Outbound webhooks too: the console's payment page lists deliveries.
	hooks := webhooks.New(webhooks.Config{Pool: pool})
	srv := httpapi.New(httpapi.Config{Service: svc, Webhooks: hooks,
		Reconciler: reconcile.New(reconcile.Config{Pool: pool, Providers: provs})})
	t.Cleanup(srv.Close)
	hs.Config.Handler = srv.Handler()
	hs.Start()
	t.Cleanup(hs.Close)
	tenant, _, key, err := svc.CreateTenant(context.Background(), "Acme")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{fake: fc, srv: srv, url: base, svc: svc, hooks: hooks, pool: pool, keys: map[orchestrator.Role]string{orchestrator.RoleMerchant: key},
		tenant: tenant.ID}
	return &inboundEnv{env: e, clk: clk, running: fr, provs: provs}
}

// waitFor waits up to 15 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 15*time.Second, what, testkit.Until(cond))
}

// getPayment reads payment id as the merchant.
func (e *inboundEnv) getPayment(t *testing.T, id string) payment {
	t.Helper()
	res, b := e.do(t, "GET", "/v1/payments/"+id, e.keys[orchestrator.RoleMerchant], nil, nil)
	if res.StatusCode != 200 {
		t.Fatalf("get %s: %d %s", id, res.StatusCode, b)
	}
	return decode[payment](t, b)
}

// stored is the outcome of the stored event of type typ about payment id
// ("" when none is stored yet).
func (e *inboundEnv) stored(t *testing.T, id, typ string) string {
	t.Helper()
	var out string
	err := e.pool.QueryRow(context.Background(), `SELECT coalesce(min(outcome), '') FROM provider_webhook_events
		WHERE payment_id = $1 AND type = $2`, id, typ).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// signedEvent is a fake provider event about ref, and its signed headers.
func signedEvent(typ, ref string, at time.Time, secret string) ([]byte, map[string]string) {
	body, _ := json.Marshal(fake.Event{ID: fmt.Sprintf("fevt_t_%d", time.Now().UnixNano()), Object: "event", Type: typ,
		CreatedAt: at, Data: fake.EventData{HoldRef: ref, ObjectID: ref, AmountMinor: 1000, Currency: "EUR"}})
	return body, map[string]string{"Content-Type": "application/json", fake.SignatureHeader: providers.SignWebhook(secret, at, body)}
}

func TestProviderWebhooks(t *testing.T) {
	t.Parallel()

	t.Run("SignatureDecidesOverHTTP", func(t *testing.T) {
		t.Parallel()
		e := newInboundEnv(t)
		p := e.authorizeOK(t, "p1", 1000)
		now := time.Now()
		for name, tc := range map[string]struct {
			path   string
			secret string
			at     time.Time
			param  string
		}{
			"OtherSecret":      {"/webhooks/fake", "whsec_other", now, "signature"},
			"Stale":            {"/webhooks/fake", inboundSecret, now.Add(-10 * time.Minute), "signature"},
			"UnknownConnector": {"/webhooks/stripe", inboundSecret, now, "connector"},
		} {
			body, hdr := signedEvent(fake.EventHoldExpired, *p.ProviderRef, tc.at, tc.secret)
			res, b := e.do(t, "POST", tc.path, "", bytes.NewReader(body), hdr)
			pr := decode[httpapi.Problem](t, b)
			if res.StatusCode != 400 || res.Header.Get("Content-Type") != "application/problem+json" ||
				pr.Code != string(orchestrator.CodeValidationFailed) || pr.Param != tc.param {
				t.Errorf("%s: %d %s", name, res.StatusCode, b)
			}
		}
		body, _ := signedEvent(fake.EventHoldExpired, *p.ProviderRef, now, inboundSecret)
		res, b := e.do(t, "POST", "/webhooks/fake", "", bytes.NewReader(body), map[string]string{"Content-Type": "application/json"})
		if res.StatusCode != 400 || decode[httpapi.Problem](t, b).Param != "signature" {
			t.Errorf("unsigned: %d %s", res.StatusCode, b)
		}
		big, bigHdr := signedEvent(fake.EventHoldExpired, strings.Repeat("x", 300<<10), now, inboundSecret)
		if res, b := e.do(t, "POST", "/webhooks/fake", "", bytes.NewReader(big), bigHdr); res.StatusCode != 413 ||
			decode[httpapi.Problem](t, b).Code != string(orchestrator.CodeBodyTooLarge) {
			t.Errorf("300 KiB: %d %s", res.StatusCode, b)
		}
		if n := e.count(t, `SELECT count(*) FROM provider_webhook_events WHERE type = 'hold.expired'`); n != 0 {
			t.Fatalf("untrusted deliveries stored %d rows", n)
		}
		if got := e.getPayment(t, p.ID); got.Status != "authorized" {
			t.Fatalf("payment after untrusted deliveries: %s", got.Status)
		}
		// A good one, with no API key, is applied; a 100 KiB event, over the
		// API's 64 KiB, is accepted too.
		body, hdr := signedEvent(fake.EventHoldExpired, *p.ProviderRef, now, inboundSecret)
		res, b = e.do(t, "POST", "/webhooks/fake", "", bytes.NewReader(body), hdr)
		var receipt orchestrator.InboundResult
		if res.StatusCode != 200 || json.Unmarshal(b, &receipt) != nil || receipt.Outcome != orchestrator.InboundApplied || receipt.Duplicate {
			t.Fatalf("good delivery: %d %s", res.StatusCode, b)
		}
		if got := e.getPayment(t, p.ID); got.Status != "expired" {
			t.Fatalf("payment after hold.expired: %s", got.Status)
		}
		wide, wideHdr := signedEvent("hold.noted", strings.Repeat("y", 100<<10), now, inboundSecret)
		if res, b := e.do(t, "POST", "/webhooks/fake", "", bytes.NewReader(wide), wideHdr); res.StatusCode != 400 ||
			decode[httpapi.Problem](t, b).Param != "body" {
			// A 100 KiB reference cannot be stored: refused as the body,
			// after the size limit let it through.
			t.Errorf("100 KiB: %d %s", res.StatusCode, b)
		}
	})

	t.Run("SameEventOnThreeInstancesChangesOnce", func(t *testing.T) {
		t.Parallel()
		e := newInboundEnv(t)
		urls := []string{e.url}
		for range 2 {
			svc := orchestrator.NewService(orchestrator.Config{Pool: e.pool, Providers: e.provs, DefaultProvider: "fake"})
			srv := httpapi.New(httpapi.Config{Service: svc})
			t.Cleanup(srv.Close)
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(hs.Close)
			urls = append(urls, hs.URL)
		}
		p := e.authorizeOK(t, "p1", 1000)
		body, hdr := signedEvent(fake.EventHoldExpired, *p.ProviderRef, time.Now(), inboundSecret)
		const n = 9
		receipts := make([]orchestrator.InboundResult, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				req, _ := http.NewRequest("POST", urls[i%3]+"/webhooks/fake", bytes.NewReader(body))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer res.Body.Close()
				if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&receipts[i]) != nil {
					t.Errorf("delivery %d: %d", i, res.StatusCode)
				}
			}()
		}
		close(start)
		wg.Wait()
		firsts := 0
		for _, r := range receipts {
			if r.Outcome != orchestrator.InboundApplied {
				t.Fatalf("receipts: %+v", receipts)
			}
			if !r.Duplicate {
				firsts++
			}
		}
		if firsts != 1 {
			t.Fatalf("%d deliveries applied the event: %+v", firsts, receipts)
		}
		if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND to_status = 'expired'`, p.ID); n != 1 {
			t.Fatalf("%d state changes to expired", n)
		}
		if n := e.count(t, `SELECT count(*) FROM provider_webhook_events WHERE payment_id = $1 AND type = 'hold.expired'`, p.ID); n != 1 {
			t.Fatalf("%d rows stored", n)
		}
	})

	t.Run("TheFakesWebhooksAreAppliedEndToEnd", func(t *testing.T) {
		t.Parallel()
		e := newInboundEnv(t)
		merchant := e.keys[orchestrator.RoleMerchant]
		// A capture whose answer is lost is settled by the fake's webhook,
		// with no resolver running.
		lost := e.authorizeOK(t, "lost", 1000)
		if err := e.fake.InjectFault(context.Background(), fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultTimeoutAfterExecute,
			Count: 1, IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpCapture, "cap-lost")}); err != nil {
			t.Fatal(err)
		}
		if res, b := e.post(t, "/v1/payments/"+lost.ID+"/capture", merchant, "cap-lost", `{}`); res.StatusCode != 202 {
			t.Fatalf("capture with a lost answer: %d %s", res.StatusCode, b)
		}
		waitFor(t, "the webhook to settle the lost capture", func() bool { return e.getPayment(t, lost.ID).Status == "captured" })
		if o := e.stored(t, lost.ID, fake.EventHoldCaptured); o != orchestrator.InboundApplied {
			t.Fatalf("hold.captured stored as %q", o)
		}

		// Capture and refund through the API: their webhooks say what we
		// know (or, if first, settle it): the money moves once either way.
		p := e.authorizeOK(t, "p1", 1000)
		if res, b := e.post(t, "/v1/payments/"+p.ID+"/capture", merchant, "cap-1", `{}`); res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, b)
		}
		if res, b := e.post(t, "/v1/payments/"+p.ID+"/refunds", merchant, "ref-1", `{"amount_minor":300}`); res.StatusCode != 201 {
			t.Fatalf("refund: %d %s", res.StatusCode, b)
		}
		for _, typ := range []string{fake.EventHoldAuthorized, fake.EventHoldCaptured, fake.EventRefundSucceeded} {
			waitFor(t, typ, func() bool { return e.stored(t, p.ID, typ) != "" })
		}
		if got := e.getPayment(t, p.ID); got.Status != "partially_refunded" || got.CapturedMinor != 1000 || got.RefundedMinor != 300 {
			t.Fatalf("payment: %+v", got)
		}
		// A dispute is recorded on the timeline and announced.
		if _, err := e.fake.OpenDispute(context.Background(), fake.Dispute{HoldRef: *p.ProviderRef, Reason: "fraudulent"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the dispute", func() bool {
			return e.count(t, `SELECT count(*) FROM payment_disputes WHERE payment_id = $1`, p.ID) == 1
		})
		res, b := e.do(t, "GET", "/v1/payments/"+p.ID+"/events", merchant, nil, nil)
		if res.StatusCode != 200 || !strings.Contains(string(b), `"operation":"dispute_opened"`) {
			t.Fatalf("timeline: %d %s", res.StatusCode, b)
		}
		if n := e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1 AND type = 'payment.disputed'`, p.ID); n != 1 {
			t.Fatalf("payment.disputed events: %d", n)
		}

		// The hold lapses at the provider: the fake says so, the payment
		// is expired without a capture attempt.
		lapsing := e.authorizeOK(t, "lapsing", 1000)
		e.clk.Add(2 * time.Hour)
		waitFor(t, "the expiry", func() bool { return e.getPayment(t, lapsing.ID).Status == "expired" })
		if o := e.stored(t, lapsing.ID, fake.EventHoldExpired); o != orchestrator.InboundApplied {
			t.Fatalf("hold.expired stored as %q", o)
		}
	})

	t.Run("FakeFaultsDropDuplicateReorder", func(t *testing.T) {
		t.Parallel()
		e := newInboundEnv(t)
		ctx := context.Background()
		merchant := e.keys[orchestrator.RoleMerchant]
		arm := func(f fake.WebhookFault) {
			t.Helper()
			if err := e.fake.InjectWebhookFault(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		deliveries := func(outcome, typ string) int {
			t.Helper()
			ds, err := e.fake.WebhookDeliveries(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, d := range ds {
				if d.Outcome == outcome && d.Type == typ {
					n++
				}
			}
			return n
		}

		// Dropped: the capture's answer and its webhook are both lost; the
		// resolver's lookup settles it all the same.
		dropped := e.authorizeOK(t, "dropped", 1000)
		arm(fake.WebhookFault{Kind: fake.WebhookDrop, Type: fake.EventHoldCaptured, Count: 1})
		if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultTimeoutAfterExecute, Count: 1,
			IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpCapture, "cap-dropped")}); err != nil {
			t.Fatal(err)
		}
		if res, b := e.post(t, "/v1/payments/"+dropped.ID+"/capture", merchant, "cap-dropped", `{}`); res.StatusCode != 202 {
			t.Fatalf("capture: %d %s", res.StatusCode, b)
		}
		waitFor(t, "the drop", func() bool { return deliveries("dropped", fake.EventHoldCaptured) == 1 })
		if got := e.getPayment(t, dropped.ID); got.Status != "authorized" || e.stored(t, dropped.ID, fake.EventHoldCaptured) != "" {
			t.Fatalf("after the dropped webhook: %+v", got)
		}
		if _, err := e.svc.ResolvePending(ctx, 0, 10); err != nil {
			t.Fatal(err)
		}
		if got := e.getPayment(t, dropped.ID); got.Status != "captured" {
			t.Fatalf("after the resolver: %+v", got)
		}

		// Duplicated: received twice, stored and applied once.
		dup := e.authorizeOK(t, "dup", 1000)
		arm(fake.WebhookFault{Kind: fake.WebhookDuplicate, Type: fake.EventHoldCaptured, Count: 1})
		if res, b := e.post(t, "/v1/payments/"+dup.ID+"/capture", merchant, "cap-dup", `{}`); res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, b)
		}
		waitFor(t, "both deliveries", func() bool { return deliveries("delivered", fake.EventHoldCaptured) >= 2 })
		if n := e.count(t, `SELECT count(*) FROM provider_webhook_events WHERE payment_id = $1 AND type = 'hold.captured'`, dup.ID); n != 1 {
			t.Fatalf("stored %d times", n)
		}
		if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND to_status = 'captured'`, dup.ID); n != 1 {
			t.Fatalf("%d state changes to captured", n)
		}

		// Reordered: hold.authorized arrives after hold.captured, and
		// changes nothing.
		late := e.authorizeOK(t, "late", 1000)
		waitFor(t, "the first authorization's event", func() bool { return e.stored(t, late.ID, fake.EventHoldAuthorized) != "" })
		arm(fake.WebhookFault{Kind: fake.WebhookReorder, Type: fake.EventHoldAuthorized, Count: 1})
		reordered := e.authorizeOK(t, "reordered", 1000)
		if res, b := e.post(t, "/v1/payments/"+reordered.ID+"/capture", merchant, "cap-reordered", `{}`); res.StatusCode != 200 {
			t.Fatalf("capture: %d %s", res.StatusCode, b)
		}
		waitFor(t, "the late authorization", func() bool { return e.stored(t, reordered.ID, fake.EventHoldAuthorized) != "" })
		if o := e.stored(t, reordered.ID, fake.EventHoldAuthorized); o != orchestrator.InboundIgnoredStale {
			t.Fatalf("late hold.authorized stored as %q", o)
		}
		var capturedAt, authorizedAt time.Time
		if err := e.pool.QueryRow(ctx, `SELECT
				(SELECT received_at FROM provider_webhook_events WHERE payment_id = $1 AND type = 'hold.captured'),
				(SELECT received_at FROM provider_webhook_events WHERE payment_id = $1 AND type = 'hold.authorized')`,
			reordered.ID).Scan(&capturedAt, &authorizedAt); err != nil {
			t.Fatal(err)
		}
		if authorizedAt.Before(capturedAt) {
			t.Fatalf("not reordered: authorized at %s, captured at %s", authorizedAt, capturedAt)
		}
		if got := e.getPayment(t, reordered.ID); got.Status != "captured" {
			t.Fatalf("payment regressed: %+v", got)
		}
	})
}
