package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// TestFailoverStormOverThreeServeProcesses: concurrent duplicates of a few
// authorizations over three serve processes, routed fake_a then fake_b,
// while fake_a refuses half its calls before executing them. Whatever
// the interleaving (failovers, in_use, retries): exactly one hold per
// payment across both fakes, and every answer of a key is the same bytes
// or 409 idempotency_key_in_use.
func TestFailoverStormOverThreeServeProcesses(t *testing.T) {
	t.Parallel()
	failoverStorm(t, 6, 40, nil)
}

// TestFailoverStormWithAVaultedCard is the storm with a card of payorch's
// vault: whichever fake runs an attempt charges the same card, and there
// is still one hold per payment.
func TestFailoverStormWithAVaultedCard(t *testing.T) {
	t.Parallel()
	failoverStorm(t, 4, 20, map[string]string{"PAYORCH_VAULT_KEYS": testVaultKeys, "PAYORCH_VAULT_FINGERPRINT_KEY": testVaultFingerprintKey})
}

// Vault keys of the tests (never of a real deployment): 32 bytes each.
const (
	testVaultKeys           = "1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	testVaultFingerprintKey = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="
)

// createCard tokenizes a card through base's API with apiKey and returns
// the method's id.
func createCard(t *testing.T, base, apiKey, number string) string {
	t.Helper()
	body := `{"type":"card","card":{"number":"` + number + `","exp_month":12,"exp_year":2034,"cvc":"123"}}`
	status, b := call(t, "POST", base+"/v1/payment_methods", apiKey, "card-"+number, body)
	if status != 201 {
		t.Fatalf("create payment method: %d %s", status, b)
	}
	var pm struct{ ID string }
	if err := json.Unmarshal(b, &pm); err != nil || !orchestrator.IsVaulted(pm.ID) {
		t.Fatalf("create payment method: %s (%v)", b, err)
	}
	return pm.ID
}

// failoverStorm runs keys authorizations, perKey concurrent duplicates
// each, over three serve processes routed fake_a then fake_b; a non-nil
// vault configures payorch's vault and pays with a vaulted card.
func failoverStorm(t *testing.T, keys, perKey int, vault map[string]string) {
	w := newWorld(t, pgtest.URL(t))
	fb, err := fake.Start("127.0.0.1:0", fake.Config{TimeoutHang: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fb.Shutdown(context.Background()) })
	fbc := fb.Client(&http.Client{})
	fakes := map[string]*fake.Client{"fake_a": w.fc, "fake_b": fbc}

	ctx := context.Background()
	svc := orchestrator.NewService(orchestrator.Config{Pool: w.pool,
		Providers: map[string]providers.Provider{"fake_a": w.fc, "fake_b": fbc}, DefaultProvider: "fake_a"})
	rules := orchestrator.RoutingRules{Default: orchestrator.ConnectorChoice{Strategy: "priority",
		Connectors: []orchestrator.WeightedConnector{{Name: "fake_a"}, {Name: "fake_b"}}}}
	if _, err := svc.SetRouting(ctx, w.tenant, rules, "test"); err != nil {
		t.Fatal(err)
	}
	// fake_a refuses half its calls before executing them, and every call
	// of fo-0's first attempt, so that at least one payment fails over
	// whatever the dice say.
	for _, f := range []fake.Fault{
		{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute, Probability: 0.5},
		{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute, IdempotencyKey: orchestrator.AttemptKey(w.tenant, "fo-0", 1)},
	} {
		if err := w.fc.InjectFault(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	env := w.env(map[string]string{
		"PAYORCH_CONNECTORS":             "fake_a=fake,fake_b=fake",
		"PAYORCH_CONNECTOR_FAKE_A_URL":   w.fake.URL(),
		"PAYORCH_CONNECTOR_FAKE_A_TOKEN": w.fake.Token(),
		"PAYORCH_CONNECTOR_FAKE_B_URL":   fb.URL(),
		"PAYORCH_CONNECTOR_FAKE_B_TOKEN": fb.Token(),
		"PAYORCH_DEFAULT_PROVIDER":       "fake_a",
		"PAYORCH_BREAKER_MIN_CALLS":      "1000", // keep fake_a in the route: this test is about failover
	})
	maps.Copy(env, vault)
	servers := []*server{startServe(t, env), startServe(t, env), startServe(t, env)}

	body := `{"amount_minor":4200,"currency":"GBP"}`
	if vault != nil {
		body = `{"amount_minor":4200,"currency":"GBP","payment_method":"` + createCard(t, servers[0].base, w.key, "4242424242424242") + `"}`
	}
	answers := make([][]answer, keys)
	var wg sync.WaitGroup
	for k := range keys {
		answers[k] = make([]answer, perKey)
		for i := range perKey {
			wg.Go(func() {
				answers[k][i] = authorize(servers[(k+i)%3].base, w.key, fmt.Sprintf("fo-%d", k), body)
			})
		}
	}
	wg.Wait()

	failedOver := 0
	for k := range keys {
		key := fmt.Sprintf("fo-%d", k)
		// Retry until the key holds its answer (a request may have ended
		// 503 while fake_a refused and another was in flight).
		var final answer
		for range 10 {
			if final = authorize(servers[0].base, w.key, key, body); final.status == 201 {
				break
			}
		}
		if final.status != 201 {
			// The payment's attempts, for the failure's reader.
			rows, _ := w.pool.Query(ctx, `SELECT a.attempt || ' ' || a.connector || ' ' || a.dispatched || '/' || a.not_executed || ' ' || coalesce(a.outcome, '-') || ' route ' || array_to_string(p.route, ',') || ' rv ' || coalesce(p.routing_version::text, 'none')
				FROM payment_attempts a JOIN payments p ON p.id = a.payment_id WHERE p.idempotency_key = $1`, key)
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				t.Log(s)
			}
			rows.Close()
			t.Fatalf("%s: final retry %d %s", key, final.status, final.body)
		}
		for _, a := range answers[k] {
			switch {
			case a.err != nil:
				t.Fatalf("%s: request failed: %v", key, a.err)
			case a.status == 201:
				if !bytes.Equal(a.body, final.body) {
					t.Fatalf("%s: 201 bodies differ:\n%s\n%s", key, a.body, final.body)
				}
			case a.status == 409 && strings.Contains(string(a.body), "idempotency_key_in_use"):
			case a.status == 503 && strings.Contains(string(a.body), "provider_unavailable"):
			default:
				t.Fatalf("%s: unexpected answer %d %s", key, a.status, a.body)
			}
		}
		holds := 0
		for name, fc := range fakes {
			for n := 1; n <= 2; n++ {
				ops, err := fc.Operations(ctx, orchestrator.AttemptKey(w.tenant, key, n))
				if err != nil {
					t.Fatal(err)
				}
				for _, op := range ops {
					if op.Operation == fake.OpAuthorize && op.Outcome == fake.OutcomeSucceeded {
						holds++
						if name == "fake_b" {
							failedOver++
						}
					}
				}
			}
		}
		if holds != 1 {
			t.Fatalf("%s: %d holds across fake_a and fake_b, want 1", key, holds)
		}
	}
	if n := w.count(t, `SELECT count(*) FROM payments`); n != keys {
		t.Fatalf("%d payment rows, want %d", n, keys)
	}
	t.Logf("%d of %d payments failed over to fake_b", failedOver, keys)
	if failedOver == 0 {
		t.Fatal("no payment failed over: the storm did not exercise failover")
	}
}
