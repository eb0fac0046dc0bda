package orchestrator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgcluster"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// crashAfterReference is a provider that, when armed, crashes PostgreSQL
// (an immediate restart) as soon as a new hold is confirmed, its reference
// saved just before, and loses the provider's answer with it: the call
// ends with an unknown outcome, as when the service cannot tell what the
// provider did.
type crashAfterReference struct {
	providers.Provider
	t       *testing.T
	cluster *pgcluster.Cluster
	armed   atomic.Bool
}

func (p *crashAfterReference) Authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Hold, error) {
	hold, err := p.Provider.Authorize(ctx, req)
	if err != nil || !p.armed.Swap(false) {
		return hold, err
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.cluster.Restart(rctx, true); err != nil {
		p.t.Errorf("restart PostgreSQL: %v", err)
	}
	return providers.Hold{}, &providers.Error{Kind: providers.KindUnknown, Code: providers.CodeProviderTimeout,
		Message: "the answer was lost when PostgreSQL crashed"}
}

// TestLostReferenceWrite: the provider's reference is saved without
// waiting for its WAL flush (saveReferenceSQL), so a crash of PostgreSQL
// right after can lose it. Here the provider has held the money and its
// answer is lost too: the payment is pending without a reference, and the
// retry under the same key authorizes again with the same forwarded key,
// which the provider deduplicates: one hold, and the payment authorized
// with its reference.
//
// The loss is real: PostgreSQL is restarted in immediate mode (its WAL
// buffers are lost, what was written to the operating system is not),
// with the WAL writer set to wake only every 10 s, and woken just before
// by an authorization (whose own reference is written asynchronously too),
// so nothing writes the reference's commit out before the crash. Each try
// checks the reference is gone; without the asynchronous commit it never
// is, and the test fails.
func TestLostReferenceWrite(t *testing.T) {
	cluster := pgtest.NewCluster(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER SYSTEM SET wal_writer_delay = '10s'`,
		`ALTER SYSTEM SET autovacuum = off`, // no other commit flushes the WAL meanwhile
		`SELECT pg_reload_conf()`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	admin.Close(ctx)
	crash := &crashAfterReference{t: t, cluster: cluster}
	w := newConnectorWorld(t, 0, func(cfg *orchestrator.Config) {
		cfg.Pool = pgtest.Pool(t, cluster.ConnString("postgres"))
		crash.Provider = cfg.Providers["fake"]
		cfg.Providers["fake"] = crash
	}, "fake")
	e := w.newTenant(t)
	body := `{"amount_minor":2500,"currency":"EUR"}`
	fp := fingerprint(t, orchestrator.OpAuthorize, nil, body)

	lost := 0
	for try := range 3 {
		// Wake the WAL writer: it writes this authorization's reference
		// out, then sleeps its 10 s.
		e.authorized(t, fmt.Sprintf("warm-%d", try), 1000)

		key := fmt.Sprintf("lost-%d", try)
		id := orchestrator.PaymentID(e.tenant, key)
		crash.armed.Store(true)
		b, err := e.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{
			TenantID: e.tenant, Operation: orchestrator.OpAuthorize, Key: key, Fingerprint: fp})
		if err != nil || b.Claim == nil {
			t.Fatalf("claim %s: %+v %v", key, b, err)
		}
		// The hold is confirmed, then PostgreSQL crashes and the answer is
		// lost: the payment stays pending.
		out, err := e.svc.Authorize(ctx, b.Claim, orchestrator.AuthorizeInput{
			TenantID: e.tenant, Key: key, Fingerprint: fp, AmountMinor: 2500, Currency: "EUR"})
		if err != nil || !out.Pending {
			t.Fatalf("try %d: authorize with its answer lost: %+v %v, want pending", try, out.Payment, err)
		}
		if crash.armed.Load() {
			t.Fatalf("try %d: the provider was never asked for a hold", try)
		}

		var status string
		var ref *string
		if err := w.svc.Pool().QueryRow(ctx, `SELECT status, provider_ref FROM payments WHERE tenant_id = $1 AND id = $2`,
			e.tenant, id).Scan(&status, &ref); err != nil {
			t.Fatal(err)
		}
		if status != string(orchestrator.StatusPending) {
			t.Fatalf("try %d: payment %s is %s after the crash, want pending", try, id, status)
		}
		if ref == nil {
			lost++
		}
		t.Logf("try %d: reference lost in the crash: %v", try, ref == nil)

		// The client retries once the crashed execution's lease expired.
		w.clk.Add(time.Minute)
		p := e.authorized(t, key, 2500)
		e.wantOneHold(t, p, providers.StatusAuthorized)
	}
	if lost == 0 {
		t.Fatal("the crash never lost the reference: its commit waited for its WAL flush")
	}
}

// TestAuthorizeFlushWaits: one client at a time on the durable cluster, a
// new authorization commits four writing transactions (claim, create,
// reference, settle) but waits for two WAL flushes, the two the principle
// asks for (intent before money moves, result before the answer): the
// claim's commit is asynchronous (claimOrReadSQL) and the creation's
// flush covers it; the reference's is too (saveReferenceSQL) and the
// settlement's flush covers it. With one client no commit shares another's flush, so WAL
// fsyncs per authorization count the flush waits.
func TestAuthorizeFlushWaits(t *testing.T) {
	w := newBenchWorld(t, pgtest.DurableURL(t))
	run := func(prefix string, n int) {
		svc, done := w.service(t)
		for i := range n {
			if err := w.authorize(svc, fmt.Sprintf("%s-%d", prefix, i), true); err != nil {
				t.Fatal(err)
			}
		}
		done() // its backends exit, so their statistics are in
	}
	run("warm", 3)
	const n = 60
	xid0, sync0 := w.counters(t)
	run("flush", n)
	xid1, sync1 := w.counters(t)
	writes, syncs := float64(xid1-xid0)/n, float64(sync1-sync0)/n
	t.Logf("per authorization: %.2f writing transactions, %.2f WAL fsyncs", writes, syncs)
	if writes < 3.9 || writes > 4.1 {
		t.Errorf("%.2f writing transactions per authorization, want 4", writes)
	}
	if syncs > 2.4 {
		t.Errorf("%.2f WAL fsyncs per authorization, want 2 (the claim's and the reference's commits wait for none)", syncs)
	}
}

// TestAnswerSurvivesImmediateRestart: an answer the client saw (an
// authorization's 201, a capture's 200) was stored with a commit that
// waited for its WAL flush, so an immediate restart of PostgreSQL right
// after it was sent keeps it: the replay under the same key is
// byte-identical, the payment is in the state it said, and the provider
// holds one hold. The WAL writer sleeps 10 s, as in TestLostReferenceWrite,
// so only a flush the commit itself waited for saves what it wrote.
func TestAnswerSurvivesImmediateRestart(t *testing.T) {
	cluster, pool := slowWALCluster(t)
	ctx := context.Background()
	w := newConnectorWorld(t, 0, func(cfg *orchestrator.Config) { cfg.Pool = pool }, "fake")
	e := w.newTenant(t)
	body := `{"amount_minor":1800,"currency":"EUR"}`
	same := func(what string, first *orchestrator.StoredResponse, replay *orchestrator.StoredResponse) {
		t.Helper()
		if first == nil || replay == nil || first.Status != replay.Status || string(first.Body) != string(replay.Body) {
			t.Fatalf("%s: first answer %+v, replay after the restart %+v", what, first, replay)
		}
	}
	for try := range 2 {
		key := fmt.Sprintf("survive-%d", try)
		a := e.authorize(t, key, body)
		if a.err != nil || a.stored == nil || a.out.Payment.Status != orchestrator.StatusAuthorized {
			t.Fatalf("authorize: %+v %v", a.out.Payment, a.err)
		}
		c := e.capture(t, a.out.Payment.ID, key+"-cap", `{}`)
		if c.err != nil || c.stored == nil {
			t.Fatalf("capture: %+v %v", c.out.Payment, c.err)
		}
		crash(t, cluster, pool)

		same("authorize", a.stored, e.authorize(t, key, body).replay)
		same("capture", c.stored, e.capture(t, a.out.Payment.ID, key+"-cap", `{}`).replay)
		p, err := e.svc.GetPayment(ctx, orchestrator.Scope{TenantID: e.tenant}, a.out.Payment.ID)
		if err != nil || p.Status != orchestrator.StatusCaptured {
			t.Fatalf("payment after the restart: %+v %v", p, err)
		}
		e.wantOneHold(t, p, providers.StatusCaptured)
	}
}

// TestLostClaim: an authorization's claim commits without waiting for its
// WAL flush (claimOrReadSQL), so a crash of PostgreSQL right after can
// lose it. The request then finds its claim gone at its next statement
// and stops: no payment created, no provider call, a 503 that is not
// stored; the retry claims the key anew and makes the one hold. The loss
// is real (immediate restart, WAL writer asleep for 10 s); each try checks
// the claim is gone, and without the asynchronous claim it never is.
func TestLostClaim(t *testing.T) {
	cluster, pool := slowWALCluster(t)
	ctx := context.Background()
	w := newConnectorWorld(t, 0, func(cfg *orchestrator.Config) { cfg.Pool = pool }, "fake")
	e := w.newTenant(t)
	body := `{"amount_minor":1300,"currency":"EUR"}`
	fp := fingerprint(t, orchestrator.OpAuthorize, nil, body)
	lost := 0
	for try := range 3 {
		e.authorized(t, fmt.Sprintf("claim-warm-%d", try), 1000) // wakes the WAL writer, which then sleeps
		key := fmt.Sprintf("claim-lost-%d", try)
		b, err := e.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{
			TenantID: e.tenant, Operation: orchestrator.OpAuthorize, Key: key, Fingerprint: fp})
		if err != nil || b.Claim == nil {
			t.Fatalf("claim %s: %+v %v", key, b, err)
		}
		crash(t, cluster, pool)
		if n := e.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = $1`, key); n != 0 {
			t.Logf("try %d: the claim survived the crash", try)
			continue
		}
		lost++
		_, err = e.svc.Authorize(ctx, b.Claim, orchestrator.AuthorizeInput{
			TenantID: e.tenant, Key: key, Fingerprint: fp, AmountMinor: 1300, Currency: "EUR"})
		if orchestrator.ErrorCode(err) != orchestrator.CodeUnavailable {
			t.Fatalf("try %d: authorize with a lost claim: %v, want service_unavailable", try, err)
		}
		id := orchestrator.PaymentID(e.tenant, key)
		if n := e.count(t, `SELECT count(*) FROM payments WHERE id = $1`, id); n != 0 {
			t.Fatalf("try %d: a payment was created without its claim", try)
		}
		ops, err := e.fake.Operations(ctx, orchestrator.AttemptKey(e.tenant, key, 1))
		if err != nil || len(ops) != 0 {
			t.Fatalf("try %d: the provider was called without a claim: %+v %v", try, ops, err)
		}
		p := e.authorized(t, key, 1300) // the client's retry
		e.wantOneHold(t, p, providers.StatusAuthorized)
	}
	if lost == 0 {
		t.Fatal("the crash never lost a claim: its commit waited for its WAL flush")
	}
}

// slowWALCluster is a cluster of t's own whose WAL writer wakes only every
// 10 s (and no autovacuum commits meanwhile), so a commit that did not
// wait for its flush is lost by an immediate restart; and a pool on it.
func slowWALCluster(t *testing.T) (*pgcluster.Cluster, *pgxpool.Pool) {
	t.Helper()
	cluster := pgtest.NewCluster(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, q := range []string{`ALTER SYSTEM SET wal_writer_delay = '10s'`, `ALTER SYSTEM SET autovacuum = off`,
		`SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return cluster, pgtest.Pool(t, cluster.ConnString("postgres"))
}

// crash restarts cluster in immediate mode and drops pool's connections,
// which died with it.
func crash(t *testing.T, cluster *pgcluster.Cluster, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
}

// TestLostCaptureClaim: a capture's claim commits without waiting for its
// flush too (asyncClaim); lost in a crash, the capture stops before it
// records an operation or calls the provider, and the retry captures once.
func TestLostCaptureClaim(t *testing.T) {
	cluster, pool := slowWALCluster(t)
	ctx := context.Background()
	w := newConnectorWorld(t, 0, func(cfg *orchestrator.Config) { cfg.Pool = pool }, "fake")
	e := w.newTenant(t)
	lost := 0
	for try := range 3 {
		p := e.authorized(t, fmt.Sprintf("cap-claim-%d", try), 900) // also wakes the WAL writer, which then sleeps
		key := p.IdempotencyKey + "-capture"
		fp := fingerprint(t, orchestrator.OpCapture, map[string]string{"id": p.ID}, `{}`)
		b, err := e.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{
			TenantID: e.tenant, Operation: orchestrator.OpCapture, Key: key, Fingerprint: fp})
		if err != nil || b.Claim == nil {
			t.Fatalf("claim %s: %+v %v", key, b, err)
		}
		crash(t, cluster, pool)
		if n := e.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = $1`, key); n != 0 {
			t.Logf("try %d: the claim survived the crash", try)
			continue
		}
		lost++
		_, err = e.svc.Capture(ctx, b.Claim, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: p.ID, Key: key})
		if orchestrator.ErrorCode(err) != orchestrator.CodeUnavailable {
			t.Fatalf("try %d: capture with a lost claim: %v, want service_unavailable", try, err)
		}
		if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1`, p.ID); n != 0 {
			t.Fatalf("try %d: an operation was recorded without its claim", try)
		}
		ops, err := e.fake.Operations(ctx, providers.ForwardedKey(e.tenant, orchestrator.OpCapture, key))
		if err != nil || len(ops) != 0 {
			t.Fatalf("try %d: the provider was called without a claim: %+v %v", try, ops, err)
		}
		if a := e.capture(t, p.ID, key, `{}`); a.err != nil || a.out.Payment.Status != orchestrator.StatusCaptured {
			t.Fatalf("try %d: the retry: %+v %v", try, a.out.Payment, a.err)
		}
		e.wantOneHold(t, p, providers.StatusCaptured)
	}
	if lost == 0 {
		t.Fatal("the crash never lost a claim: its commit waited for its WAL flush")
	}
}
