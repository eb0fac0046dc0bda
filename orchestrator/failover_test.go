package orchestrator_test

// Failover across connectors: the next connector is tried only
// when the attempt certainly moved no money, and never twice the money,
// whatever runs concurrently or crashes.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// routeVia makes the tenant's routing send every payment to names, in
// that order (a new routing version).
func (e *moneyEnv) routeVia(t *testing.T, names ...string) {
	t.Helper()
	choice := orchestrator.ConnectorChoice{Strategy: "priority"}
	for _, n := range names {
		choice.Connectors = append(choice.Connectors, orchestrator.WeightedConnector{Name: n})
	}
	if _, err := e.svc.SetRouting(context.Background(), e.tenant, orchestrator.RoutingRules{Default: choice}, "test"); err != nil {
		t.Fatal(err)
	}
}

// attempts returns payment id's attempts as (connector, outcome) pairs.
func (e *moneyEnv) attempts(t *testing.T, id string) []string {
	t.Helper()
	as, err := e.svc.Attempts(context.Background(), orchestrator.Scope{}, id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(as))
	for i, a := range as {
		outcome := "-"
		if a.Outcome != nil {
			outcome = *a.Outcome
		}
		out[i] = fmt.Sprintf("%d %s %s", a.Attempt, a.Connector, outcome)
		if a.ForwardedKey != orchestrator.AttemptKey(e.tenant, mustKey(t, e, id), a.Attempt) {
			t.Fatalf("attempt %d of %s forwarded %s", a.Attempt, id, a.ForwardedKey)
		}
	}
	return out
}

// mustKey returns payment id's client key.
func mustKey(t *testing.T, e *moneyEnv, id string) string {
	t.Helper()
	return e.payment(t, id).IdempotencyKey
}

// wantAttempts fails the test unless payment id's attempts are want.
func (e *moneyEnv) wantAttempts(t *testing.T, id string, want ...string) {
	t.Helper()
	if got := e.attempts(t, id); !slices.Equal(got, want) {
		t.Fatalf("attempts of %s:\n got  %q\n want %q", id, got, want)
	}
}

// opsAt returns the operations connector's fake executed under the key of
// attempt n of the payment made under the client key key.
func (e *moneyEnv) opsAt(t *testing.T, connector, key string, n int) []fake.Operation {
	t.Helper()
	ops, err := e.fakes[connector].Operations(context.Background(), orchestrator.AttemptKey(e.tenant, key, n))
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// holdsAt returns every hold connector's fake has for payment id.
func (e *moneyEnv) holdsAt(t *testing.T, connector, id string) []providers.ReportRow {
	t.Helper()
	var out []providers.ReportRow
	req := providers.ReportRequest{From: moneyStart.Add(-time.Hour), To: e.clk.Now().Add(time.Hour)}
	err := e.fakes[connector].Report(context.Background(), req, func(r providers.ReportRow) error {
		if r.PaymentID == id {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// armAt arms a fault at connector's fake for attempt n of the payment
// made under the client key key.
func (e *moneyEnv) armAt(t *testing.T, connector, key string, n int, f fake.Fault) {
	t.Helper()
	f.IdempotencyKey = orchestrator.AttemptKey(e.tenant, key, n)
	if err := e.fakes[connector].InjectFault(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

func TestFailover(t *testing.T) {
	t.Parallel()
	shared := newConnectorWorld(t, 0, func(c *orchestrator.Config) {
		// fake_b treats card_declined as soft, to see a decline fail over
		// with the fake's own decline; fake_a keeps the default table.
		c.Connectors = map[string]orchestrator.ConnectorOptions{"fake_b": {SoftDeclines: []string{"card_declined"}}}
	}, "fake_a", "fake_b", "fake_c")

	t.Run("NotExecutedFailsOverToTheNextConnector", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		const key, body = "f1", `{"amount_minor":1500,"currency":"EUR"}`
		e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute})
		a := e.authorize(t, key, body)
		p := a.out.Payment
		if a.err != nil || p.Status != orchestrator.StatusAuthorized || p.Provider != "fake_b" || p.Attempt != 2 || a.stored == nil {
			t.Fatalf("authorize: %+v %v", p, a.err)
		}
		e.wantAttempts(t, p.ID, "1 fake_a not_executed", "2 fake_b authorized")
		if ops := e.opsAt(t, "fake_a", key, 1); len(ops) != 0 {
			t.Fatalf("fake_a executed %+v", ops)
		}
		if ops := e.opsAt(t, "fake_b", key, 2); len(ops) != 1 {
			t.Fatalf("fake_b executed %+v", ops)
		}
		if hs := e.holdsAt(t, "fake_a", p.ID); len(hs) != 0 {
			t.Fatalf("holds at fake_a: %+v", hs)
		}
		if hs := e.holdsAt(t, "fake_b", p.ID); len(hs) != 1 || hs[0].Ref != *p.ProviderRef {
			t.Fatalf("holds at fake_b: %+v", hs)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize not_executed",
			"attempt_started  ", "provider_call authorize ok", "state_changed pending>authorized")

		// A retry replays the same bytes; capture goes to fake_b.
		retry := e.authorize(t, key, body)
		if retry.replay == nil || string(retry.replay.Body) != string(a.stored.Body) {
			t.Fatalf("retry: %+v", retry)
		}
		c := e.capture(t, p.ID, "c1", `{}`)
		if c.err != nil || c.out.Payment.Status != orchestrator.StatusCaptured {
			t.Fatalf("capture: %+v %v", c.out, c.err)
		}
		if hs := e.holdsAt(t, "fake_b", p.ID); len(hs) != 1 || hs[0].Status != providers.StatusCaptured {
			t.Fatalf("holds at fake_b after capture: %+v", hs)
		}
	})

	t.Run("PinnedProviderNeverFailsOver", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		const key, body = "f2", `{"amount_minor":1500,"currency":"EUR","provider":"fake_a"}`
		e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute})
		a := e.authorize(t, key, body)
		wantRefusal(t, a.err, orchestrator.CodeProviderUnavailable, "")
		e.wantAttempts(t, orchestrator.PaymentID(e.tenant, key), "1 fake_a not_executed")
		if ops := e.opsAt(t, "fake_b", key, 2); len(ops) != 0 {
			t.Fatalf("fake_b executed %+v", ops)
		}
	})

	t.Run("HardDeclineIsFinal", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		const key = "f3"
		a := e.authorize(t, key, `{"amount_minor":1500,"currency":"EUR","payment_method":"pm_card_chargeDeclined"}`)
		wantRefusal(t, a.err, orchestrator.CodePaymentDeclined, "")
		p := a.out.Payment
		if p.Status != orchestrator.StatusFailed || p.Provider != "fake_a" || p.Attempt != 1 {
			t.Fatalf("declined: %+v", p)
		}
		e.wantAttempts(t, p.ID, "1 fake_a declined")
		if ops := e.opsAt(t, "fake_b", key, 2); len(ops) != 0 {
			t.Fatalf("fake_b executed %+v", ops)
		}
	})

	t.Run("SoftDeclineTriesTheNextConnector", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		// fake_b lists card_declined as soft: its decline sends the
		// payment on to fake_c, whose (default) table does not, so its
		// decline is final.
		e.routeVia(t, "fake_b", "fake_c", "fake_a")
		const key = "f4"
		a := e.authorize(t, key, `{"amount_minor":1500,"currency":"EUR","payment_method":"pm_card_chargeDeclined"}`)
		wantRefusal(t, a.err, orchestrator.CodePaymentDeclined, "")
		p := a.out.Payment
		if p.Status != orchestrator.StatusFailed || p.Provider != "fake_c" || p.Attempt != 2 || *p.FailureCode != "card_declined" {
			t.Fatalf("declined: %+v", p)
		}
		e.wantAttempts(t, p.ID, "1 fake_b declined", "2 fake_c declined")
		if ops := e.opsAt(t, "fake_a", key, 3); len(ops) != 0 {
			t.Fatalf("fake_a executed %+v", ops)
		}
	})

	t.Run("DefaultSoftDeclinesTryTheNextConnector", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		e.routeVia(t, "fake_a", "fake_c")
		// try_again_later is in the default table (fake_a's and fake_c's):
		// fake_a's decline moves the payment on; fake_c, the route's end,
		// declines too, and that is the answer.
		for _, pm := range []string{"pm_card_tryAgainLater", "pm_card_chargeDeclinedProcessingError", "pm_card_issuerUnavailable"} {
			key := "f4-" + pm
			a := e.authorize(t, key, `{"amount_minor":1500,"currency":"EUR","payment_method":"`+pm+`"}`)
			wantRefusal(t, a.err, orchestrator.CodePaymentDeclined, "")
			p := a.out.Payment
			if p.Provider != "fake_c" || p.Attempt != 2 {
				t.Fatalf("%s: %+v", pm, p)
			}
			e.wantAttempts(t, p.ID, "1 fake_a declined", "2 fake_c declined")
		}
	})

	t.Run("AttemptsAreCapped", func(t *testing.T) {
		t.Parallel()
		w := newConnectorWorld(t, 0, func(c *orchestrator.Config) { c.MaxAttempts = 2 }, "fake_a", "fake_b", "fake_c")
		e := w.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b", "fake_c")
		const key, body = "f5", `{"amount_minor":1500,"currency":"EUR"}`
		for n, c := range []string{"fake_a", "fake_b", "fake_c"} {
			e.armAt(t, c, key, n+1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute})
		}
		a := e.authorize(t, key, body)
		wantRefusal(t, a.err, orchestrator.CodeProviderUnavailable, "")
		id := orchestrator.PaymentID(e.tenant, key)
		e.wantAttempts(t, id, "1 fake_a not_executed", "2 fake_b not_executed")
		// The retry stays on the last attempt allowed.
		a = e.authorize(t, key, body)
		wantRefusal(t, a.err, orchestrator.CodeProviderUnavailable, "")
		e.wantAttempts(t, id, "1 fake_a not_executed", "2 fake_b not_executed")
		if p := e.payment(t, id); p.Status != orchestrator.StatusPending || p.Provider != "fake_b" {
			t.Fatalf("payment: %+v", p)
		}
	})

	t.Run("UnknownOutcomeStaysOnItsConnectorAndTheResolverSettlesItThere", func(t *testing.T) {
		t.Parallel()
		w := newConnectorWorld(t, time.Second, nil, "fake_a", "fake_b")
		e := w.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		const key, body = "f6", `{"amount_minor":2000,"currency":"EUR"}`
		// fake_a creates the hold and the answer is lost: no reference,
		// an unknown outcome.
		e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
		a := e.authorize(t, key, body)
		p := a.out.Payment
		if a.err != nil || !a.out.Pending || p.Provider != "fake_a" || p.ProviderRef != nil {
			t.Fatalf("timeout: %+v %v", a.out, a.err)
		}
		// fake_a now refuses the retry before executing it: even so the
		// retry may not fail over, since the first call placed a hold
		// for all it knows.
		e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute, Count: 1})
		retry := e.authorize(t, key, body)
		wantRefusal(t, retry.err, orchestrator.CodeProviderUnavailable, "")
		e.wantAttempts(t, p.ID, "1 fake_a not_executed")
		e.clk.Add(2 * time.Minute)
		st, err := e.svc.ResolvePending(context.Background(), time.Minute, 10)
		if err != nil || st.Settled != 1 {
			t.Fatalf("resolve: %+v %v", st, err)
		}
		settled := e.payment(t, p.ID)
		if settled.Status != orchestrator.StatusAuthorized || settled.Provider != "fake_a" || settled.Attempt != 1 {
			t.Fatalf("settled: %+v", settled)
		}
		if ops := e.opsAt(t, "fake_b", key, 2); len(ops) != 0 {
			t.Fatalf("fake_b executed %+v", ops)
		}
		if hs := e.holdsAt(t, "fake_a", p.ID); len(hs) != 1 {
			t.Fatalf("holds at fake_a: %+v", hs)
		}
	})

	// The crash case the counts exist for: a call of attempt 1 is in
	// flight (counted, not answered) when another execution, having taken
	// the key over, sees fake_a refuse before executing. That refusal says
	// nothing about the call in flight: no failover; the call in flight
	// then places the one hold. Failing over here would have made two.
	t.Run("ACallInFlightBlocksTheFailover", func(t *testing.T) {
		t.Parallel()
		w := newConnectorWorld(t, 0, nil, "fake_a", "fake_b")
		e := w.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		const key, body = "f7", `{"amount_minor":1500,"currency":"EUR"}`
		open := e.gateAt("fake_a", key, 1)
		// The first execution: claimed and run by hand, since its lease
		// will be lost and its answer not stored.
		ctx := context.Background()
		fp := fingerprint(t, orchestrator.OpAuthorize, nil, body)
		b, err := e.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{TenantID: e.tenant, Operation: orchestrator.OpAuthorize, Key: key, Fingerprint: fp})
		if err != nil || b.Claim == nil {
			t.Fatalf("claim: %+v %v", b, err)
		}
		first := make(chan answer)
		go func() {
			out, err := e.svc.Authorize(ctx, b.Claim, orchestrator.AuthorizeInput{TenantID: e.tenant, Key: key, Fingerprint: fp,
				AmountMinor: 1500, Currency: "EUR"})
			first <- answer{out: out, err: err}
		}()
		id := orchestrator.PaymentID(e.tenant, key)
		testkit.WaitFor(t, 10*time.Second, "the first execution's attempt", testkit.Until(func() bool {
			return e.count(t, `SELECT count(*) FROM payment_attempts WHERE payment_id = $1`, id) == 1
		}))
		// The first execution's lease runs out (it looks crashed); the
		// retry takes the key over, and fake_a refuses its call.
		w.clk.Add(time.Minute)
		e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute, Count: 1})
		retry := e.authorize(t, key, body)
		if !retry.claim.Takeover {
			t.Fatalf("retry did not take the key over: %+v", retry.claim)
		}
		wantRefusal(t, retry.err, orchestrator.CodeProviderUnavailable, "")
		e.wantAttempts(t, id, "1 fake_a not_executed")
		open()
		a := <-first
		if a.out.Payment.Status != orchestrator.StatusAuthorized || a.out.Payment.Provider != "fake_a" {
			t.Fatalf("first execution: %+v %v", a.out, a.err)
		}
		if hs, hb := e.holdsAt(t, "fake_a", id), e.holdsAt(t, "fake_b", id); len(hs) != 1 || len(hb) != 0 {
			t.Fatalf("holds: fake_a %+v, fake_b %+v", hs, hb)
		}
	})

	// Concurrent duplicates while fake_a refuses half its calls before
	// executing: however the executions interleave, one hold in total,
	// and every answer stored for the key is the same bytes.
	t.Run("ConcurrentDuplicatesMakeOneHold", func(t *testing.T) {
		t.Parallel()
		w := newConnectorWorld(t, 0, nil, "fake_a", "fake_b")
		e := w.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		for k := range 10 {
			key := fmt.Sprintf("dup-%d", k)
			body := `{"amount_minor":1200,"currency":"EUR"}`
			e.armAt(t, "fake_a", key, 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute, Probability: 0.5})
			var wg sync.WaitGroup
			answers := make([]answer, 8)
			for i := range answers {
				wg.Go(func() { answers[i] = e.authorize(t, key, body) })
			}
			wg.Wait()
			id := orchestrator.PaymentID(e.tenant, key)
			var stored []byte
			for _, a := range answers {
				var body []byte
				switch {
				case a.replay != nil:
					body = a.replay.Body
				case a.stored != nil:
					body = a.stored.Body
				case a.code() == orchestrator.CodeIdempotencyKeyInUse, a.code() == orchestrator.CodeProviderUnavailable, a.out.Pending:
					continue
				default:
					t.Fatalf("%s: unexpected answer %+v %v", key, a.out, a.err)
				}
				if stored != nil && string(stored) != string(body) {
					t.Fatalf("%s: answers differ:\n%s\n%s", key, stored, body)
				}
				stored = body
			}
			ha, hb := e.holdsAt(t, "fake_a", id), e.holdsAt(t, "fake_b", id)
			if len(ha)+len(hb) > 1 {
				t.Fatalf("%s: holds fake_a %+v, fake_b %+v", key, ha, hb)
			}
			// Retry until it settles (fake_a keeps refusing half its
			// calls; fake_b takes the rest): exactly one hold, and the
			// retries answer what was stored.
			for range 5 {
				if e.payment(t, id).Status != orchestrator.StatusPending {
					break
				}
				e.authorize(t, key, body)
			}
			p := e.payment(t, id)
			ha, hb = e.holdsAt(t, "fake_a", id), e.holdsAt(t, "fake_b", id)
			if p.Status != orchestrator.StatusAuthorized || len(ha)+len(hb) != 1 || *p.ProviderRef != append(ha, hb...)[0].Ref {
				t.Fatalf("%s: %+v with holds fake_a %+v, fake_b %+v", key, p, ha, hb)
			}
			if final := e.authorize(t, key, body); final.replay == nil || (stored != nil && string(final.replay.Body) != string(stored)) {
				t.Fatalf("%s: replay %+v differs from %s", key, final, stored)
			}
		}
	})
}

// gateAt closes the gate of connector's next call with the key of attempt
// n of the payment made under key (later calls pass), and returns the
// function that opens it.
func (e *moneyEnv) gateAt(connector, key string, n int) (open func()) {
	fwd := orchestrator.AttemptKey(e.tenant, key, n)
	ch := make(chan struct{})
	g := e.gated[connector]
	g.mu.Lock()
	g.gates[fwd] = ch
	if g.once == nil {
		g.once = map[string]bool{}
	}
	g.once[fwd] = true
	g.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	w := newConnectorWorld(t, 0, func(c *orchestrator.Config) {
		c.Breaker = orchestrator.BreakerConfig{Window: time.Minute, MinCalls: 2, ErrorPercent: 50, Cooldown: 30 * time.Second}
	}, "fake_a", "fake_b")
	e := w.newTenant(t)
	e.routeVia(t, "fake_a", "fake_b")
	ctx := context.Background()
	if err := w.fakes["fake_a"].InjectFault(ctx, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute}); err != nil {
		t.Fatal(err)
	}
	health := func() orchestrator.BreakerState {
		for _, h := range w.svc.ConnectorHealth() {
			if h.Name == "fake_a" {
				return h.Breaker
			}
		}
		t.Fatal("no fake_a in ConnectorHealth")
		return ""
	}
	// Two failures open fake_a's breaker; both payments fail over.
	for _, key := range []string{"b1", "b2"} {
		a := e.authorize(t, key, `{"amount_minor":100,"currency":"EUR"}`)
		if a.err != nil || a.out.Payment.Provider != "fake_b" {
			t.Fatalf("%s: %+v %v", key, a.out, a.err)
		}
	}
	if got := health(); got != orchestrator.BreakerOpen {
		t.Fatalf("breaker after two failures: %s", got)
	}
	// Open: the next payment starts on fake_b; fake_a is not called.
	a := e.authorize(t, "b3", `{"amount_minor":100,"currency":"EUR"}`)
	if a.err != nil || a.out.Payment.Provider != "fake_b" || a.out.Payment.Attempt != 1 {
		t.Fatalf("b3: %+v %v", a.out, a.err)
	}
	e.wantAttempts(t, a.out.Payment.ID, "1 fake_b authorized")
	// After the cooldown one probe goes to fake_a, healthy again: closed.
	if err := w.fakes["fake_a"].ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	w.clk.Add(31 * time.Second)
	if got := health(); got != orchestrator.BreakerHalfOpen {
		t.Fatalf("breaker after the cooldown: %s", got)
	}
	a = e.authorize(t, "b4", `{"amount_minor":100,"currency":"EUR"}`)
	if a.err != nil || a.out.Payment.Provider != "fake_a" {
		t.Fatalf("b4 (the probe): %+v %v", a.out, a.err)
	}
	if got := health(); got != orchestrator.BreakerClosed {
		t.Fatalf("breaker after a good probe: %s", got)
	}
}
