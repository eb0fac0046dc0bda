package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgcluster"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

// The load BenchmarkServe applies (BENCHMARKS.md explains the choices).
const (
	// benchClients is the number of concurrent HTTP clients, and of
	// pgbench clients.
	benchClients = 16
	// benchWarmup is how long new authorizes run, unmeasured, before the
	// scenarios: it opens and warms the server's database connections.
	benchWarmup = 5 * time.Second
	// pgbench runs for benchPgbenchWarmup+benchPgbenchMeasure; only the
	// transactions that end in the last benchPgbenchMeasure count, because
	// its connections are new (see warm-up in BENCHMARKS.md).
	benchPgbenchWarmup  = 5 * time.Second
	benchPgbenchMeasure = 10 * time.Second
	// benchReplayKeys is how many completed keys the replay scenarios
	// cycle through.
	benchReplayKeys = 256
	// benchStormSize is how many identical requests DuplicateStorm sends
	// per key.
	benchStormSize = 16
	// benchBody is the body of every authorize.
	benchBody = `{"amount_minor":1000,"currency":"EUR"}`
	// benchHotPathScript is the pgbench script of one new authorize's SQL.
	benchHotPathScript = "../../testdata/bench/authorize_hot_path.sql"
	// benchStatsSettle is how long the benchmark waits, before and after a
	// measured run, for PostgreSQL's statistics to be complete: each
	// backend keeps its counts (xact_commit, pg_stat_wal) to itself and
	// sends them at most once a second while busy and, once idle, at the
	// latest 10 s later (PGSTAT_IDLE_INTERVAL).
	benchStatsSettle = 10500 * time.Millisecond
)

// BenchmarkServe is the headline: HTTP load on one `payorch serve` process
// with its embedded fake provider (zero latency) on a database of the
// durable cluster (pgtest.DurableURL: fsync, synchronous_commit and
// full_page_writes on, so every commit waits for its WAL flush, as in
// production). One op is one HTTP request; each scenario reports req/s,
// the p50 and p99 latency, the CPU each process spent per request, and
// commits and WAL flushes per request, of its last run. In the same run,
// on the same cluster: the reference peer (bench_peer_test.go) under the
// same load, first, and pgbench's floors: the service's own SQL on its
// database (pct_of_pgbench) and the peer's two-transaction floor.sql on
// the peer's (x_pgbench_floor). Run it as `make bench` does
// (BENCHMARKS.md).
func BenchmarkServe(b *testing.B) {
	e := newBenchEnv(b, benchOptions{durable: true, peer: true})
	b.Run("Peer/NewAuthorize", e.peerNew)
	b.Run("Peer/Replay", e.peerReplay)
	e.scenarios(b)
}

// BenchmarkServeNoSync is the secondary column: BenchmarkServe's writing
// scenarios (NewAuthorize with its pgbench floor, Capture) on the
// throw-away cluster (fsync, synchronous_commit and full_page_writes off),
// where commits cost no disk flush, so the figures are CPU and round trips
// only, comparable with the figures of earlier commits. No payments team
// runs PostgreSQL this way. Replays and the storm, which hardly write, are
// measured on the durable cluster only, as is everything against the
// peer; commits and WAL flushes are not counted here (no flushes).
func BenchmarkServeNoSync(b *testing.B) {
	e := newBenchEnv(b, benchOptions{})
	b.Run("NewAuthorize", e.newAuthorize)
	b.Run("Capture", e.capture)
}

// scenarios runs the service's scenarios on e.
func (e *benchEnv) scenarios(b *testing.B) {
	b.Run("NewAuthorize", e.newAuthorize)
	b.Run("Replay", func(b *testing.B) { e.replay(b, benchClients) })
	b.Run("ReplayOneClient", func(b *testing.B) { e.replay(b, 1) })
	b.Run("DuplicateStorm", e.duplicateStorm)
	b.Run("Capture", e.capture)
}

// BenchmarkServePinned is NewAuthorize and its pgbench floor again with
// PostgreSQL on a CPU of its own (CPU 1: the postmaster and every backend,
// which inherit it) and everything else on the other (CPU 0: the server
// with its fake, the load generator, pgbench's client), as when the
// database runs on its own host. Both sides are then limited by the same
// database CPU, and pct_of_pgbench says how close the service comes to
// keeping it as busy as pgbench does. Affinities are restored afterwards.
// It runs on the durable cluster, as BenchmarkServe does.
func BenchmarkServePinned(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Fatalf("BenchmarkServePinned needs 2 CPUs, this machine has %d", runtime.NumCPU())
	}
	e := newBenchEnv(b, benchOptions{durable: true, pinned: true})
	b.Run("NewAuthorize", e.newAuthorize)
}

// BenchmarkServePooler is NewAuthorize through a real PgBouncer in
// transaction pool mode (PAYORCH_DATABASE_POOLER=transaction) next to the
// same load sent directly: three serve processes on one database, measured
// in turn (direct, describe, pooled, twice, b.N requests each), after a
// warm-up of each. "describe" is the pooled setting without PgBouncer
// (PAYORCH_DATABASE_POOLER=transaction with DATABASE_URL naming the
// server: pgx's cache_describe mode, every statement parsed and planned
// again), so that one run splits the cost of the pooled side between the
// statement mode and PgBouncer itself. It reports each side's req/s and
// p50, the pooled rate as a percentage of the direct one (the aim: at
// least 90) and of the describe one; per request and side, the CPU of the
// serve process, of PostgreSQL, of the load generator and, through the
// pooler, of PgBouncer, their sum (cpu_ms/op), and what PgBouncer's SHOW
// STATS counted: transactions, queries (round trips through it) and the
// time clients waited for a server connection.
// Machine shared: compare the numbers of one run, not across runs; the
// CPU per request is steadier than req/s when other work comes and goes
// (pooler_cpu_pct_of_direct: the direct side's CPU per request as a
// percentage of the pooled side's, the throughput ratio a CPU-bound
// machine predicts).
func BenchmarkServePooler(b *testing.B) {
	dbURL := pgtest.URL(b)
	pool := pgtest.Pool(b, dbURL)
	tenant, _, secret, err := orchestrator.NewService(orchestrator.Config{Pool: pool}).CreateTenant(context.Background(), "Bench")
	if err != nil {
		b.Fatal(err)
	}
	var backend int
	if err := pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	side := func(serveURL string, env ...string) *benchEnv {
		e := &benchEnv{dbURL: serveURL, pool: pool, tenantID: tenant.ID, apiKey: secret, logs: &testkit.SyncBuffer{},
			postmaster: parentPID(backend), serveEnv: env}
		e.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 4 * benchClients,
			MaxIdleConnsPerHost: 4 * benchClients, DisableCompression: true}}
		b.Cleanup(e.client.CloseIdleConnections)
		e.startServe(b)
		return e
	}
	names := []string{"direct", "describe", "pooler"}
	sides := []*benchEnv{
		side(dbURL),
		side(dbURL, "PAYORCH_DATABASE_POOLER=transaction", "DATABASE_DIRECT_URL="+dbURL),
		side(pgtest.ThroughPooler(b, dbURL), "PAYORCH_DATABASE_POOLER=transaction", "DATABASE_DIRECT_URL="+dbURL),
	}
	pooled := sides[2]
	for i, e := range sides {
		e.load(b, benchClients, benchWarmup/2, false, func(j int) error { return e.newKey(fmt.Sprintf("warmup-%d-%d", i, j)) })
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	pooled.bouncerPID = pgtest.PoolerPID()
	var (
		rates [3]float64
		all   [3][]time.Duration
		used  [3]cpuTimes
		took  [3]time.Duration
		stats bouncerStats
	)
	for round := range 2 {
		for i, e := range sides {
			var s0 bouncerStats
			if e == pooled {
				s0 = readBouncerStats(b, dbURL)
			}
			r := e.load(b, benchClients, 0, false, func(j int) error { return e.newKey(fmt.Sprintf("new-%d-%d-%d", round, i, j)) })
			if e == pooled {
				time.Sleep(bouncerStatsPeriod)
				stats = stats.add(readBouncerStats(b, dbURL).sub(s0))
			}
			rates[i] += r.perSecond() / 2
			all[i] = append(all[i], r.latency...)
			used[i] = used[i].add(r.cpu)
			took[i] += r.elapsed
		}
	}
	var cpu [3]float64
	for i, name := range names {
		slices.Sort(all[i])
		n := len(all[i])
		b.ReportMetric(rates[i], name+"_req/s")
		b.ReportMetric(percentile(all[i], 50), name+"_p50_ms")
		b.ReportMetric(perOpMS(used[i].serve, n), name+"_serve_cpu_ms/op")
		b.ReportMetric(perOpMS(used[i].pg, n), name+"_pg_cpu_ms/op")
		b.ReportMetric(perOpMS(used[i].client, n), name+"_client_cpu_ms/op")
		cpu[i] = perOpMS(used[i].serve+used[i].pg+used[i].client+used[i].bouncer, n)
		b.ReportMetric(cpu[i], name+"_cpu_ms/op")
		b.ReportMetric(othersPct(used[i].others(0), took[i]), name+"_others_cpu_pct")
	}
	b.ReportMetric(100*rates[2]/rates[0], "pooler_pct_of_direct")
	b.ReportMetric(100*rates[1]/rates[0], "describe_pct_of_direct")
	b.ReportMetric(100*rates[2]/rates[1], "pooler_pct_of_describe")
	b.ReportMetric(100*cpu[0]/cpu[2], "pooler_cpu_pct_of_direct")
	n := float64(len(all[2]))
	b.ReportMetric(perOpMS(used[2].bouncer, len(all[2])), "pgbouncer_cpu_ms/op")
	b.ReportMetric(float64(stats.queries)/n, "pgbouncer_queries/op")
	b.ReportMetric(float64(stats.xacts)/n, "pgbouncer_xacts/op")
	b.ReportMetric(float64(stats.waitMicros)/1000/n, "pgbouncer_wait_ms/op")
}

// bouncerStatsPeriod is how long PgBouncer may take to bring SHOW STATS up
// to date: its stats_period (1 s in internal/pgbouncer), and a margin.
const bouncerStatsPeriod = 1100 * time.Millisecond

// bouncerStats are the counters of one database in PgBouncer's SHOW
// STATS: transactions and queries (round trips) it passed, and the time
// clients waited for a server connection.
type bouncerStats struct {
	xacts, queries, waitMicros int64
}

func (s bouncerStats) sub(t bouncerStats) bouncerStats {
	return bouncerStats{s.xacts - t.xacts, s.queries - t.queries, s.waitMicros - t.waitMicros}
}

func (s bouncerStats) add(t bouncerStats) bouncerStats {
	return bouncerStats{s.xacts + t.xacts, s.queries + t.queries, s.waitMicros + t.waitMicros}
}

// readBouncerStats reads ThroughPooler's PgBouncer's counters for the
// database of dbURL from its admin console, as PgBouncer last brought
// them up to date (every stats_period: wait bouncerStatsPeriod after a
// run before reading its totals).
func readBouncerStats(b *testing.B, dbURL string) bouncerStats {
	b.Helper()
	ctx := context.Background()
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgtest.PoolerAdminURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW STATS")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var s bouncerStats
	for rows.Next() {
		raw := rows.RawValues() // text: the console speaks the simple protocol
		col := map[string]string{}
		for i, f := range rows.FieldDescriptions() {
			col[f.Name] = string(raw[i])
		}
		if col["database"] != u.Path[1:] {
			continue
		}
		s.xacts, _ = strconv.ParseInt(col["total_xact_count"], 10, 64)
		s.queries, _ = strconv.ParseInt(col["total_query_count"], 10, 64)
		s.waitMicros, _ = strconv.ParseInt(col["total_wait_time"], 10, 64)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchOptions says where and what a benchEnv runs.
type benchOptions struct {
	// durable puts the database on the durable cluster
	// (pgtest.DurableURL), not the throw-away one.
	durable bool
	// pinned puts PostgreSQL on CPU 1 and the rest on CPU 0.
	pinned bool
	// peer starts the reference peer on a database of its own on the same
	// cluster and takes pgbench's floor on it (bench_peer_test.go).
	peer bool
}

// benchEnv is one database, one merchant and one serve process, shared by
// the scenarios.
type benchEnv struct {
	opts     benchOptions
	dbURL    string
	pool     *pgxpool.Pool
	tenantID int64
	apiKey   string
	base     string
	client   *http.Client
	serve    *exec.Cmd
	// serveEnv is added to the serve process's environment.
	serveEnv []string
	logs     *testkit.SyncBuffer
	run      atomic.Int64 // numbers the runs, so keys never repeat

	postmaster int // pid, for the cluster's CPU time
	// pinned puts PostgreSQL on CPU 1 and the rest on CPU 0
	// (BenchmarkServePinned).
	pinned bool
	pg     pgbenchResult

	peer *benchPeer // the reference peer, when opts.peer
	// bouncerPID is PgBouncer's process, whose CPU time cpu counts, when
	// the server goes through it (BenchmarkServePooler).
	bouncerPID int
	floor      pgbenchResult // pgbench's floor.sql on the peer's database
	// newRate is the req/s of NewAuthorize's last run, for Capture's
	// ratio to it.
	newRate float64
	ratesMu sync.Mutex
	rates   map[string]float64 // req/s of each scenario's last run (wantStats)

	replayOnce   sync.Once
	replayKeys   []string
	replayBodies [][]byte
}

func newBenchEnv(b *testing.B, opts benchOptions) *benchEnv {
	b.Helper()
	dbURL := pgtest.URL(b)
	if opts.durable {
		dbURL = pgtest.DurableURL(b)
	}
	pool := pgtest.Pool(b, dbURL)
	tenant, _, secret, err := orchestrator.NewService(orchestrator.Config{Pool: pool}).CreateTenant(context.Background(), "Bench")
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{opts: opts, dbURL: dbURL, pool: pool, tenantID: tenant.ID, apiKey: secret, logs: &testkit.SyncBuffer{}}
	var backend int
	if err := pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	if e.postmaster = parentPID(backend); e.postmaster <= 1 {
		b.Fatalf("no postmaster found for backend %d", backend)
	}
	if opts.pinned {
		e.pin(b)
	}
	e.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * benchClients,
		MaxIdleConnsPerHost: 4 * benchClients,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	b.Cleanup(e.client.CloseIdleConnections)
	e.startServe(b)

	// Warm the server's pool up (its connections are new backends, slow
	// for their first seconds). Then ANALYZE, as autovacuum would within
	// its first minute: plans the server cached while the tables were
	// empty scan every payment of the tenant (BENCHMARKS.md), and the
	// statistics invalidate them. Then take the pgbench figure, once.
	e.load(b, benchClients, benchWarmup, false, func(i int) error { return e.newKey(fmt.Sprintf("warmup-%d", i)) })
	if opts.peer {
		e.peer = startPeer(b, e) // warmed up and analyzed too
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	e.pg = e.pgbench(b, true, benchHotPathScript, e.dbURL,
		"--define=tenant_id="+strconv.FormatInt(e.tenantID, 10),
		"--define=run="+strconv.FormatInt(time.Now().UnixNano(), 10))
	if opts.peer {
		// pgbench's backends sent their statistics as they exited: nothing
		// is pending.
		e.floor = e.pgbench(b, false, e.peer.floorScript, e.peer.dbURL)
	}
	return e
}

// startServe runs `payorch serve` without PAYORCH_FAKE_URL, so it starts
// its own fake provider in-process, and waits until /readyz answers 200.
func (e *benchEnv) startServe(b *testing.B) {
	b.Helper()
	bin := payorchBinary(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := e.command(bin, "serve", "--listen", addr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + e.dbURL,
		"PAYORCH_LOG_LEVEL=warn", "PAYORCH_RATE_LIMIT=0", "PAYORCH_ENVIRONMENT=test"}
	cmd.Env = append(cmd.Env, e.serveEnv...)
	if addr := os.Getenv("PAYORCH_DEBUG_LISTEN"); addr != "" {
		// Profile the server under load: go tool pprof http://ADDR/debug/pprof/profile
		cmd.Env = append(cmd.Env, "PAYORCH_DEBUG_LISTEN="+addr)
	}
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	e.serve = cmd
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if b.Failed() {
			b.Logf("payorch serve logs:\n%s", tail(e.logs.String(), 4000))
		}
	})
	e.base = "http://" + addr
	testkit.WaitFor(b, 60*time.Second, "payorch serve to become ready", func() (bool, error) {
		res, err := e.client.Get(e.base + "/readyz")
		if err != nil {
			return false, fmt.Errorf("%v\n%s", err, e.logs.String())
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Errorf("readyz %d\n%s", res.StatusCode, e.logs.String())
	})
}

// pin moves the cluster (the postmaster and its children; later
// backends inherit it) to CPU 1 and this process to CPU 0, and puts them
// back on every CPU when the benchmark ends.
func (e *benchEnv) pin(b *testing.B) {
	b.Helper()
	all := "0-" + strconv.Itoa(runtime.NumCPU()-1)
	cluster := func(cpus string) error {
		pids := []int{e.postmaster}
		entries, _ := os.ReadDir("/proc")
		for _, d := range entries {
			if pid, err := strconv.Atoi(d.Name()); err == nil && parentPID(pid) == e.postmaster {
				pids = append(pids, pid)
			}
		}
		for _, pid := range pids {
			out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
			if err != nil && parentPID(pid) != 0 { // a backend that just exited is fine
				return fmt.Errorf("taskset %d: %v: %s", pid, err, out)
			}
		}
		return nil
	}
	self := func(cpus string) error {
		out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(os.Getpid())).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset self: %v: %s", err, out)
		}
		return nil
	}
	b.Cleanup(func() {
		if err := errors.Join(cluster(all), self(all)); err != nil {
			b.Error(err)
		}
	})
	if err := cluster("1"); err != nil {
		b.Fatal(err)
	}
	if err := self("0"); err != nil {
		b.Fatal(err)
	}
	e.pinned = true
}

// command is exec.Command, on CPU 0 when the benchmark is pinned.
func (e *benchEnv) command(name string, args ...string) *exec.Cmd {
	if e.pinned {
		return exec.Command("taskset", append([]string{"-c", "0", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// benchAnswer is what one POST /v1/payments got.
type benchAnswer struct {
	status     int
	replayed   bool
	retryAfter string
	body       []byte
}

func (e *benchEnv) authorize(key string) (benchAnswer, error) {
	return e.post("/v1/payments", key, benchBody)
}

// post sends one keyed POST as the merchant.
func (e *benchEnv) post(path, key, body string) (benchAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, e.base+path, strings.NewReader(body))
	if err != nil {
		return benchAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := e.client.Do(req)
	if err != nil {
		return benchAnswer{}, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	return benchAnswer{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true",
		retryAfter: res.Header.Get("Retry-After"), body: answer}, err
}

// newKey authorizes under a key never used before: the answer must be a
// fresh 201.
func (e *benchEnv) newKey(key string) error {
	a, err := e.authorize(key)
	if err != nil {
		return err
	}
	if a.status != http.StatusCreated || a.replayed {
		return fmt.Errorf("answer %d replayed=%v: %s", a.status, a.replayed, a.body)
	}
	return nil
}

// cpuTimes is the CPU time (user+system) spent so far by the load
// generator (this process), the serve process (with its embedded fake) and
// the cluster: the postmaster, its live children (backends, background
// workers) and the children it has reaped (pgbench's backends, once
// pgbench is done).
type cpuTimes struct {
	client, serve, pg time.Duration
	peer              time.Duration // the reference peer's process, when it runs
	bouncer           time.Duration // PgBouncer's process, when benchEnv.bouncerPID is set
	pgProcs           int           // the postmaster's live children
	machine           time.Duration // busy time of all CPUs (/proc/stat)
}

// others is the CPU time the machine spent on anything but ours (extra),
// the load generator, the server and the cluster.
func (t cpuTimes) others(extra time.Duration) time.Duration {
	return t.machine - t.client - t.serve - t.peer - t.pg - t.bouncer - extra
}

func (t cpuTimes) sub(u cpuTimes) cpuTimes {
	return cpuTimes{client: t.client - u.client, serve: t.serve - u.serve, peer: t.peer - u.peer, pg: t.pg - u.pg,
		bouncer: t.bouncer - u.bouncer, machine: t.machine - u.machine}
}

// add sums two spans of CPU time (pgProcs is left out).
func (t cpuTimes) add(u cpuTimes) cpuTimes {
	return cpuTimes{client: t.client + u.client, serve: t.serve + u.serve, peer: t.peer + u.peer, pg: t.pg + u.pg,
		bouncer: t.bouncer + u.bouncer, machine: t.machine + u.machine}
}

func (e *benchEnv) cpu() cpuTimes {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t := cpuTimes{client: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), serve: procCPU(e.serve.Process.Pid, false),
		machine: machineBusy()}
	if e.peer != nil {
		t.peer = procCPU(e.peer.cmd.Process.Pid, false)
	}
	if e.bouncerPID > 0 {
		t.bouncer = procCPU(e.bouncerPID, false)
	}
	t.pg = procCPU(e.postmaster, true)
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		if pid, err := strconv.Atoi(d.Name()); err == nil && parentPID(pid) == e.postmaster {
			t.pg += procCPU(pid, false)
			t.pgProcs++
		}
	}
	return t
}

// machineBusy is the time all CPUs spent not idle: user, nice, system,
// irq, softirq and steal of /proc/stat's first line, in clock ticks.
func machineBusy() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f {
		if i == 0 || i == 4 || i == 5 || i > 8 { // the label, idle, iowait, guest
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// procStat returns the fields of /proc/pid/stat after the command name.
func procStat(pid int) []string {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(raw[i+1:]))
}

func parentPID(pid int) int {
	f := procStat(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// procCPU is utime+stime of pid (fields 14 and 15 of /proc/pid/stat, in
// clock ticks of 10 ms), plus cutime+cstime (its reaped children's) when
// children is set.
func procCPU(pid int, children bool) time.Duration {
	f := procStat(pid)
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	last := 12
	if children {
		last = 14
	}
	for i := 11; i <= last; i++ {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// loadResult is one run of the load generator.
type loadResult struct {
	elapsed time.Duration
	latency []time.Duration // sorted
	cpu     cpuTimes        // spent during the run
	db      *pgCounters     // PostgreSQL's counters over the run, when measured
}

func (r loadResult) perSecond() float64 {
	return float64(len(r.latency)) / r.elapsed.Seconds()
}

// percentile returns the q-th percentile (0 < q ≤ 100) of the sorted
// sample, nearest rank, in milliseconds.
func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*q/100+0.999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return float64(sorted[rank].Microseconds()) / 1000
}

func perOpMS(d time.Duration, n int) float64 {
	return float64(d.Microseconds()) / 1000 / float64(n)
}

// othersPct is the share of the machine's CPUs that other processes used
// during elapsed: a disturbed run shows here.
func othersPct(d, elapsed time.Duration) float64 {
	return max(0, 100*d.Seconds()/(elapsed.Seconds()*float64(runtime.NumCPU())))
}

// report reports the run's figures; peer says the load went to the
// reference peer (its CPU is peer_cpu_ms/op and its commits those of its
// database).
func (r loadResult) report(b *testing.B, peer bool) {
	n := len(r.latency)
	b.ReportMetric(r.perSecond(), "req/s")
	b.ReportMetric(percentile(r.latency, 50), "p50_ms")
	b.ReportMetric(percentile(r.latency, 99), "p99_ms")
	if peer {
		b.ReportMetric(perOpMS(r.cpu.peer, n), "peer_cpu_ms/op")
	} else {
		b.ReportMetric(perOpMS(r.cpu.serve, n), "serve_cpu_ms/op")
	}
	b.ReportMetric(perOpMS(r.cpu.pg, n), "pg_cpu_ms/op")
	b.ReportMetric(perOpMS(r.cpu.client, n), "client_cpu_ms/op")
	b.ReportMetric(othersPct(r.cpu.others(0), r.elapsed), "others_cpu_pct")
	if r.db != nil {
		commits := r.db.commits
		if peer {
			commits = r.db.peerCommits
		}
		b.ReportMetric(float64(commits)/float64(n), "commits/op")
		b.ReportMetric(float64(r.db.xid)/float64(n), "write_xacts/op")
		b.ReportMetric(float64(r.db.walSync)/float64(n), "wal_syncs/op")
		b.ReportMetric(float64(r.db.walWrite)/float64(n), "wal_writes/op")
	}
}

// load sends requests 0, 1, … from clients concurrent clients, timing each
// one: b.N requests or, when d is positive, as many as d allows. do sends
// request i and checks its answer. The benchmark timer runs only during
// the load. The first error fails the benchmark once every client has
// stopped. With stats, PostgreSQL's counters are read around the run
// (pgCounters), which adds two waits of benchStatsSettle.
func (e *benchEnv) load(b *testing.B, clients int, d time.Duration, stats bool, do func(i int) error) loadResult {
	b.Helper()
	n := b.N
	if d > 0 {
		n = 1 << 40
	}
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		first   error
		mu      sync.Mutex
		latency []time.Duration
		wg      sync.WaitGroup
		db0     pgCounters
	)
	if stats {
		db0 = e.counters(b, true)
	}
	cpu0 := e.cpu()
	b.ResetTimer()
	b.StartTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			defer func() {
				mu.Lock()
				latency = append(latency, mine...)
				mu.Unlock()
			}()
			for !failed.Load() && (d == 0 || time.Since(start) < d) {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				err := do(i)
				mine = append(mine, time.Since(t0))
				if err != nil {
					failed.Store(true)
					errOnce.Do(func() { first = fmt.Errorf("request %d: %w", i, err) })
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1 := e.cpu()
	if first != nil {
		b.Fatal(first)
	}
	slices.Sort(latency)
	r := loadResult{elapsed: elapsed, latency: latency, cpu: cpu1.sub(cpu0)}
	if stats {
		db := e.counters(b, true).sub(db0)
		r.db = &db
	}
	return r
}

// newAuthorize: every request a new Idempotency-Key, so every request is a
// full authorization (key claim, payment, provider create and confirm,
// settlement, completion). Reported next to pgbench running the same SQL
// with as many clients on the same database.
func (e *benchEnv) newAuthorize(b *testing.B) {
	run := e.run.Add(1)
	res := e.load(b, benchClients, 0, e.wantStats(b), func(i int) error { return e.newKey(fmt.Sprintf("new-%d-%d", run, i)) })
	res.report(b, false)
	e.ran(b, res)
	e.newRate = res.perSecond()
	b.ReportMetric(e.pg.tps, "pgbench_tps")
	b.ReportMetric(e.pg.p50, "pgbench_p50_ms")
	b.ReportMetric(e.pg.p99, "pgbench_p99_ms")
	b.ReportMetric(e.pg.pgCPU, "pgbench_pg_cpu_ms/op")
	b.ReportMetric(e.pg.ownCPU, "pgbench_client_cpu_ms/op")
	b.ReportMetric(e.pg.others, "pgbench_others_cpu_pct")
	if e.countsCommits() {
		b.ReportMetric(e.pg.writeXacts, "pgbench_write_xacts/op")
		b.ReportMetric(e.pg.walSyncs, "pgbench_wal_syncs/op")
	}
	b.ReportMetric(100*res.perSecond()/e.pg.tps, "pct_of_pgbench")
	b.Logf("%d requests in %s; pgbench: %s", len(res.latency), res.elapsed.Round(time.Millisecond), e.pg.summary)
	if e.peer != nil {
		b.ReportMetric(res.perSecond()/e.peer.newRate, "x_peer_new")
		b.ReportMetric(res.perSecond()/e.floor.tps, "x_pgbench_floor")
		b.ReportMetric(e.floor.tps, "floor_tps")
		b.ReportMetric(e.floor.p50, "floor_p50_ms")
		b.ReportMetric(e.floor.writeXacts, "floor_write_xacts/op")
		b.ReportMetric(e.floor.walSyncs, "floor_wal_syncs/op")
		b.Logf("peer: %.1f new req/s; pgbench floor.sql on its database: %s", e.peer.newRate, e.floor.summary)
	}
}

// capture: b.N payments are authorized first (not reported), then each is
// captured in full under a new Idempotency-Key: key claim, the operation
// recorded under the payment's row lock, the provider's capture,
// settlement, completion. Every answer must be a fresh 200, captured.
func (e *benchEnv) capture(b *testing.B) {
	run := e.run.Add(1)
	key := func(i int) string { return fmt.Sprintf("cap-%d-%d", run, i) }
	e.load(b, benchClients, 0, false, func(i int) error { return e.newKey(key(i)) })
	res := e.load(b, benchClients, 0, e.wantStats(b), func(i int) error {
		id := orchestrator.PaymentID(e.tenantID, key(i))
		a, err := e.post("/v1/payments/"+id+"/capture", "capture-"+key(i), `{}`)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK || a.replayed || !bytes.Contains(a.body, []byte(`"status":"captured"`)) {
			return fmt.Errorf("capture %s: %d replayed=%v: %s", id, a.status, a.replayed, a.body)
		}
		return nil
	})
	res.report(b, false)
	e.ran(b, res)
	if e.newRate > 0 {
		b.ReportMetric(res.perSecond()/e.newRate, "x_new_authorize")
	}
}

// replay: benchReplayKeys keys are authorized once (not timed), then
// replayed round robin from clients clients; every answer must be the
// stored 201, byte for byte, marked Idempotent-Replayed.
func (e *benchEnv) replay(b *testing.B, clients int) {
	e.replayOnce.Do(func() {
		for k := range benchReplayKeys {
			key := fmt.Sprintf("replay-%d", k)
			a, err := e.authorize(key)
			if err != nil || a.status != http.StatusCreated {
				b.Fatalf("authorize %s: %d %v %s", key, a.status, err, a.body)
			}
			e.replayKeys = append(e.replayKeys, key)
			e.replayBodies = append(e.replayBodies, a.body)
		}
	})
	if len(e.replayKeys) != benchReplayKeys {
		b.Fatal("replay keys were not set up")
	}
	res := e.load(b, clients, 0, e.wantStats(b), func(i int) error {
		k := i % benchReplayKeys
		a, err := e.authorize(e.replayKeys[k])
		if err != nil {
			return err
		}
		if a.status != http.StatusCreated || !a.replayed {
			return fmt.Errorf("replay answered %d replayed=%v: %s", a.status, a.replayed, a.body)
		}
		if !bytes.Equal(a.body, e.replayBodies[k]) {
			return fmt.Errorf("replay of %s is not byte-identical:\n%s\n%s", e.replayKeys[k], a.body, e.replayBodies[k])
		}
		return nil
	})
	res.report(b, false)
	e.ran(b, res)
	if e.peer != nil && clients == benchClients {
		b.ReportMetric(res.perSecond()/e.peer.replayRate, "x_peer_replay")
	}
}

// duplicateStorm: benchStormSize identical requests per key, key after key,
// from benchClients clients, so each key is hit by concurrent duplicates.
// Each answer is a 201 (the one execution, or a replay of it) or 409
// idempotency_key_in_use; the invariant is one execution and one provider
// authorization per key.
func (e *benchEnv) duplicateStorm(b *testing.B) {
	run := e.run.Add(1)
	keys := (b.N + benchStormSize - 1) / benchStormSize
	prefix := fmt.Sprintf("storm-%d-", run)
	fresh := make([]atomic.Int32, keys)
	var replayed, inUse atomic.Int64
	res := e.load(b, benchClients, 0, e.wantStats(b), func(i int) error {
		k := i / benchStormSize
		a, err := e.authorize(prefix + strconv.Itoa(k))
		if err != nil {
			return err
		}
		switch {
		case a.status == http.StatusCreated && a.replayed:
			replayed.Add(1)
		case a.status == http.StatusCreated:
			fresh[k].Add(1)
		case a.status == http.StatusConflict && bytes.Contains(a.body, []byte("idempotency_key_in_use")) && a.retryAfter != "":
			inUse.Add(1)
		default:
			return fmt.Errorf("storm answered %d: %s", a.status, a.body)
		}
		return nil
	})
	res.report(b, false)
	e.ran(b, res)
	for k := range fresh {
		if n := fresh[k].Load(); n != 1 {
			b.Fatalf("key %s%d: %d executions answered 201 without replay, want 1", prefix, k, n)
		}
	}

	// One payment per key, authorized, and one provider authorization
	// recorded for it (every provider call appends a provider_call event).
	var payments, authorized, calls, maxCalls int
	err := e.pool.QueryRow(context.Background(), `
		SELECT count(*), count(*) FILTER (WHERE p.status = 'authorized'), coalesce(sum(c.n), 0), coalesce(max(c.n), 0)
		FROM payments p
		LEFT JOIN LATERAL (
			SELECT count(*) AS n FROM payment_events e
			WHERE e.tenant_id = p.tenant_id AND e.payment_id = p.id AND e.type = 'provider_call' AND e.operation = 'authorize'
		) c ON true
		WHERE p.tenant_id = $1 AND p.idempotency_key LIKE $2`, e.tenantID, prefix+"%").
		Scan(&payments, &authorized, &calls, &maxCalls)
	if err != nil {
		b.Fatal(err)
	}
	if payments != keys || authorized != keys || calls != keys || maxCalls != 1 {
		b.Fatalf("%d keys: %d payments, %d authorized, %d provider authorizations (at most %d for one key); want one each",
			keys, payments, authorized, calls, maxCalls)
	}
	b.ReportMetric(float64(calls)/float64(keys), "provider_holds/key")
	b.ReportMetric(100*float64(inUse.Load())/float64(b.N), "pct_in_use")
	b.ReportMetric(100*float64(replayed.Load())/float64(b.N), "pct_replayed")
}

// pgbenchResult is the steady part of one pgbench run of the hot-path
// script.
type pgbenchResult struct {
	tps      float64
	p50, p99 float64 // milliseconds per transaction
	pgCPU    float64 // the cluster's CPU milliseconds per transaction, whole run
	ownCPU   float64 // pgbench's own CPU milliseconds per transaction, whole run
	others   float64 // share of the machine other processes used, whole run
	summary  string  // pgbench's own figures, warm-up included
	// writeXacts and walSyncs are write transactions and WAL flushes per
	// transaction of the script, whole run (pgCounters).
	writeXacts, walSyncs float64
}

var (
	pgbenchTPS    = regexp.MustCompile(`(?m)^tps = [0-9.]+ \(without initial connection time\)`)
	pgbenchFailed = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
)

// pgbench runs script (testdata/bench/authorize_hot_path.sql on the
// benchmark's database, or the peer's floor.sql on the peer's) with
// benchClients clients against dbURL, in prepared mode (pgx caches
// prepared statements too), for benchPgbenchWarmup+benchPgbenchMeasure,
// and measures the transactions that end in the last benchPgbenchMeasure.
// defines are more pgbench arguments (--define=name=value). When the
// benchmark counts commits (opts.durable), settle says statistics may
// still be pending from earlier load: they are waited for first.
func (e *benchEnv) pgbench(b *testing.B, settle bool, script, dbURL string, defines ...string) pgbenchResult {
	b.Helper()
	bin := "pgbench"
	if dir, err := pgcluster.FindBinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "pgbench")); err == nil {
			bin = filepath.Join(dir, "pgbench")
		}
	}
	script, err := filepath.Abs(script)
	if err != nil {
		b.Fatal(err)
	}
	logDir := b.TempDir()
	args := []string{
		"--no-vacuum", "--protocol=prepared",
		"--client=" + strconv.Itoa(benchClients), "--jobs=2",
		"--time=" + strconv.Itoa(int((benchPgbenchWarmup + benchPgbenchMeasure).Seconds())),
		"--file=" + script,
	}
	args = append(args, defines...)
	args = append(args, "--log", "--log-prefix="+filepath.Join(logDir, "tx"), dbURL)
	cmd := e.command(bin, args...)
	cmd.Dir = logDir
	var db0 pgCounters
	if e.countsCommits() {
		db0 = e.counters(b, settle)
	}
	cpu0 := e.cpu()
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(began)
	// Count pgbench's backends once the postmaster has reaped them.
	var cpu1 cpuTimes
	// Not reaped within 5 s: counted as they are.
	_ = testkit.Poll(5*time.Second, func() (bool, error) {
		cpu1 = e.cpu()
		return cpu1.pgProcs <= cpu0.pgProcs, nil
	})
	if err != nil {
		b.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	tps := pgbenchTPS.Find(out)
	failed := pgbenchFailed.FindSubmatch(out)
	if tps == nil || failed == nil || string(failed[1]) != "0" {
		b.Fatalf("pgbench failed transactions:\n%s", out)
	}
	r := pgbenchWindow(b, logDir, benchPgbenchWarmup)
	if e.countsCommits() {
		// pgbench's backends have exited, sending their statistics; the
		// WAL writer sends its own within a few of its rounds.
		time.Sleep(time.Second)
		db := e.counters(b, false).sub(db0)
		r.writeXacts, r.walSyncs = float64(db.xid)/float64(r.all), float64(db.walSync)/float64(r.all)
	}
	used := cpu1.sub(cpu0)
	own := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.pgCPU = perOpMS(used.pg, r.all)
	r.ownCPU = perOpMS(own, r.all)
	r.others = othersPct(used.others(own), took)
	r.summary = fmt.Sprintf("%d transactions, %s; %d in the measured window", r.all, tps, r.counted)
	return r.pgbenchResult
}

type pgbenchWindowResult struct {
	pgbenchResult
	all, counted int
}

// pgbenchWindow reads the per-transaction logs of --log (one line per
// transaction: client, number, latency µs, script, end seconds, end µs)
// and measures the transactions that end after the first warmup.
func pgbenchWindow(b *testing.B, dir string, warmup time.Duration) pgbenchWindowResult {
	b.Helper()
	type tx struct{ end, latency time.Duration }
	var txs []tx
	files, _ := filepath.Glob(filepath.Join(dir, "tx.*"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			var v [6]int64
			for i := range v {
				if len(fields) > i {
					v[i], err = strconv.ParseInt(fields[i], 10, 64)
				}
				if len(fields) <= i || err != nil {
					fh.Close()
					b.Fatalf("pgbench log %s: %q", f, sc.Text())
				}
			}
			end := time.Duration(v[4])*time.Second + time.Duration(v[5])*time.Microsecond
			txs = append(txs, tx{end: end, latency: time.Duration(v[2]) * time.Microsecond})
		}
		fh.Close()
	}
	if len(txs) == 0 {
		b.Fatal("pgbench wrote no transaction log")
	}
	start, last := txs[0].end-txs[0].latency, txs[0].end
	for _, t := range txs {
		start = min(start, t.end-t.latency)
		last = max(last, t.end)
	}
	from := start + warmup
	var lat []time.Duration
	for _, t := range txs {
		if t.end > from {
			lat = append(lat, t.latency)
		}
	}
	if len(lat) == 0 || last <= from {
		b.Fatalf("pgbench ran %s, not past its warm-up", last-start)
	}
	slices.Sort(lat)
	return pgbenchWindowResult{all: len(txs), counted: len(lat), pgbenchResult: pgbenchResult{
		tps: float64(len(lat)) / (last - from).Seconds(), p50: percentile(lat, 50), p99: percentile(lat, 99)}}
}

// pgCounters are PostgreSQL's counters a run is measured with. The WAL
// figures and the transaction ids are the whole cluster's: while a
// benchmark runs, nothing else uses its cluster.
type pgCounters struct {
	commits     int64 // pg_stat_database.xact_commit of the service's database
	peerCommits int64 // of the peer's database (0 without a peer)
	xid         int64 // transaction ids assigned: write transactions
	walSync     int64 // pg_stat_wal.wal_sync: WAL flushes to disk (fsync or fdatasync)
	walWrite    int64 // pg_stat_wal.wal_write: WAL buffer writes
}

func (c pgCounters) sub(d pgCounters) pgCounters {
	return pgCounters{commits: c.commits - d.commits, peerCommits: c.peerCommits - d.peerCommits,
		xid: c.xid - d.xid, walSync: c.walSync - d.walSync, walWrite: c.walWrite - d.walWrite}
}

// counters reads PostgreSQL's counters; with settle, it waits
// benchStatsSettle first, so that every backend's counts have reached the
// statistics.
func (e *benchEnv) counters(b *testing.B, settle bool) pgCounters {
	b.Helper()
	if settle {
		time.Sleep(benchStatsSettle)
	}
	peerDB := ""
	if e.peer != nil {
		peerDB = e.peer.dbName
	}
	var c pgCounters
	err := e.pool.QueryRow(context.Background(), `
		SELECT coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), 0),
			coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0),
			pg_snapshot_xmax(pg_current_snapshot())::text::bigint, w.wal_sync, w.wal_write
		FROM pg_stat_wal w`, peerDB).Scan(&c.commits, &c.peerCommits, &c.xid, &c.walSync, &c.walWrite)
	if err != nil {
		b.Fatalf("read PostgreSQL's counters: %v", err)
	}
	return c
}

// wantStats says whether the run about to start is measured with
// PostgreSQL's counters: only when it is expected to last at least half
// the -benchtime (from the rate of the scenario's previous run), so the
// waits (benchStatsSettle) are spent on the runs that are reported, not
// on the short runs by which the testing package sizes them.
func (e *benchEnv) wantStats(b *testing.B) bool {
	if b.N <= 1 || !e.countsCommits() {
		return false
	}
	bt := flag.Lookup("test.benchtime")
	if bt == nil {
		return true
	}
	v := bt.Value.String()
	if strings.HasSuffix(v, "x") {
		return true // a fixed count: this run is reported
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return true
	}
	e.ratesMu.Lock()
	rate := e.rates[b.Name()]
	e.ratesMu.Unlock()
	return rate > 0 && float64(b.N)/rate >= d.Seconds()/2
}

// countsCommits says whether the benchmark reads PostgreSQL's counters:
// on the durable cluster, where commits cost flushes, and not when pinned
// (BenchmarkServePinned is about CPU), so that `make bench` is not spent
// waiting for statistics.
func (e *benchEnv) countsCommits() bool { return e.opts.durable && !e.opts.pinned }

// ran records the rate of the scenario's run, for wantStats.
func (e *benchEnv) ran(b *testing.B, r loadResult) {
	e.ratesMu.Lock()
	defer e.ratesMu.Unlock()
	if e.rates == nil {
		e.rates = map[string]float64{}
	}
	e.rates[b.Name()] = r.perSecond()
}
