package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// TestServeBehindPgbouncer runs two `payorch serve` processes whose
// DATABASE_URL is a real PgBouncer in transaction pool mode
// (PAYORCH_DATABASE_POOLER=transaction), with DATABASE_DIRECT_URL naming
// the server itself for migrations and the key cache's LISTEN: the
// payments API works across both (authorize, replay byte-identical on the
// other instance, decline, capture, refund, cancel, list, a duplicate
// storm that makes one provider hold), and a revoked key is refused at once by
// an instance whose cache holds it: the cache heard it over the direct
// connection.
func TestServeBehindPgbouncer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	env := w.env(map[string]string{
		"DATABASE_URL":            pgtest.ThroughPooler(t, w.dbURL),
		"DATABASE_DIRECT_URL":     w.dbURL,
		"PAYORCH_DATABASE_POOLER": "transaction",
		"PAYORCH_LOG_LEVEL":       "debug",
	})
	a, b := startServe(t, env), startServe(t, env)
	for _, s := range []*server{a, b} {
		testkit.WaitFor(t, 10*time.Second, s.base+"'s key cache listening", func() (bool, error) {
			logs := s.logs.String()
			return strings.Contains(logs, "api key cache listener started; cache on"), errors.New(tail(logs, 3000))
		})
	}

	t.Run("AuthorizeReplayDeclineCaptureRefundCancelList", func(t *testing.T) {
		body := `{"amount_minor":5000,"currency":"EUR"}`
		first := authorize(a.base, w.key, "pool-1", body)
		replay := authorize(b.base, w.key, "pool-1", body)
		if first.status != 201 || replay.status != 201 || !replay.replayed || !bytes.Equal(first.body, replay.body) {
			t.Fatalf("authorize %d %s; replay on the other instance %d replayed=%v %s", first.status, first.body, replay.status, replay.replayed, replay.body)
		}
		declined := `{"amount_minor":5000,"currency":"EUR","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`
		d1, d2 := authorize(b.base, w.key, "pool-decline", declined), authorize(a.base, w.key, "pool-decline", declined)
		if d1.status != 402 || d2.status != 402 || !d2.replayed || !bytes.Equal(d1.body, d2.body) {
			t.Fatalf("decline %d %s; replay %d %s", d1.status, d1.body, d2.status, d2.body)
		}
		var p struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		_ = json.Unmarshal(first.body, &p)
		steps := []struct {
			srv               *server
			method, path, key string
			body              string
			wantStatus        int
			wantPaymentStatus string
		}{
			{b, "POST", "/v1/payments/" + p.ID + "/capture", "pool-cap", `{"amount_minor":5000}`, 200, "captured"},
			{a, "POST", "/v1/payments/" + p.ID + "/refunds", "pool-ref", `{"amount_minor":2000}`, 201, ""},
			{b, "GET", "/v1/payments/" + p.ID, "", "", 200, "partially_refunded"},
		}
		for _, s := range steps {
			status, got := call(t, s.method, s.srv.base+s.path, w.key, s.key, s.body)
			if status != s.wantStatus || (s.wantPaymentStatus != "" && !strings.Contains(string(got), `"status":"`+s.wantPaymentStatus+`"`)) {
				t.Fatalf("%s %s: %d %s", s.method, s.path, status, got)
			}
			if s.key != "" {
				again, gotAgain := call(t, s.method, s.srv.base+s.path, w.key, s.key, s.body)
				if again != status || !bytes.Equal(got, gotAgain) {
					t.Fatalf("%s %s replayed: %d %s, first %s", s.method, s.path, again, gotAgain, got)
				}
			}
		}
		second := authorize(b.base, w.key, "pool-2", body)
		_ = json.Unmarshal(second.body, &p)
		if status, got := call(t, "POST", a.base+"/v1/payments/"+p.ID+"/cancel", w.key, "pool-cancel", ""); status != 200 ||
			!strings.Contains(string(got), `"status":"canceled"`) {
			t.Fatalf("cancel: %d %s", status, got)
		}
		status, got := call(t, "GET", b.base+"/v1/payments?limit=10", w.key, "", "")
		var list struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(got, &list); status != 200 || err != nil || len(list.Data) != 3 {
			t.Fatalf("list: %d %s", status, got)
		}
	})

	t.Run("DuplicateStormMakesOneHold", func(t *testing.T) {
		const key = "pool-storm"
		body := `{"amount_minor":4200,"currency":"GBP"}`
		if err := w.fc.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency, LatencyMS: 300,
			IdempotencyKey: providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, key)}); err != nil {
			t.Fatal(err)
		}
		answers := make([]answer, 60)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = authorize([]*server{a, b}[i%2].base, w.key, key, body) })
		}
		wg.Wait()
		final := authorize(a.base, w.key, key, body)
		created := 0
		for _, x := range answers {
			switch {
			case x.err != nil:
				t.Fatal(x.err)
			case x.status == 201 && bytes.Equal(x.body, final.body):
				created++
			case x.status == 409 && strings.Contains(string(x.body), "idempotency_key_in_use"):
			default:
				t.Fatalf("unexpected answer %d %s (final %s)", x.status, x.body, final.body)
			}
		}
		if created == 0 || final.status != 201 || !final.replayed {
			t.Fatalf("created %d, final %d replayed=%v", created, final.status, final.replayed)
		}
		if ops := w.providerAuthorizations(t, key); len(ops) != 1 {
			t.Fatalf("%d provider authorizations, want 1", len(ops))
		}
	})

	t.Run("RevocationReachesTheOtherInstanceOverTheDirectListener", func(t *testing.T) {
		ctx := context.Background()
		svc := orchestrator.NewService(orchestrator.Config{Pool: w.pool})
		k, secret, err := svc.CreateAPIKey(ctx, orchestrator.RoleMerchant, w.tenant, "pool")
		if err != nil {
			t.Fatal(err)
		}
		// b verifies the key once and caches it.
		for i := range 2 {
			if status, got := call(t, "GET", b.base+"/v1/me", secret, "", ""); status != 200 {
				t.Fatalf("me #%d: %d %s", i, status, got)
			}
		}
		if _, err := svc.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 2*time.Second, "b to refuse the key revoked on a", func() (bool, error) {
			status, _ := call(t, "GET", b.base+"/v1/me", secret, "", "")
			return status == 401, fmt.Errorf("b still answers %d", status)
		})
		if strings.Contains(b.logs.String(), "api key cache off") {
			t.Fatalf("b's key cache listener failed:\n%s", tail(b.logs.String(), 3000))
		}
	})
}

// TestPoolerMigratesOverTheDirectURL: behind a transaction pooler,
// migrations (whose advisory lock is a session's) refuse to run over
// DATABASE_URL and run over DATABASE_DIRECT_URL; the setting is
// validated.
func TestPoolerMigratesOverTheDirectURL(t *testing.T) {
	t.Parallel()
	direct := pgtest.EmptyURL(t)
	env := map[string]string{"DATABASE_URL": pgtest.ThroughPooler(t, direct), "PAYORCH_DATABASE_POOLER": "transaction",
		"PAYORCH_LOG_LEVEL": "error"}
	if out, err := cli(t, env, "migrate"); err == nil || !strings.Contains(err.Error(), "DATABASE_DIRECT_URL") {
		t.Fatalf("migrate through the pooler without a direct URL: %q %v", out, err)
	}
	env["DATABASE_DIRECT_URL"] = direct
	if out, err := cli(t, env, "migrate"); err != nil || strings.HasPrefix(out, "applied 0 ") {
		t.Fatalf("migrate over the direct URL: %q %v", out, err)
	}
	for v, ok := range map[string]bool{"": true, "none": true, "transaction": true, "session": false, "pgbouncer": false} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_DATABASE_POOLER": v}))
		if (err == nil) != ok || (ok && v != "" && cfg.DatabasePooler != v) {
			t.Errorf("PAYORCH_DATABASE_POOLER=%q: %q %v", v, cfg.DatabasePooler, err)
		}
	}
}
