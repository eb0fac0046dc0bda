package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// simPhase is a stretch of the simulation: payments while each fake
// declines its share.
type simPhase struct {
	payments     int
	declineShare map[string]float64
}

// simSeeds seed each fake's decline_rate: which payments it declines.
var simSeeds = map[string]int64{"fake_a": 1, "fake_b": 2}

// simPayment is what the simulation saw of one payment.
type simPayment struct {
	id, first  string
	authorized bool
	explored   bool
}

// BenchmarkAuthRateRouting simulates auth_rate routing over the real API
// (issue's measure): two fakes whose decline rates are set through their
// admin API, fake_a approving 95 % and fake_b 80 % for 500 payments, then
// fake_a 60 % for 300 more. It reports the share of traffic each phase
// sends to the right connector, how many payments after the drop it takes
// for fake_b to hold the majority, and the authorization rate of the run
// against a 50/50 volume split of the same payments (the fakes' declines
// are decided per payment, so the split's outcome on the same sequence is
// known exactly: fake.DeclineRateFires). Run it alone, once:
//
//	go test -run '^$' -bench BenchmarkAuthRateRouting -benchtime 1x ./httpapi/
//
// refresh=default reads the scores every 2 s, as production does by
// default: the instance learns from its own answers at once
// (answerWindow), the refresh only adds what other instances answered
// (none here). refresh=100ms is the same run reading the scores twenty
// times as often, for comparison.
func BenchmarkAuthRateRouting(b *testing.B) {
	for _, refresh := range []time.Duration{0, 100 * time.Millisecond} {
		name := "refresh=default"
		if refresh > 0 {
			name = "refresh=" + refresh.String()
		}
		b.Run(name, func(b *testing.B) { simulateAuthRate(b, refresh) })
	}
}

// simulateAuthRate is BenchmarkAuthRateRouting's run, the scores read
// every refresh (0: the default).
func simulateAuthRate(b *testing.B, refresh time.Duration) {
	for range b.N {
		e, fakes := newAuthRateEnv(b, refresh)
		phases := []simPhase{
			{500, map[string]float64{"fake_a": 0.05, "fake_b": 0.20}},
			{300, map[string]float64{"fake_a": 0.40, "fake_b": 0.20}},
		}
		start := time.Now()
		var run [][]simPayment
		for i, ph := range phases {
			for name, share := range ph.declineShare {
				setDeclineRate(b, fakes[name], share, simSeeds[name])
			}
			run = append(run, simulate(b, e, fmt.Sprintf("sim-%d", i), ph.payments))
		}
		elapsed := time.Since(start)
		reportSimulation(b, e.tenant, phases, run, elapsed)
	}
}

// newAuthRateEnv serves the API with connectors fake_a and fake_b, routes
// the tenant's payments by auth_rate between them (fake_b listed first),
// and runs the score refresher every refresh (0: the default).
func newAuthRateEnv(b *testing.B, refresh time.Duration) (*env, map[string]*fake.Client) {
	fakes := map[string]*fake.Client{}
	provs := map[string]providers.Provider{}
	for _, name := range []string{"fake_a", "fake_b"} {
		fr, err := fake.Start("127.0.0.1:0", fake.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
		fakes[name] = fr.Client(&http.Client{})
		provs[name] = fakes[name]
	}
	e := newMigratedEnv(b, httpapi.Config{}, orchestrator.Config{Providers: provs,
		AuthRate: orchestrator.AuthRateConfig{Refresh: refresh}})
	job := e.svc.AuthRatesJob()
	job.Start(context.Background())
	b.Cleanup(job.Stop)
	rules := `{"rules":[],"default":{"strategy":"auth_rate","connectors":[{"name":"fake_b"},{"name":"fake_a"}]}}`
	res, body := e.do(b, "PUT", fmt.Sprintf("/v1/tenants/%d/routing", e.tenant), e.keys[orchestrator.RoleAdmin],
		strings.NewReader(rules), map[string]string{"Content-Type": "application/json"})
	if res.StatusCode != http.StatusOK {
		b.Fatalf("routing: %d %s", res.StatusCode, body)
	}
	return e, fakes
}

// setDeclineRate replaces the fake's faults with a decline_rate of share.
func setDeclineRate(b *testing.B, c *fake.Client, share float64, seed int64) {
	if err := c.ClearFaults(context.Background()); err != nil {
		b.Fatal(err)
	}
	f := fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultDeclineRate, Probability: share, Seed: seed}
	if err := c.InjectFault(context.Background(), f); err != nil {
		b.Fatal(err)
	}
}

// simulate makes n payments over the API and reads each one's attempts.
func simulate(b *testing.B, e *env, prefix string, n int) []simPayment {
	out := make([]simPayment, 0, n)
	merchant := e.keys[orchestrator.RoleMerchant]
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		res, body := e.do(b, "POST", "/v1/payments", merchant, strings.NewReader(`{"amount_minor":1000,"currency":"EUR"}`),
			map[string]string{"Content-Type": "application/json", "Idempotency-Key": key})
		if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusPaymentRequired {
			b.Fatalf("payment %s: %d %s", key, res.StatusCode, body)
		}
		authorized := res.StatusCode == http.StatusCreated
		id := orchestrator.PaymentID(e.tenant, key)
		res, body = e.do(b, "GET", "/v1/payments/"+id+"/attempts", merchant, nil, nil)
		as := decode[struct {
			Data []orchestrator.Attempt `json:"data"`
		}](b, body).Data
		if res.StatusCode != http.StatusOK || len(as) != 1 || as[0].Routing == nil ||
			as[0].Routing.Strategy != orchestrator.StrategyAuthRate {
			b.Fatalf("attempts of %s: %d %s", id, res.StatusCode, body)
		}
		out = append(out, simPayment{id: id, first: as[0].Connector, authorized: authorized,
			explored: as[0].Routing.Explored})
	}
	return out
}

// reportSimulation checks the run against the fakes' rule and reports its
// figures.
func reportSimulation(b *testing.B, tenant int64, phases []simPhase, run [][]simPayment, elapsed time.Duration) {
	split := orchestrator.RoutingRules{Default: orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyVolumeSplit,
		Connectors: []orchestrator.WeightedConnector{{Name: "fake_a", Weight: 50}, {Name: "fake_b", Weight: 50}}}}
	authorized, splitAuthorized, total := 0, 0, 0
	for i, ph := range phases {
		for _, p := range run[i] {
			declined := fake.DeclineRateFires(simSeeds[p.first], p.id, ph.declineShare[p.first])
			if declined == p.authorized {
				b.Fatalf("payment %s on %s: authorized %v, but the fake's rule says declined %v", p.id, p.first,
					p.authorized, declined)
			}
			_, route := split.Decide(orchestrator.RouteInput{PaymentID: p.id})
			if !fake.DeclineRateFires(simSeeds[route[0]], p.id, ph.declineShare[route[0]]) {
				splitAuthorized++
			}
			if p.authorized {
				authorized++
			}
			total++
		}
	}
	first, second := run[0], run[1]
	b.ReportMetric(share(first[400:500], "fake_a"), "a_share_payments_401-500")
	b.ReportMetric(share(first, "fake_a"), "a_share_first_500")
	b.ReportMetric(share(second[100:200], "fake_b"), "b_share_100-200_after_drop")
	b.ReportMetric(float64(majorityAfter(second, "fake_b", 50)), "payments_to_b_majority")
	b.ReportMetric(100*float64(authorized)/float64(total), "auth_rate_%")
	b.ReportMetric(100*float64(splitAuthorized)/float64(total), "split_50_50_auth_rate_%")
	b.ReportMetric(float64(total)/elapsed.Seconds(), "payments/s")
	explored := 0
	for _, ps := range run {
		for _, p := range ps {
			if p.explored {
				explored++
			}
		}
	}
	b.ReportMetric(100*float64(explored)/float64(total), "explored_%")
}

// share is the percentage of ps that went first to connector.
func share(ps []simPayment, connector string) float64 {
	n := 0
	for _, p := range ps {
		if p.first == connector {
			n++
		}
	}
	return 100 * float64(n) / float64(len(ps))
}

// majorityAfter is how many payments of ps pass before connector holds the
// majority of a window of w payments (the window's end), or len(ps) + 1
// when it never does.
func majorityAfter(ps []simPayment, connector string, w int) int {
	for end := w; end <= len(ps); end++ {
		if share(ps[end-w:end], connector) > 50 {
			return end
		}
	}
	return len(ps) + 1
}
