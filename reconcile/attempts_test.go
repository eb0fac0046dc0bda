package reconcile_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// TestEarlierAttempts: reconciling a connector that a payment failed over
// from. Its objects there for the earlier attempt (a hold created but
// never confirmed, a soft decline) are expected, not missing_locally; a
// hold of an earlier attempt that holds money is duplicate_at_provider.
func TestEarlierAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testkit.NewClock(dayStart.Add(10 * time.Hour))
	fakes := map[string]*fake.Client{}
	provs := map[string]providers.Provider{}
	for _, name := range []string{"fake_a", "fake_b"} {
		fr, err := fake.Start("127.0.0.1:0", fake.Config{Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
		fakes[name] = fr.Client(&http.Client{})
		provs[name] = fakes[name]
	}
	pool := pgtest.DB(t)
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Clock: clk.Now, Providers: provs, DefaultProvider: "fake_a"})
	tenant, _, _, err := svc.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	rules := orchestrator.RoutingRules{Default: orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyPriority,
		Connectors: []orchestrator.WeightedConnector{{Name: "fake_a"}, {Name: "fake_b"}}}}
	if _, err := svc.SetRouting(ctx, tenant.ID, rules, "test"); err != nil {
		t.Fatal(err)
	}
	pay := func(key, method string) orchestrator.Payment {
		t.Helper()
		body := `{"amount_minor":700,"currency":"EUR","payment_method":"` + method + `"}`
		fp, _ := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(body))
		out, err := svc.Authorize(ctx, nil, orchestrator.AuthorizeInput{TenantID: tenant.ID, Key: key, Fingerprint: fp,
			AmountMinor: 700, Currency: "EUR", PaymentMethod: method})
		if err != nil && orchestrator.ErrorCode(err) != orchestrator.CodePaymentDeclined {
			t.Fatal(err)
		}
		if out.Payment.Attempt != 2 {
			t.Fatalf("%s did not fail over: %+v", key, out.Payment)
		}
		return out.Payment
	}
	// fake_a creates the hold of k1 and refuses to confirm it: k1 fails
	// over, leaving an unconfirmed object at fake_a.
	if err := fakes["fake_a"].InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute, Count: 1,
		IdempotencyKey: orchestrator.AttemptKey(tenant.ID, "k1", 1)}); err != nil {
		t.Fatal(err)
	}
	p1 := pay("k1", "pm_card_visa")
	// k2 is soft-declined at fake_a, then at fake_b.
	pay("k2", "pm_card_tryAgainLater")

	rec := reconcile.New(reconcile.Config{Pool: pool, Providers: provs, Clock: func() time.Time { return runTime }})
	findings := func() []reconcile.Discrepancy {
		t.Helper()
		run, err := rec.Reconcile(ctx, "fake_a", day, "api", "test")
		if err != nil || run.Status != "succeeded" {
			t.Fatalf("run: %+v %v", run, err)
		}
		ds, _, err := rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: run.ID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	if ds := findings(); len(ds) != 0 {
		t.Fatalf("earlier attempts' objects flagged: %+v", ds)
	}

	// Now something confirms k1's first attempt at fake_a: money held on
	// an attempt the payment left, while fake_b holds it too.
	if _, err := fakes["fake_a"].Authorize(ctx, providers.AuthorizeRequest{Key: orchestrator.AttemptKey(tenant.ID, "k1", 1),
		PaymentID: p1.ID, TenantID: tenant.ID, AmountMinor: 700, Currency: "EUR", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}
	ds := findings()
	if len(ds) != 1 || ds[0].Category != reconcile.DuplicateAtProvider || ds[0].PaymentID == nil || *ds[0].PaymentID != p1.ID ||
		ds[0].Field != "attempt" || ds[0].Detail["held_by"] != "fake_b" {
		t.Fatalf("findings: %+v", ds)
	}
}
