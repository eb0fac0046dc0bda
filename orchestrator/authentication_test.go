package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// The 3-D Secure tests: the fake's test methods keep Stripe's meaning
// (pm_card_threeDSecure2Required always challenges,
// pm_card_threeDSecureOptional is frictionless, pm_card_authenticationRequired
// declines authentication_required unless asked to authenticate).

// challengeBody is an authorization of amount with method and a return
// URL.
func challengeBody(amount int64, method string) string {
	return fmt.Sprintf(`{"amount_minor":%d,"currency":"EUR","payment_method":%q,"return_url":"https://shop.example/return?order=7"}`,
		amount, method)
}

// challenged authorizes with a method that always challenges and fails
// the test unless the payment waits for its shopper.
func (e *moneyEnv) challenged(t *testing.T, key string) orchestrator.Payment {
	t.Helper()
	a := e.authorize(t, key, challengeBody(1500, "pm_card_threeDSecure2Required"))
	p := a.out.Payment
	if a.err != nil || p.Status != orchestrator.StatusRequiresAction || p.NextAction == nil || p.ProviderRef == nil {
		t.Fatalf("authorize %s: %+v %v", key, p, a.err)
	}
	return p
}

// eventsOf counts payment id's outbox events of type typ.
func (e *moneyEnv) eventsOf(t *testing.T, id, typ string) int {
	t.Helper()
	return e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1 AND type = $2`, id, typ)
}

// confirm sends POST /v1/payments/{id}/confirm under key.
func (e *moneyEnv) confirm(t *testing.T, id, key string) answer {
	return e.operation(t, orchestrator.OpConfirm, (*orchestrator.Service).Confirm, id, key, `{}`)
}

func TestAuthenticationChallenge(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t, 0)

	t.Run("TheChallengeIsTheAnswerAndRetriesReplayIt", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		body := challengeBody(1500, "pm_card_threeDSecure2Required")
		a := e.authorize(t, "c1", body)
		p := a.out.Payment
		if a.err != nil || p.Status != orchestrator.StatusRequiresAction || a.stored == nil || a.stored.Status != 201 {
			t.Fatalf("authorize: %+v %v stored %+v", p, a.err, a.stored)
		}
		na := p.NextAction
		if na == nil || na.Type != "redirect_to_url" || !strings.HasPrefix(na.URL, "http://") || na.ReturnURL == nil ||
			*na.ReturnURL != "https://shop.example/return?order=7" || na.ExpiresAt == nil ||
			!na.ExpiresAt.Equal(w.clk.Now().Add(orchestrator.DefaultActionTimeout)) {
			t.Fatalf("next_action %+v", na)
		}
		if !strings.Contains(string(a.stored.Body), `"next_action":{"type":"redirect_to_url"`) {
			t.Fatalf("stored answer %s", a.stored.Body)
		}
		retry := e.authorize(t, "c1", body)
		if retry.replay == nil || string(retry.replay.Body) != string(a.stored.Body) {
			t.Fatalf("retry: %+v", retry)
		}
		e.wantOneHold(t, p, providers.StatusRequiresAction)
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>requires_action")
		if n := e.eventsOf(t, p.ID, "payment.requires_action"); n != 1 {
			t.Fatalf("%d payment.requires_action events", n)
		}
		// Nothing is held: no capture, no cancel.
		wantRefusal(t, e.capture(t, p.ID, "c1-capture", `{}`).err, orchestrator.CodePaymentStateConflict, "")
		wantRefusal(t, e.cancel(t, p.ID, "c1-cancel").err, orchestrator.CodePaymentStateConflict, "")
		// The shopper has not finished: confirm answers pending, stores
		// nothing.
		c := e.confirm(t, p.ID, "c1-confirm")
		if c.err != nil || !c.out.Pending || c.out.Payment.Status != orchestrator.StatusRequiresAction || c.stored != nil {
			t.Fatalf("confirm while waiting: %+v %v", c, c.err)
		}
	})

	t.Run("ConcurrentDuplicatesMakeOneChallenge", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		body := challengeBody(2100, "pm_card_threeDSecure2Required")
		var wg sync.WaitGroup
		urls := make(chan string, 8)
		for range 8 {
			wg.Go(func() {
				a := e.authorize(t, "dup", body)
				switch {
				case a.replay != nil:
					urls <- string(a.replay.Body)
				case a.stored != nil:
					urls <- string(a.stored.Body)
				case a.code() != orchestrator.CodeIdempotencyKeyInUse:
					t.Errorf("duplicate: %+v %v", a.out, a.err)
				}
			})
		}
		wg.Wait()
		close(urls)
		var first string
		for body := range urls {
			if first == "" {
				first = body
			} else if body != first {
				t.Fatalf("answers differ:\n%s\n%s", first, body)
			}
		}
		p := e.payment(t, orchestrator.PaymentID(e.tenant, "dup"))
		e.wantOneHold(t, p, providers.StatusRequiresAction)
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, "dup"); len(ops) != 1 || ops[0].Outcome != "requires_action" {
			t.Fatalf("fake executed %+v", ops)
		}
	})

	t.Run("FrictionlessAuthorizesInOneRequest", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		a := e.authorize(t, "f1", challengeBody(1000, "pm_card_threeDSecureOptional"))
		if a.err != nil || a.out.Payment.Status != orchestrator.StatusAuthorized || a.out.Payment.NextAction != nil {
			t.Fatalf("authorize: %+v %v", a.out.Payment, a.err)
		}
	})

	t.Run("NoShopperNoChallenge", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		a := e.authorize(t, "n1", `{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_threeDSecure2Required"}`)
		wantRefusal(t, a.err, orchestrator.CodePaymentDeclined, "")
		if p := a.out.Payment; p.Status != orchestrator.StatusFailed || *p.FailureCode != "authentication_required" {
			t.Fatalf("payment %+v", p)
		}
		// Without a return_url an insisting issuer is not asked again.
		a = e.authorize(t, "n2", `{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_authenticationRequired"}`)
		wantRefusal(t, a.err, orchestrator.CodePaymentDeclined, "")
		e.wantAttempts(t, a.out.Payment.ID, "1 fake declined")
	})

	t.Run("AuthenticationRequiredIsRetriedOnceAskingForIt", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		a := e.authorize(t, "r1", challengeBody(1200, "pm_card_authenticationRequired"))
		p := a.out.Payment
		if a.err != nil || p.Status != orchestrator.StatusRequiresAction || p.Attempt != 2 || p.Provider != "fake" {
			t.Fatalf("authorize: %+v %v", p, a.err)
		}
		e.wantAttempts(t, p.ID, "1 fake declined", "2 fake requires_action")
		// The declined attempt's object holds nothing; the retry's waits.
		hs := map[providers.Status]string{}
		for _, h := range e.holds(t, p.ID) {
			hs[h.Status] = h.Ref
		}
		if len(hs) != 2 || hs[providers.StatusDeclined] == "" || hs[providers.StatusRequiresAction] != *p.ProviderRef {
			t.Fatalf("holds at the provider: %+v", e.holds(t, p.ID))
		}
	})

	t.Run("AChallengeEndsOnceWhoeverComesFirst", func(t *testing.T) {
		t.Parallel()
		iw := newInboundWorld(t, 0)
		e := iw.newTenant(t)
		p := e.challenged(t, "race")
		if _, err := iw.fake.Authenticate(context.Background(), *p.ProviderRef, true); err != nil {
			t.Fatal(err)
		}
		iw.clk.Add(2 * time.Minute) // the sweeper looks challenges older than a minute up
		others := []*orchestrator.Service{iw.instance(), iw.instance()}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				ev := event(p, fake.EventHoldAuthorized, p.AmountMinor)
				ev.ID = fmt.Sprintf("fevt_race_%d", i)
				if _, err := e.deliverSigned(others[i%2], "fake", ev, inboundSecret, iw.clk.Now()); err != nil {
					t.Errorf("webhook: %v", err)
				}
			})
			wg.Go(func() {
				c := e.confirm(t, p.ID, fmt.Sprintf("race-confirm-%d", i))
				if c.err != nil || c.out.Payment.Status != orchestrator.StatusAuthorized {
					t.Errorf("confirm: %+v %v", c.out.Payment, c.err)
				}
			})
			wg.Go(func() {
				if _, err := others[i%2].SweepHolds(context.Background()); err != nil {
					t.Errorf("sweep: %v", err)
				}
			})
		}
		wg.Wait()
		got := e.payment(t, p.ID)
		if got.Status != orchestrator.StatusAuthorized || got.CaptureBefore == nil || got.NextAction != nil {
			t.Fatalf("payment %+v", got)
		}
		e.wantHistoryCount(t, p.ID, "state_changed requires_action>authorized", 1)
		if n := e.eventsOf(t, p.ID, "payment.authorized"); n != 1 {
			t.Fatalf("%d payment.authorized events", n)
		}
		// Then capture as usual.
		if c := e.capture(t, p.ID, "race-capture", `{}`); c.err != nil || c.out.Payment.Status != orchestrator.StatusCaptured {
			t.Fatalf("capture: %+v %v", c.out.Payment, c.err)
		}
	})

	t.Run("AFailedChallengeFailsThePayment", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.challenged(t, "fail")
		if _, err := w.fake.Authenticate(context.Background(), *p.ProviderRef, false); err != nil {
			t.Fatal(err)
		}
		c := e.confirm(t, p.ID, "fail-confirm")
		wantRefusal(t, c.err, orchestrator.CodePaymentDeclined, "")
		got := e.payment(t, p.ID)
		if got.Status != orchestrator.StatusFailed || got.FailureCode == nil || *got.FailureCode != "authentication_failed" {
			t.Fatalf("payment %+v", got)
		}
		if c.stored == nil || c.stored.Status != 402 {
			t.Fatalf("confirm's stored answer %+v", c.stored)
		}
		if again := e.confirm(t, p.ID, "fail-confirm"); again.replay == nil || string(again.replay.Body) != string(c.stored.Body) {
			t.Fatalf("confirm retry: %+v", again)
		}
		e.wantAttempts(t, p.ID, "1 fake declined")
		if n := e.eventsOf(t, p.ID, "payment.failed"); n != 1 {
			t.Fatalf("%d payment.failed events", n)
		}
	})
}

// wantHistoryCount fails the test unless payment id's history has line
// exactly n times.
func (e *moneyEnv) wantHistoryCount(t *testing.T, id, line string, n int) {
	t.Helper()
	got := 0
	for _, l := range e.history(t, id) {
		if l == line {
			got++
		}
	}
	if got != n {
		t.Fatalf("history of %s has %q %d times, want %d: %q", id, line, got, n, e.history(t, id))
	}
}

// TestAbandonedChallengeIsCanceledOnce: a challenge nobody completes is
// canceled at the provider once, by one of three instances sweeping at
// once, and the payment fails authentication_abandoned.
func TestAbandonedChallengeIsCanceledOnce(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t, 0)
	e := w.newTenant(t)
	p := e.challenged(t, "gone")
	w.clk.Add(10 * time.Minute) // looked up, still open: nothing changes
	if st, err := w.svc.SweepHolds(context.Background()); err != nil || st.Abandoned != 0 || st.Authenticated != 0 {
		t.Fatalf("early sweep: %+v %v", st, err)
	}
	if got := e.payment(t, p.ID); got.Status != orchestrator.StatusRequiresAction {
		t.Fatalf("payment before its deadline: %+v", got)
	}
	w.clk.Add(orchestrator.DefaultActionTimeout)
	instances := []*orchestrator.Service{w.svc, w.instance(), w.instance()}
	var wg sync.WaitGroup
	abandoned := make(chan int, 6)
	for i := range 6 {
		wg.Go(func() {
			st, err := instances[i%3].SweepHolds(context.Background())
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			abandoned <- st.Abandoned
		})
	}
	wg.Wait()
	close(abandoned)
	total := 0
	for n := range abandoned {
		total += n
	}
	got := e.payment(t, p.ID)
	if total != 1 || got.Status != orchestrator.StatusFailed || *got.FailureCode != orchestrator.FailureAuthenticationAbandoned {
		t.Fatalf("abandoned %d times; payment %+v", total, got)
	}
	e.wantOneHold(t, got, providers.StatusCanceled)
	ops, err := w.fake.Operations(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	cancels := 0
	for _, op := range ops {
		if op.Ref == *p.ProviderRef && op.Operation == fake.OpCancel {
			cancels++
		}
	}
	if cancels != 1 {
		t.Fatalf("%d cancels at the provider: %+v", cancels, ops)
	}
	if n := e.eventsOf(t, p.ID, "payment.failed"); n != 1 {
		t.Fatalf("%d payment.failed events", n)
	}
	// Later passes find nothing to do.
	w.clk.Add(5 * time.Minute)
	if st, err := w.svc.SweepHolds(context.Background()); err != nil || st.Abandoned != 0 {
		t.Fatalf("later sweep: %+v %v", st, err)
	}
}

// TestNoFailoverAfterAChallenge: a connector that did not execute is
// failed over before the challenge; once the next one challenged, a
// failed challenge ends the payment there: the shopper is never asked
// twice.
func TestNoFailoverAfterAChallenge(t *testing.T) {
	t.Parallel()
	w := newConnectorWorld(t, 0, nil, "fake_a", "fake_b", "fake_c")
	e := w.newTenant(t)
	e.routeVia(t, "fake_a", "fake_b", "fake_c")
	const key = "nf"
	e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute})
	a := e.authorize(t, key, challengeBody(1800, "pm_card_threeDSecure2Required"))
	p := a.out.Payment
	if a.err != nil || p.Status != orchestrator.StatusRequiresAction || p.Provider != "fake_b" || p.Attempt != 2 {
		t.Fatalf("authorize: %+v %v", p, a.err)
	}
	if _, err := w.fakes["fake_b"].Authenticate(context.Background(), *p.ProviderRef, false); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, e.confirm(t, p.ID, "nf-confirm").err, orchestrator.CodePaymentDeclined, "")
	e.wantAttempts(t, p.ID, "1 fake_a not_executed", "2 fake_b declined")
	if hs := e.holdsAt(t, "fake_c", p.ID); len(hs) != 0 {
		t.Fatalf("holds at fake_c: %+v", hs)
	}
	if hs := e.holdsAt(t, "fake_a", p.ID); len(hs) != 0 {
		t.Fatalf("holds at fake_a: %+v", hs)
	}
}
