package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// Service.Authorize, called as httpapi calls it (money_test.go), against
// the fake provider on loopback.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	shared := newMoneyWorld(t, 0)

	t.Run("ApprovedHoldIsAuthorizedWithItsReferenceAndDeadline", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		const body = `{"amount_minor":1000,"currency":"EUR","description":"order 1","metadata":{"order":"1"}}`
		a := e.authorize(t, "a1", body)
		p := a.out.Payment
		if a.err != nil || a.out.Pending || p.Status != orchestrator.StatusAuthorized {
			t.Fatalf("authorize: %+v %v", a.out, a.err)
		}
		if p.ID != orchestrator.PaymentID(e.tenant, "a1") || p.AmountMinor != 1000 || p.Currency != "EUR" ||
			p.CapturedMinor != 0 || p.RefundedMinor != 0 || p.Provider != "fake" || p.PaymentMethod != orchestrator.DefaultPaymentMethod ||
			p.IdempotencyKey != "a1" || p.Description != "order 1" || p.Metadata["order"] != "1" || p.FailureCode != nil {
			t.Fatalf("payment: %+v", p)
		}
		// The fake's clock is the Service's: the hold lasts its lifetime
		// from the moment it was placed.
		if p.CaptureBefore == nil || !p.CaptureBefore.Equal(moneyStart.Add(fake.DefaultHoldLifetime)) {
			t.Fatalf("capture_before = %v, want %v", p.CaptureBefore, moneyStart.Add(fake.DefaultHoldLifetime))
		}
		sameJSON(t, "stored payment", e.payment(t, p.ID), p)
		hold := e.wantOneHold(t, p, providers.StatusAuthorized)
		if hold.AmountMinor != 1000 || hold.Currency != "EUR" {
			t.Fatalf("hold: %+v", hold)
		}
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, "a1"); len(ops) != 1 || ops[0].Outcome != fake.OutcomeSucceeded || ops[0].Ref != *p.ProviderRef {
			t.Fatalf("provider operations: %+v", ops)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized")

		// The settling statement stored the answer (Claim.Answer), and a
		// retry replays it byte for byte without calling the provider.
		want, _ := render(a.out, nil)
		if a.claim.Completed() == nil || string(a.claim.Completed().Body) != string(want.Body) {
			t.Fatalf("stored with the settlement: %+v", a.stored)
		}
		again := e.authorize(t, "a1", body)
		if again.replay == nil || string(again.replay.Body) != string(a.stored.Body) || again.claim != nil {
			t.Fatalf("retry: %+v", again)
		}
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, "a1"); len(ops) != 1 {
			t.Fatalf("%d provider operations after the retry", len(ops))
		}
	})

	t.Run("DeclineFailsThePaymentAndIsPaymentDeclined", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		a := e.authorize(t, "d1", `{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_chargeDeclined"}`)
		p := a.out.Payment
		if a.code() != orchestrator.CodePaymentDeclined {
			t.Fatalf("decline: %v", a.err)
		}
		// The error carries the failed payment, so the answer can name it.
		if p.ID != orchestrator.PaymentID(e.tenant, "d1") || p.Status != orchestrator.StatusFailed ||
			p.FailureCode == nil || *p.FailureCode != providers.CodeCardDeclined || p.CaptureBefore != nil || p.ProviderRef == nil {
			t.Fatalf("declined payment: %+v", p)
		}
		sameJSON(t, "stored payment", e.payment(t, p.ID), p)
		if a.stored == nil || a.stored.Status != 402 || !strings.Contains(string(a.stored.Body), p.ID) {
			t.Fatalf("a decline is a final answer: stored %+v", a.stored)
		}
		e.wantOneHold(t, p, providers.StatusDeclined)
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, "d1"); len(ops) != 1 || ops[0].Outcome != providers.CodeCardDeclined {
			t.Fatalf("provider operations: %+v", ops)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize declined", "state_changed pending>failed")
	})

	// The provider refused to run the request (503, nothing executed): the
	// payment stays pending, the key is released, and the retry places
	// the one hold, whether the refusal came before the hold was created
	// or before it was confirmed.
	for _, target := range []fake.Op{fake.OpCreate, fake.OpAuthorize} {
		t.Run("NotExecutedBefore_"+string(target)+"_IsProviderUnavailableAndTheRetryHoldsOnce", func(t *testing.T) {
			t.Parallel()
			e := shared.newTenant(t)
			const key, body = "u1", `{"amount_minor":1500,"currency":"EUR"}`
			e.arm(t, orchestrator.OpAuthorize, key, fake.Fault{Operation: target, Kind: fake.FaultErrorBeforeExecute, Count: 1})
			a := e.authorize(t, key, body)
			var appErr *orchestrator.Error
			if !errors.As(a.err, &appErr) || appErr.Code != orchestrator.CodeProviderUnavailable || appErr.RetryAfter <= 0 {
				t.Fatalf("first attempt: %v", a.err)
			}
			id := orchestrator.PaymentID(e.tenant, key)
			if a.stored != nil || e.payment(t, id).Status != orchestrator.StatusPending {
				t.Fatalf("after provider_unavailable: stored %+v, payment %+v", a.stored, e.payment(t, id))
			}
			if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 0 {
				t.Fatalf("the provider executed %+v", ops)
			}

			retry := e.authorize(t, key, body)
			p := retry.out.Payment
			if retry.err != nil || p.Status != orchestrator.StatusAuthorized || p.ID != id || !retry.claim.Resumed {
				t.Fatalf("retry: %+v %v (claim %+v)", p, retry.err, retry.claim)
			}
			e.wantOneHold(t, p, providers.StatusAuthorized)
			if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 1 || ops[0].Outcome != fake.OutcomeSucceeded {
				t.Fatalf("provider operations: %+v", ops)
			}
			want := []string{"state_changed >pending", "provider_call authorize not_executed"}
			if target == fake.OpAuthorize {
				// The reference was saved before the confirmation: the
				// retry looks the hold up first, then confirms it.
				want = append(want, "provider_call lookup ok")
			}
			e.wantHistory(t, id, append(want, "provider_call authorize ok", "state_changed pending>authorized")...)
		})
	}

	t.Run("TimeoutAfterExecuteIsPendingUntilTheResolverLooksItUp", func(t *testing.T) {
		t.Parallel()
		e := newMoneyEnv(t, time.Second)
		const key, body = "t1", `{"amount_minor":2000,"currency":"EUR"}`
		e.arm(t, orchestrator.OpAuthorize, key, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
		a := e.authorize(t, key, body)
		p := a.out.Payment
		// The hold was placed but the answer was lost: pending, with the
		// reference saved as early as the provider gave it, and nothing
		// stored for the key.
		if a.err != nil || !a.out.Pending || p.Status != orchestrator.StatusPending || p.ProviderRef == nil || a.stored != nil {
			t.Fatalf("lost answer: %+v %v stored %+v", a.out, a.err, a.stored)
		}
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 1 || ops[0].Outcome != fake.OutcomeSucceeded {
			t.Fatalf("provider operations: %+v", ops)
		}
		ctx := context.Background()
		// Not yet old enough for the resolver.
		if st, err := e.svc.ResolvePending(ctx, time.Minute, 10); err != nil || st != (orchestrator.ResolveStats{}) {
			t.Fatalf("early resolve: %+v %v", st, err)
		}
		e.clk.Add(2 * time.Minute)
		st, err := e.svc.ResolvePending(ctx, time.Minute, 10)
		if err != nil || st != (orchestrator.ResolveStats{Examined: 1, Settled: 1}) {
			t.Fatalf("resolve: %+v %v", st, err)
		}
		settled := e.payment(t, p.ID)
		if settled.Status != orchestrator.StatusAuthorized || *settled.ProviderRef != *p.ProviderRef ||
			settled.CaptureBefore == nil || !settled.CaptureBefore.Equal(moneyStart.Add(fake.DefaultHoldLifetime)) {
			t.Fatalf("settled: %+v", settled)
		}
		e.wantOneHold(t, settled, providers.StatusAuthorized)
		history := []string{"state_changed >pending", "provider_call authorize unknown", "provider_call lookup ok",
			"state_changed pending>authorized"}
		e.wantHistory(t, p.ID, history...)

		// The client's retry finds it settled: no further provider call.
		retry := e.authorize(t, key, body)
		if retry.err != nil || retry.out.Payment.Status != orchestrator.StatusAuthorized || retry.stored == nil {
			t.Fatalf("retry: %+v %v", retry.out, retry.err)
		}
		sameJSON(t, "retry's payment", retry.out.Payment, settled)
		e.wantHistory(t, p.ID, history...)
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 1 {
			t.Fatalf("provider operations after the retry: %+v", ops)
		}
	})

	t.Run("KeyReusedAfterPurgeWithAnotherBodyIsRefusedByThePayment", func(t *testing.T) {
		t.Parallel()
		e := newMoneyEnv(t, 0)
		ctx := context.Background()
		const key, body = "r1", `{"amount_minor":1000,"currency":"EUR"}`
		first := e.authorized(t, key, 1000)
		purge := func() {
			t.Helper()
			e.clk.Add(orchestrator.DefaultKeyTTL + time.Hour)
			if n, err := e.svc.PurgeExpiredKeys(ctx, 100); err != nil || n != 1 {
				t.Fatalf("purged %d keys: %v", n, err)
			}
		}
		purge()
		// The key's record is gone; the payment, found by its
		// deterministic id, still knows the first request.
		a := e.authorize(t, key, `{"amount_minor":2000,"currency":"EUR"}`)
		var appErr *orchestrator.Error
		if !errors.As(a.err, &appErr) || appErr.Code != orchestrator.CodeIdempotencyKeyReused || !slices.Equal(appErr.Fields, []string{"amount_minor"}) {
			t.Fatalf("other body: %v (%+v)", a.err, appErr)
		}
		sameJSON(t, "payment after the refused reuse", e.payment(t, first.ID), first)

		// The same body again, after another purge, gets the payment as it
		// is, with no provider call.
		purge()
		again := e.authorize(t, key, body)
		if again.err != nil || again.claim == nil {
			t.Fatalf("same body after purge: %+v %v", again.out, again.err)
		}
		sameJSON(t, "payment found again", again.out.Payment, first)
		e.wantOneHold(t, first, providers.StatusAuthorized)
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 1 {
			t.Fatalf("provider operations: %+v", ops)
		}
		e.wantHistory(t, first.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized")
	})

	t.Run("ValidationNamesTheFieldAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		manyKeys := map[string]string{}
		for i := range 51 {
			manyKeys[fmt.Sprint("k", i)] = "v"
		}
		valid := orchestrator.AuthorizeInput{TenantID: e.tenant, Key: "v1", AmountMinor: 1000, Currency: "EUR",
			Fingerprint: fingerprint(t, orchestrator.OpAuthorize, nil, `{"amount_minor":1000,"currency":"EUR"}`)}
		for _, tc := range []struct {
			name  string
			edit  func(*orchestrator.AuthorizeInput)
			param string
		}{
			{"ZeroAmount", func(in *orchestrator.AuthorizeInput) { in.AmountMinor = 0 }, "amount_minor"},
			{"NegativeAmount", func(in *orchestrator.AuthorizeInput) { in.AmountMinor = -1 }, "amount_minor"},
			{"AmountOverTheLimit", func(in *orchestrator.AuthorizeInput) { in.AmountMinor = orchestrator.MaxAmountMinor + 1 }, "amount_minor"},
			{"LowerCaseCurrency", func(in *orchestrator.AuthorizeInput) { in.Currency = "eur" }, "currency"},
			{"UnknownCurrency", func(in *orchestrator.AuthorizeInput) { in.Currency = "ABC" }, "currency"},
			{"UnconfiguredProvider", func(in *orchestrator.AuthorizeInput) { in.Provider = "stripe" }, "provider"},
			{"MalformedPaymentMethod", func(in *orchestrator.AuthorizeInput) { in.PaymentMethod = "visa" }, "payment_method"},
			{"LongDescription", func(in *orchestrator.AuthorizeInput) { in.Description = strings.Repeat("é", 1001) }, "description"},
			{"TooManyMetadataKeys", func(in *orchestrator.AuthorizeInput) { in.Metadata = manyKeys }, "metadata"},
			{"LongMetadataKey", func(in *orchestrator.AuthorizeInput) { in.Metadata = map[string]string{strings.Repeat("k", 41): "v"} }, "metadata"},
		} {
			in := valid
			tc.edit(&in)
			_, err := e.svc.Authorize(context.Background(), nil, in)
			var appErr *orchestrator.Error
			if !errors.As(err, &appErr) || appErr.Code != orchestrator.CodeValidationFailed || appErr.Param != tc.param {
				t.Errorf("%s: %v (%+v), want validation_failed on %s", tc.name, err, appErr, tc.param)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM payments WHERE tenant_id = $1`, e.tenant); n != 0 {
			t.Fatalf("%d payments written by invalid requests", n)
		}
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, "v1"); len(ops) != 0 {
			t.Fatalf("provider operations: %+v", ops)
		}
		// The valid input itself passes (so each case fails for its field).
		if out, err := e.svc.Authorize(context.Background(), nil, valid); err != nil || out.Payment.Status != orchestrator.StatusAuthorized {
			t.Fatalf("valid input: %+v %v", out, err)
		}
	})

	t.Run("ConcurrentRequestsWithOneKeyExecuteOnceAndHoldOnce", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		const key, body, n = "c1", `{"amount_minor":700,"currency":"EUR"}`, 16
		// The execution that claims the key waits at the provider's door
		// until every other request has had its answer.
		open := e.gate(key)
		var wg sync.WaitGroup
		defer wg.Wait() // after the gate opens, even when the test fails
		defer open()
		answers := make(chan answer, n)
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers <- e.authorize(t, key, body)
			}()
		}
		close(start)
		for range n - 1 {
			a := <-answers
			if a.code() != orchestrator.CodeIdempotencyKeyInUse {
				t.Fatalf("a request that met the execution in flight got %+v %v, want idempotency_key_in_use", a.out, a.err)
			}
		}
		open()
		executed := <-answers
		if executed.claim == nil || executed.err != nil || executed.out.Payment.Status != orchestrator.StatusAuthorized {
			t.Fatalf("the execution: %+v %v", executed.out, executed.err)
		}
		p := executed.out.Payment
		if m := e.count(t, `SELECT count(*) FROM payments WHERE tenant_id = $1`, e.tenant); m != 1 {
			t.Fatalf("%d payments", m)
		}
		e.wantOneHold(t, p, providers.StatusAuthorized)
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 1 {
			t.Fatalf("provider operations: %+v", ops)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized")
		// A late retry replays the stored answer.
		if late := e.authorize(t, key, body); late.replay == nil || string(late.replay.Body) != string(executed.stored.Body) {
			t.Fatalf("late retry: %+v %v", late.out, late.err)
		}
	})
}
