package orchestrator_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// BenchmarkFailover measures what a failover after error_before_execute
// adds to an authorization's latency (the aim: no more than one
// extra provider round trip). One client, one request at a time, on the
// durable cluster (fsync, synchronous_commit on), three variants
// interleaved request by request so a busy machine slows them alike:
//
//   - direct: routed to fake_b alone, which approves;
//   - failover: routed fake_a then fake_b; fake_a refuses every call
//     before executing it (503), so each payment makes two attempts;
//   - refused_call: one bare call to fake_a that it refuses: the provider
//     round trip the failover adds, by itself.
//
// It reports each variant's median and p95 latency in microseconds, and
// extra_us: failover's median minus direct's, to compare with
// refused_call's median.
func BenchmarkFailover(b *testing.B) {
	ctx := context.Background()
	clk := time.Now
	names := []string{"fake_a", "fake_b"}
	provs := map[string]providers.Provider{}
	clients := map[string]*fake.Client{}
	for _, n := range names {
		fr, err := fake.Start("127.0.0.1:0", fake.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
		tr := http.DefaultTransport.(*http.Transport).Clone()
		b.Cleanup(tr.CloseIdleConnections)
		clients[n] = fr.Client(&http.Client{Transport: tr})
		provs[n] = clients[n]
	}
	if err := clients["fake_a"].InjectFault(ctx, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute}); err != nil {
		b.Fatal(err)
	}
	svc := orchestrator.NewService(orchestrator.Config{Pool: pgtest.Pool(b, pgtest.DurableURL(b)), Clock: clk,
		Providers: provs, DefaultProvider: "fake_b",
		// The breaker would soon skip fake_a, which fails every call:
		// this measures the failover itself.
		Breaker: orchestrator.BreakerConfig{MinCalls: 1 << 30}})
	route := func(name string, connectors ...string) int64 {
		tenant, _, _, err := svc.CreateTenant(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		choice := orchestrator.ConnectorChoice{Strategy: "priority"}
		for _, c := range connectors {
			choice.Connectors = append(choice.Connectors, orchestrator.WeightedConnector{Name: c})
		}
		if _, err := svc.SetRouting(ctx, tenant.ID, orchestrator.RoutingRules{Default: choice}, "bench"); err != nil {
			b.Fatal(err)
		}
		return tenant.ID
	}
	direct, failover := route("direct", "fake_b"), route("failover", "fake_a", "fake_b")
	fp, err := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(benchBody))
	if err != nil {
		b.Fatal(err)
	}
	authorize := func(tenant int64, key string, attempts int) time.Duration {
		start := time.Now()
		bg, err := svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{TenantID: tenant, Operation: orchestrator.OpAuthorize, Key: key, Fingerprint: fp})
		if err != nil || bg.Claim == nil {
			b.Fatalf("claim: %+v %v", bg, err)
		}
		out, err := svc.Authorize(ctx, bg.Claim, orchestrator.AuthorizeInput{TenantID: tenant, Key: key, Fingerprint: fp, AmountMinor: 1000, Currency: "EUR"})
		if err != nil || out.Payment.Status != orchestrator.StatusAuthorized || out.Payment.Attempt != attempts || bg.Claim.Completed() == nil {
			b.Fatalf("authorize %s: %+v %v", key, out.Payment, err)
		}
		return time.Since(start)
	}
	refused := func(key string) time.Duration {
		start := time.Now()
		_, err := clients["fake_a"].Authorize(ctx, providers.AuthorizeRequest{Key: key, PaymentID: "pay_" + key, TenantID: 1,
			AmountMinor: 1000, Currency: "EUR", PaymentMethod: "pm_card_visa"})
		if providers.KindOf(err) != providers.KindNotExecuted {
			b.Fatalf("fake_a answered %v, want a refusal", err)
		}
		return time.Since(start)
	}
	var d, f, r []time.Duration
	b.ResetTimer()
	for i := range b.N {
		d = append(d, authorize(direct, fmt.Sprintf("d-%d", i), 1))
		f = append(f, authorize(failover, fmt.Sprintf("f-%d", i), 2))
		r = append(r, refused(fmt.Sprintf("r-%d", i)))
	}
	b.StopTimer()
	pct := func(xs []time.Duration, p float64) float64 {
		slices.Sort(xs)
		return float64(xs[int(p*float64(len(xs)-1))].Microseconds())
	}
	b.ReportMetric(pct(d, 0.5), "direct_p50_us")
	b.ReportMetric(pct(d, 0.95), "direct_p95_us")
	b.ReportMetric(pct(f, 0.5), "failover_p50_us")
	b.ReportMetric(pct(f, 0.95), "failover_p95_us")
	b.ReportMetric(pct(r, 0.5), "refused_call_p50_us")
	b.ReportMetric(pct(f, 0.5)-pct(d, 0.5), "extra_us")
}
