package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// benchClients is how many requests BenchmarkAuthorize keeps in flight,
// as BenchmarkServe's load generator does (cmd/payorch/bench_test.go).
const benchClients = 16

// benchChunk is how many requests of one variant BenchmarkAuthorize
// runs before it switches to the other.
const benchChunk = 500

// BenchmarkAuthorize is a new authorization through the Service as
// httpapi runs it (claim the key, authorize at the fake provider over
// loopback HTTP, store the answer), benchClients at a time, on a durable
// cluster (fsync, synchronous_commit and full_page_writes on: each commit
// waits for its WAL flush) and on the throw-away test cluster (all three
// off: CPU and round trips only). It runs two variants, b.N requests each:
//
//   - one_statement: the settling statement stores the answer too;
//   - separate_completion: the settling statement, then CompleteIdempotent
//     (one more statement and commit; see authorize).
//
// The variants alternate in chunks of benchChunk requests (A B B A A B …)
// so that a busy machine slows both alike. Each chunk runs on a new pool,
// warmed up first (not timed), and closed after, so the backends' WAL
// statistics are flushed. For each variant it reports req/s,
// write_xacts/op (transactions that wrote, from PostgreSQL's transaction
// id counter: each is one commit and, durable, one WAL flush) and
// wal_syncs/op (WAL fsyncs, fewer than commits when concurrent commits
// share one) and go_cpu_us/op (CPU time of this process, which runs the
// Service, the fake provider and the clients). ns/op counts both variants.
func BenchmarkAuthorize(b *testing.B) {
	for _, cl := range []struct {
		name string
		url  func(testing.TB) string
	}{{"durable", pgtest.DurableURL}, {"fast", pgtest.URL}} {
		b.Run(cl.name, func(b *testing.B) {
			w := newBenchWorld(b, cl.url(b))
			variants := []string{"one_statement", "separate_completion"}
			var totals [2]benchTotals
			b.ResetTimer()
			for round, left := 0, b.N; left > 0; round++ {
				n := min(left, benchChunk)
				for i := range variants {
					v := (round + i) % len(variants)
					totals[v].add(w.chunk(b, v == 0, n))
				}
				left -= n
			}
			for i, v := range variants {
				t := totals[i]
				b.ReportMetric(float64(t.requests)/t.elapsed.Seconds(), v+"_req/s")
				b.ReportMetric(float64(t.xacts)/float64(t.requests), v+"_write_xacts/op")
				b.ReportMetric(float64(t.walSyncs)/float64(t.requests), v+"_wal_syncs/op")
				b.ReportMetric(float64(t.cpu.Microseconds())/float64(t.requests), v+"_go_cpu_us/op")
			}
		})
	}
}

// BenchmarkAuthorizeVaulted compares new authorizations paying with a
// card of the vault (looked up, decrypted for the call, sent as a card)
// with the provider token of BenchmarkAuthorize, alternating in chunks as
// BenchmarkAuthorize does, on the durable cluster.
func BenchmarkAuthorizeVaulted(b *testing.B) {
	w := newBenchWorld(b, pgtest.DurableURL(b))
	pool, err := pgxpool.New(context.Background(), w.url)
	if err != nil {
		b.Fatal(err)
	}
	keys, err := vault.ParseKeys("1:"+base64.StdEncoding.EncodeToString(make([]byte, 32)),
		base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)))
	if err != nil {
		b.Fatal(err)
	}
	w.vaultKeys = keys
	pm, err := vault.New(vault.Config{Pool: pool, Keys: keys}).Create(context.Background(), vault.CreateInput{TenantID: w.tenant, Key: "bench-card",
		Card: vault.CardInput{Number: "4242424242424242", ExpMonth: 12, ExpYear: time.Now().Year() + 3, CVC: "123"}})
	pool.Close() // the benchmark waits for every session to end between chunks
	if err != nil {
		b.Fatal(err)
	}
	variants := []string{"", pm.ID}
	names := []string{"token", "vaulted"}
	var totals [2]benchTotals
	b.ResetTimer()
	for round, left := 0, b.N; left > 0; round++ {
		n := min(left, benchChunk)
		for i := range variants {
			v := (round + i) % len(variants)
			w.method = variants[v]
			totals[v].add(w.chunk(b, true, n))
		}
		left -= n
	}
	for i, name := range names {
		b.ReportMetric(float64(totals[i].requests)/totals[i].elapsed.Seconds(), name+"_req/s")
		b.ReportMetric(float64(totals[i].cpu.Microseconds())/float64(totals[i].requests), name+"_go_cpu_us/op")
	}
	b.ReportMetric((float64(totals[1].requests)/totals[1].elapsed.Seconds())/
		(float64(totals[0].requests)/totals[0].elapsed.Seconds()), "vaulted/token")
}

// cardVault is a vault on pool with w's keys, as the Service takes it:
// nil when w has none.
func (w *benchWorld) cardVault(pool *pgxpool.Pool) orchestrator.CardVault {
	if w.vaultKeys == nil {
		return nil
	}
	return vault.New(vault.Config{Pool: pool, Keys: w.vaultKeys})
}

// benchTotals adds up the chunks of one variant.
type benchTotals struct {
	requests, xacts, walSyncs int64
	elapsed                   time.Duration
	// cpu is the CPU time of this process (the Service, the fake provider
	// and the clients), user and system.
	cpu time.Duration
}

func (t *benchTotals) add(c benchTotals) {
	t.requests += c.requests
	t.xacts += c.xacts
	t.walSyncs += c.walSyncs
	t.elapsed += c.elapsed
	t.cpu += c.cpu
}

// processCPU is the CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchWorld is a database, the fake provider and a tenant.
type benchWorld struct {
	url    string
	fake   *fake.Client
	tenant int64
	fp     orchestrator.Fingerprint
	runs   atomic.Int64
	// vaultKeys, when set, are the keys of the Services' vault, and
	// method the payment method of the next chunk's payments ("" is the
	// default token).
	vaultKeys *vault.Keyring
	method    string
}

const benchBody = `{"amount_minor":1000,"currency":"EUR"}`

func newBenchWorld(b testing.TB, dbURL string) *benchWorld {
	b.Helper()
	fr, err := fake.Start("127.0.0.1:0", fake.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	b.Cleanup(tr.CloseIdleConnections)
	w := &benchWorld{url: dbURL, fake: fr.Client(&http.Client{Transport: tr})}
	svc, done := w.service(b)
	defer done()
	tenant, _, _, err := svc.CreateTenant(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	w.tenant = tenant.ID
	if w.fp, err = orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(benchBody)); err != nil {
		b.Fatal(err)
	}
	return w
}

// service is a Service on a new pool of 20 connections (payorch serve's
// default), with its caches' listener running; done stops it, closes the pool and waits until its backends are gone,
// which flushes their statistics.
func (w *benchWorld) service(b testing.TB) (*orchestrator.Service, func()) {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(w.url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	svc := orchestrator.NewService(orchestrator.Config{
		Pool: pool, Providers: map[string]providers.Provider{"fake": w.fake}, DefaultProvider: "fake", Vault: w.cardVault(pool),
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	// As payorch serve runs it (PAYORCH_API_KEY_CACHE, the default): the
	// tenant's routing is read from memory, not the database, once cached.
	stop := svc.StartKeyCache(context.Background())
	return svc, func() {
		stop()
		pool.Close()
		w.waitBackendsGone(b)
	}
}

// waitBackendsGone waits until no other session is connected to the
// benchmark's database.
func (w *benchWorld) waitBackendsGone(b testing.TB) {
	b.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, w.url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	testkit.WaitFor(b, 30*time.Second, "no other session connected", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil {
			return false, err
		}
		return n == 0, fmt.Errorf("%d sessions still connected", n)
	})
}

// counters reads the transaction id counter and the WAL fsyncs so far.
func (w *benchWorld) counters(b testing.TB) (xid, walSyncs int64) {
	b.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, w.url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	err = pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		(SELECT wal_sync FROM pg_stat_wal)`).Scan(&xid, &walSyncs)
	if err != nil {
		b.Fatal(err)
	}
	return xid, walSyncs
}

// chunk authorizes n new payments, benchClients at a time, on a new
// pool, and returns what it took.
func (w *benchWorld) chunk(b *testing.B, oneStatement bool, n int) benchTotals {
	b.StopTimer()
	svc, done := w.service(b)
	prefix := fmt.Sprintf("b%d-", w.runs.Add(1))
	var seq atomic.Int64
	one := func() error {
		key := prefix + fmt.Sprint(seq.Add(1))
		return w.authorize(svc, key, oneStatement)
	}
	// New backends are slow for their first statements: warm them up.
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() {
			for range 2 {
				if err := one(); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	xid0, sync0 := w.counters(b)
	var left atomic.Int64
	left.Store(int64(n))
	b.StartTimer()
	start, cpu0 := time.Now(), processCPU(b)
	for range benchClients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := one(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU(b)-cpu0
	b.StopTimer()
	done()
	xid1, sync1 := w.counters(b)
	b.StartTimer()
	return benchTotals{requests: int64(n), xacts: xid1 - xid0, walSyncs: sync1 - sync0, elapsed: elapsed, cpu: cpu}
}

// authorize runs one new authorization under key as httpapi does. With
// oneStatement false, Authorize runs without the claim, as for a caller
// that stores nothing with the settlement, and the answer is stored
// afterwards by CompleteIdempotent (the statements of the payment then
// move no recovery point of the key either: slightly less to write than
// the settle-then-complete path had before the answer became a domain
// value).
func (w *benchWorld) authorize(svc *orchestrator.Service, key string, oneStatement bool) error {
	ctx := context.Background()
	begin, err := svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{
		TenantID: w.tenant, Operation: orchestrator.OpAuthorize, Key: key, Fingerprint: w.fp})
	if err != nil {
		return err
	}
	c := begin.Claim
	if c == nil {
		return fmt.Errorf("key %s: not claimed", key)
	}
	in := orchestrator.AuthorizeInput{TenantID: w.tenant, Key: key, Fingerprint: w.fp, AmountMinor: 1000, Currency: "EUR",
		PaymentMethod: w.method}
	var out orchestrator.Outcome
	if oneStatement {
		out, err = svc.Authorize(ctx, c, in)
	} else {
		out, err = svc.Authorize(ctx, nil, in)
	}
	if err != nil || out.Payment.Status != orchestrator.StatusAuthorized {
		return fmt.Errorf("key %s: %+v %v", key, out.Payment, err)
	}
	if oneStatement != (c.Completed() != nil) {
		return fmt.Errorf("key %s: stored with the settlement: %v", key, c.Completed() != nil)
	}
	if c.Completed() == nil {
		res, final, err := c.Answer(out.Payment.ID, out, nil)
		if err != nil || !final {
			return fmt.Errorf("key %s: answer %v %v", key, final, err)
		}
		return svc.CompleteIdempotent(ctx, c, out.Payment.ID, res)
	}
	return nil
}
