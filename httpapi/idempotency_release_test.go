package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// busyPool opens a pool on dbURL that hands its idle connections out
// without pinging them first, as pgxpool does with connections used less
// than a second ago: the pool of a server under load.
func busyPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 8
	pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// fillPool leaves n idle connections in pool.
func fillPool(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
}

// terminateBackends terminates every other backend connected to dbURL's
// database (SQLSTATE 57P01 for their clients) and returns how many.
func terminateBackends(t *testing.T, dbURL string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKilledBackendsDoNotLockTheKey: PostgreSQL terminates the backends
// serving payorch while an authorization waits on the provider. The
// request fails (500), and its key must be released on a live connection,
// not on one of the dead ones the pool still holds: else every retry is
// 409 idempotency_key_in_use for a whole lease (60 s here). The retry
// resumes at once and the provider holds the money once.
func TestKilledBackendsDoNotLockTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	pool := busyPool(t, dbURL)
	e := newEnv(t, httpapi.Config{}, dbURL, orchestrator.Config{Pool: pool, Lease: time.Minute})
	tenant, _, merchant, err := e.svc.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	const key = "killed-backends"
	body := `{"amount_minor":1500,"currency":"EUR"}`
	// The provider answers the confirmation a while after it arrives: the
	// request is in flight, holding its key and no connection.
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency, LatencyMS: 2000, Count: 1,
		IdempotencyKey: providers.ForwardedKey(tenant.ID, orchestrator.OpAuthorize, key)}); err != nil {
		t.Fatal(err)
	}
	post := func() (int, string) {
		req, _ := http.NewRequest("POST", e.url+"/v1/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+merchant)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var first struct {
		status int
		body   string
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first.status, first.body = post()
	}()
	// The fault fired: the confirmation is at the provider.
	waitFaultsFired(t, e)
	fillPool(t, pool, 6)
	if n := terminateBackends(t, dbURL); n < 6 {
		t.Fatalf("terminated %d backends, want the pool's 6 at least", n)
	}
	wg.Wait()
	if first.status != 500 {
		t.Fatalf("the request whose backends died answered %d %s; want 500 (else this test proves nothing)", first.status, first.body)
	}

	start := time.Now()
	attempts, inUse := 0, 0
	testkit.WaitFor(t, 5*time.Second, "a retry to succeed (the lease is a minute)", func() (bool, error) {
		status, b := post()
		attempts++
		if strings.Contains(b, "idempotency_key_in_use") {
			inUse++
		}
		return status == 201, fmt.Errorf("%d attempts, %d found the key in use; last %d %s", attempts, inUse, status, b)
	})
	t.Logf("retry succeeded after %s and %d attempt(s)", time.Since(start).Round(time.Millisecond), attempts)
	if inUse > 0 {
		t.Errorf("%d retries found the key still locked", inUse)
	}
	if ops := e.providerOps(t, tenant.ID, orchestrator.OpAuthorize, key); len(ops) != 1 {
		t.Fatalf("%d provider authorizations, want 1", len(ops))
	}
}

// TestLeaseLostAnswersOnlyWhatIsStored: an authorization outlives its
// lease (the provider answers after 3 s, the lease is 1 s, as when the
// database stalls through a failover), a retry takes the key over
// meanwhile, and the payment is captured before the key holds an answer.
// Every 2xx answer any of these requests got must be the bytes the key
// replays in the end: a request whose lease was lost answers what the key
// stores, or 409 while it stores nothing, never its own result.
func TestLeaseLostAnswersOnlyWhatIsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	// The lease runs out on the service's clock, moved on by the test
	// while the provider's answer is late.
	clk := testkit.NewClock(time.Now())
	e := newEnv(t, httpapi.Config{}, dbURL, orchestrator.Config{Lease: time.Second, Clock: clk.Now})
	tenant, _, merchant, err := e.svc.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	const key = "lease-lost"
	body := `{"amount_minor":1500,"currency":"EUR"}`
	if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency, LatencyMS: 3000, Count: 1,
		IdempotencyKey: providers.ForwardedKey(tenant.ID, orchestrator.OpAuthorize, key)}); err != nil {
		t.Fatal(err)
	}
	type got struct {
		status int
		body   []byte
	}
	send := func() got {
		res, b := e.post(t, "/v1/payments", merchant, key, body)
		return got{res.StatusCode, b}
	}
	var first got
	var wg sync.WaitGroup
	wg.Go(func() { first = send() })
	waitFaultsFired(t, e)
	clk.Add(1300 * time.Millisecond) // the first request's lease has run out
	answers := []got{send()}         // takes the key over
	if answers[0].status == http.StatusConflict {
		t.Fatalf("the retry found the key in use; want it to take the expired lease over: %s", answers[0].body)
	}
	wg.Wait()
	answers = append(answers, first)
	var id string
	if err := e.pool.QueryRow(ctx, `SELECT id FROM payments WHERE tenant_id = $1 AND idempotency_key = $2`, tenant.ID, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if res, b := e.post(t, "/v1/payments/"+id+"/capture", merchant, "lease-lost-capture", `{}`); res.StatusCode != 200 {
		t.Fatalf("capture: %d %s", res.StatusCode, b)
	}
	var final got
	testkit.WaitFor(t, 10*time.Second, "the key to hold an answer", func() (bool, error) {
		final = send() // a 409 while another request holds the key
		return final.status != http.StatusConflict, fmt.Errorf("last %d %s", final.status, final.body)
	})
	answers = append(answers, final)
	replay := send()
	if replay.status >= 300 {
		t.Fatalf("final replay: %d %s", replay.status, replay.body)
	}
	for i, a := range answers {
		if a.status < 300 && (a.status != replay.status || !bytes.Equal(a.body, replay.body)) {
			t.Errorf("answer %d was %d %s, but the key replays %d %s", i, a.status, a.body, replay.status, replay.body)
		}
	}
	if ops, err := e.fake.Operations(ctx, providers.ForwardedKey(tenant.ID, orchestrator.OpAuthorize, key)); err != nil || len(ops) != 1 {
		t.Fatalf("%d provider authorizations (%v), want 1", len(ops), err)
	}
}

// waitFaultsFired waits until every fault armed at e's fake has fired: the
// request it was armed for is at the provider.
func waitFaultsFired(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	testkit.WaitFor(t, 10*time.Second, "the authorization to reach the provider", func() (bool, error) {
		faults, err := e.fake.Faults(ctx)
		return err == nil && len(faults) == 0, err
	})
}
