package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

func TestAfterKeyPurge(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	m := e.keys[orchestrator.RoleMerchant]
	body := `{"amount_minor":1000,"currency":"EUR","description":"order 7"}`
	res, first := e.post(t, "/v1/payments", m, "purged-1", body)
	if res.StatusCode != 201 {
		t.Fatalf("%d %s", res.StatusCode, first)
	}
	p := decode[payment](t, first)
	// A day and a bit later the sweeper purges the key.
	later := orchestrator.NewService(orchestrator.Config{Pool: e.pool, Clock: func() time.Time { return time.Now().Add(25 * time.Hour) }})
	if n, err := later.PurgeExpiredKeys(context.Background(), 100); err != nil || n != 1 {
		t.Fatalf("purged %d (%v)", n, err)
	}

	t.Run("SameBodyFindsTheExistingPaymentWithoutAProviderCall", func(t *testing.T) {
		res, b := e.post(t, "/v1/payments", m, "purged-1", body)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") == "true" {
			t.Fatalf("%d %s", res.StatusCode, b)
		}
		if got := decode[payment](t, b); got.ID != p.ID || *got.ProviderRef != *p.ProviderRef {
			t.Fatalf("got %+v, want payment %s", got, p.ID)
		}
		if ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, "purged-1"); len(ops) != 1 {
			t.Fatalf("provider executed %d authorizations", len(ops))
		}
	})

	t.Run("OtherBodyIsReusedNamingTheFields", func(t *testing.T) {
		// Purge again (the previous subtest stored a fresh key).
		if _, err := later.PurgeExpiredKeys(context.Background(), 100); err != nil {
			t.Fatal(err)
		}
		res, b := e.post(t, "/v1/payments", m, "purged-1", `{"amount_minor":999,"currency":"EUR","description":"order 7"}`)
		prob := wantProblem(t, res, b, 409, "idempotency_key_reused")
		if strings.Join(prob.Fields, ",") != "amount_minor" {
			t.Fatalf("fields %v", prob.Fields)
		}
		if n := e.count(t, `SELECT count(*) FROM payments`); n != 1 {
			t.Fatalf("%d payments", n)
		}
	})
}

func TestResolverSettlesUnknownOutcomes(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{}, orchestrator.Config{ProviderTimeout: 500 * time.Millisecond})
	m := e.keys[orchestrator.RoleMerchant]
	ctx := context.Background()

	const key = "resolve-1"
	fwd := providers.ForwardedKey(e.tenant, orchestrator.OpAuthorize, key)
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1, IdempotencyKey: fwd}); err != nil {
		t.Fatal(err)
	}
	res, b := e.post(t, "/v1/payments", m, key, `{"amount_minor":1000,"currency":"EUR"}`)
	if res.StatusCode != 202 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	p := decode[payment](t, b)

	st, err := e.svc.ResolvePending(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settled != 1 || st.Pending != 0 || st.Errors != 0 {
		t.Fatalf("resolver pass %+v", st)
	}
	_, b = e.do(t, "GET", "/v1/payments/"+p.ID, m, nil, nil)
	got := decode[payment](t, b)
	ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, key)
	if got.Status != "authorized" || len(ops) != 1 || got.ProviderRef == nil || *got.ProviderRef != ops[0].Ref {
		t.Fatalf("after the resolver: %+v, provider ops %+v", got, ops)
	}
	// Settled by one lookup of the saved reference, not by calling
	// authorize again.
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'provider_call' AND operation = 'authorize'`, p.ID); n != 1 {
		t.Fatalf("%d authorize calls, want only the first", n)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'provider_call' AND operation = 'lookup'`, p.ID); n != 1 {
		t.Fatalf("%d lookups, want 1", n)
	}
	// The client's retry now gets the settled payment; still one hold.
	res, b = e.post(t, "/v1/payments", m, key, `{"amount_minor":1000,"currency":"EUR"}`)
	if res.StatusCode != 201 || decode[payment](t, b).Status != "authorized" {
		t.Fatalf("retry after resolve: %d %s", res.StatusCode, b)
	}
	if ops := e.providerOps(t, e.tenant, orchestrator.OpAuthorize, key); len(ops) != 1 {
		t.Fatalf("%d provider authorizations", len(ops))
	}

	// A capture whose answer is lost is settled the same way.
	ck := "resolve-cap"
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultTimeoutAfterExecute, Count: 1,
		IdempotencyKey: providers.ForwardedKey(e.tenant, orchestrator.OpCapture, ck)}); err != nil {
		t.Fatal(err)
	}
	res, b = e.post(t, "/v1/payments/"+p.ID+"/capture", m, ck, "")
	if res.StatusCode != 202 {
		t.Fatalf("capture with lost answer: %d %s", res.StatusCode, b)
	}
	// Meanwhile a capture under another key is refused: one is in flight.
	res, b = e.post(t, "/v1/payments/"+p.ID+"/capture", m, "resolve-cap-2", "")
	wantProblem(t, res, b, 409, "payment_state_conflict")
	if st, err := e.svc.ResolvePending(ctx, 0, 10); err != nil || st.Settled != 1 {
		t.Fatalf("resolver pass %+v %v", st, err)
	}
	_, b = e.do(t, "GET", "/v1/payments/"+p.ID, m, nil, nil)
	if got := decode[payment](t, b); got.Status != "captured" || got.CapturedMinor != 1000 {
		t.Fatalf("after resolving the capture: %+v", got)
	}
	if ops := e.providerOps(t, e.tenant, orchestrator.OpCapture, ck); len(ops) != 1 {
		t.Fatalf("%d provider captures", len(ops))
	}
	if st, err := e.svc.Pending(ctx); err != nil || st.Payments != 0 || st.Operations != 0 {
		t.Fatalf("still pending: %+v %v", st, err)
	}
}
