package orchestrator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers/fake"
)

// routeByAuthRate makes the tenant's default choose among names by
// authorization rate (a new routing version).
func (e *moneyEnv) routeByAuthRate(t *testing.T, opts *orchestrator.AuthRateOptions, names ...string) {
	t.Helper()
	choice := orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyAuthRate, AuthRate: opts}
	for _, n := range names {
		choice.Connectors = append(choice.Connectors, orchestrator.WeightedConnector{Name: n})
	}
	if _, err := e.svc.SetRouting(context.Background(), e.tenant, orchestrator.RoutingRules{Default: choice}, "test"); err != nil {
		t.Fatal(err)
	}
}

// declineRate arms a decline_rate fault of share p (seeded) on a fake.
func (w *moneyWorld) declineRate(t *testing.T, connector string, p float64, seed int64) {
	t.Helper()
	if err := w.fakes[connector].ClearFaults(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := w.fakes[connector].InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize,
		Kind: fake.FaultDeclineRate, Probability: p, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAuthRateRouting runs payments over two fakes through an auth_rate
// rule, reading the scores every ten payments (as the refresher would
// every two seconds), with fixed seeds: the same payments are declined
// and the same draws made on every run, so the counts below are exact
// outcomes, not chances.
func TestAuthRateRouting(t *testing.T) {
	t.Parallel()
	t.Run("TrafficMovesToTheConnectorThatAuthorizes", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, nil, "fake_a", "fake_b").newTenant(t)
		e.declineRate(t, "fake_a", 0.05, 1)
		e.declineRate(t, "fake_b", 0.20, 2)
		// Listed worse first: the order the learning finds is its own.
		e.routeByAuthRate(t, nil, "fake_b", "fake_a")
		firstOnA := 0
		for i := range 200 {
			if i%10 == 0 {
				if err := orchestrator.RefreshAuthRates(e.svc, context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			e.clk.Add(time.Second)
			a := e.authorize(t, fmt.Sprintf("ar-%d", i), `{"amount_minor":1000,"currency":"EUR"}`)
			if a.out.Payment.ID == "" {
				t.Fatalf("payment %d: %v", i, a.err)
			}
			as, err := e.svc.Attempts(context.Background(), orchestrator.Scope{}, a.out.Payment.ID)
			if err != nil {
				t.Fatal(err)
			}
			d := as[0].Routing
			if d == nil || d.Strategy != orchestrator.StrategyAuthRate || d.Chosen != as[0].Connector || len(d.Scores) != 2 {
				t.Fatalf("payment %d: attempt on %s explained as %+v", i, as[0].Connector, d)
			}
			if i >= 100 && as[0].Connector == "fake_a" {
				firstOnA++
			}
		}
		t.Logf("fake_a first in %d of payments 101 to 200", firstOnA)
		if firstOnA <= 70 {
			t.Errorf("fake_a (95 %% authorized) got %d of payments 101 to 200 first, fake_b (80 %%) the rest; want most on fake_a",
				firstOnA)
		}
	})
	t.Run("FailoverFollowsTheLearnedOrder", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, nil, "fake_a", "fake_b").newTenant(t)
		e.routeByAuthRate(t, nil, "fake_a", "fake_b")
		key := "ar-failover"
		for _, c := range []string{"fake_a", "fake_b"} {
			e.armAt(t, c, key, 1, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute, Count: 1})
		}
		p := e.authorized(t, key, 1000)
		as, err := e.svc.Attempts(context.Background(), orchestrator.Scope{}, p.ID)
		if err != nil || len(as) != 2 {
			t.Fatalf("attempts %+v (%v), want two", as, err)
		}
		first, second := as[0].Routing, as[1].Routing
		if first == nil || first.Strategy != orchestrator.StrategyAuthRate || first.Chosen != as[0].Connector {
			t.Fatalf("first attempt on %s explained as %+v", as[0].Connector, first)
		}
		if second == nil || second.Strategy != "failover" || second.From != as[0].Connector ||
			second.Chosen != as[1].Connector || second.Reason != "provider_unavailable" || as[1].Connector == as[0].Connector {
			t.Fatalf("second attempt on %s explained as %+v", as[1].Connector, second)
		}
	})
}

// firstDecision authorizes 10.00 EUR under key and returns the payment's
// first attempt, with the decision that routed it.
func (e *moneyEnv) firstDecision(t *testing.T, key string) orchestrator.Attempt {
	t.Helper()
	e.clk.Add(time.Second)
	a := e.authorize(t, key, `{"amount_minor":1000,"currency":"EUR"}`)
	if a.out.Payment.ID == "" {
		t.Fatalf("payment %s: %v", key, a.err)
	}
	as, err := e.svc.Attempts(context.Background(), orchestrator.Scope{}, a.out.Payment.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := as[0].Routing; d == nil || d.Strategy != orchestrator.StrategyAuthRate || d.Chosen != as[0].Connector {
		t.Fatalf("payment %s: attempt on %s explained as %+v", key, as[0].Connector, d)
	}
	return as[0]
}

// scoreOf is connector's candidate score in decision d.
func scoreOf(t *testing.T, d *orchestrator.RoutingDecision, connector string) orchestrator.CandidateScore {
	t.Helper()
	for _, sc := range d.Scores {
		if sc.Connector == connector {
			return sc
		}
	}
	t.Fatalf("%s not among the candidates of %+v", connector, d)
	return orchestrator.CandidateScore{}
}

// TestAuthRateLearnsFromItsOwnAnswers: the scores read by a refresh are
// not the only evidence; an instance's decisions count the answers it
// recorded itself since, at once. No refresher runs here unless a test
// calls one, so whatever moves the order is this instance's own answers.
func TestAuthRateLearnsFromItsOwnAnswers(t *testing.T) {
	t.Parallel()
	small := func(c *orchestrator.Config) {
		c.AuthRate = orchestrator.AuthRateConfig{Window: 20, MinAnswers: 10}
	}
	zero := 0
	// No exploration and no elimination: the order is the draws' alone.
	scoresOnly := &orchestrator.AuthRateOptions{ExplorationPercent: &zero, EliminationGapPercent: 100}
	t.Run("ADecliningConnectorLosesFirstPlaceWithoutARefresh", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, small, "fake_a", "fake_b").newTenant(t)
		e.declineRate(t, "fake_b", 0.5, 2)
		e.routeByAuthRate(t, scoresOnly, "fake_b", "fake_a")
		onA := 0
		for i := range 40 {
			if at := e.firstDecision(t, fmt.Sprint("before-", i)); i >= 20 && at.Connector == "fake_a" {
				onA++
			}
		}
		// Fixed seeds: exact outcomes. Without its own answers the
		// instance has no scores at all and splits evenly (about 10).
		t.Logf("fake_a first in %d of payments 21 to 40", onA)
		if onA < 18 {
			t.Fatalf("fake_a (all authorized) first in %d of payments 21 to 40 against fake_b (half declined); want 18 or more",
				onA)
		}
		// fake_a now declines every payment (hard: no failover).
		e.declineRate(t, "fake_a", 1, 1)
		onB, last := 0, orchestrator.Attempt{}
		for i := range 40 {
			last = e.firstDecision(t, fmt.Sprint("after-", i))
			if i >= 20 && last.Connector == "fake_b" {
				onB++
			}
		}
		// 18 here: fake_a keeps the lead for its first 7 declines, then
		// its draws fall below fake_b's in most payments (an even split,
		// about 10, without the instance's own answers).
		t.Logf("fake_b first in %d of payments 21 to 40 after fake_a's drop", onB)
		if onB < 16 {
			t.Fatalf("fake_b first in %d of payments 21 to 40 after fake_a started declining; want 16 or more", onB)
		}
		// The window stays Window answers: the local ones and the rest.
		if sc := scoreOf(t, last.Routing, "fake_a"); sc.Answered != 20 || sc.Authorized >= 10 {
			t.Fatalf("fake_a's score after its drop: %+v, want a window of 20 answers, mostly declines", sc)
		}
	})
	t.Run("ASoftDeclineCountsAgainstItsConnectorAtOnce", func(t *testing.T) {
		t.Parallel()
		e := newConnectorWorld(t, 0, small, "fake_a", "fake_b").newTenant(t)
		err := e.fakes["fake_a"].InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize,
			Kind: fake.FaultDeclineRate, Probability: 1, Seed: 1, DeclineCode: "processing_error"})
		if err != nil {
			t.Fatal(err)
		}
		e.routeByAuthRate(t, scoresOnly, "fake_a", "fake_b")
		// Until a payment goes first to fake_a, declined there and
		// authorized on fake_b by failover.
		var i int
		for i = 0; i < 20 && e.firstDecision(t, fmt.Sprint("soft-", i)).Connector != "fake_a"; i++ {
		}
		if i == 20 {
			t.Fatal("no payment of 20 went first to fake_a")
		}
		before := scoreOf(t, e.firstDecision(t, fmt.Sprint("soft-", i+1)).Routing, "fake_a")
		if before.Answered != 1 || before.Authorized != 0 {
			t.Fatalf("fake_a's score after its soft decline: %+v, want 0 of 1", before)
		}
	})
	t.Run("ARefreshCountsEachAnswerOnceAndSharesIt", func(t *testing.T) {
		t.Parallel()
		w := newConnectorWorld(t, 0, small, "fake_a", "fake_b")
		e := w.newTenant(t)
		e.routeByAuthRate(t, scoresOnly, "fake_a", "fake_b")
		total := func(d *orchestrator.RoutingDecision) int {
			return scoreOf(t, d, "fake_a").Answered + scoreOf(t, d, "fake_b").Answered
		}
		for i := range 5 {
			e.firstDecision(t, fmt.Sprint("once-", i))
		}
		if n := total(e.firstDecision(t, "once-5").Routing); n != 5 {
			t.Fatalf("sixth decision counted %d answers, want this instance's 5", n)
		}
		// Another instance on the same database learns them by its refresh.
		other := *w
		other.svc = w.instance()
		if err := orchestrator.RefreshAuthRates(other.svc, context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := orchestrator.RefreshAuthRates(e.svc, context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := total(e.firstDecision(t, "once-6").Routing); n != 6 {
			t.Fatalf("after a refresh, a decision counted %d answers, want the 6 recorded, each once", n)
		}
		e2 := &moneyEnv{moneyWorld: &other, tenant: e.tenant}
		if n := total(e2.firstDecision(t, "once-7").Routing); n != 6 {
			t.Fatalf("another instance after its refresh counted %d answers, want the 6 of the first", n)
		}
	})
}
