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
