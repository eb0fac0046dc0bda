package reconcile_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// dayN is how many payments the day of BenchmarkReconcileDay has, and
// dayMoney whether its provider reports their money (go test -run '^$'
// -bench ReconcileDay ./reconcile/ -args -day-n 50000 -day-money=false
// measures a smaller day, without settlement).
var (
	dayN     = flag.Int("day-n", 1_000_000, "payments of BenchmarkReconcileDay's day")
	dayMoney = flag.Bool("day-money", true, "BenchmarkReconcileDay's provider reports its money (settlement)")
)

// BenchmarkReconcileDay reconciles one day of 1,000,000 captured payments
// against the fake provider's report of the same day, streamed over
// loopback HTTP from `payorch fakeprovider` running as its own process (so
// its holds do not count against the reconciler), and the whole of
// settlement (seedMoney): the day's million charges fee-checked against
// the connector's schedule (the fake's own fees), the day's payouts with
// the million charges of D − 2 they pay as items, those same charges as
// the late stream (payout terms T+2, no grace) with a million captures of
// ours to find each one's charge, and the bank step over a statement;
// one drift is planted per category, and the run must find exactly those.
// It reports the run's wall time and its phases (settlement's stage, link
// and judge, and the bank step, within them), the peak resident memory of
// this process during the run (VmHWM, reset before the run) and the peak
// growth of the Go heap.
func BenchmarkReconcileDay(b *testing.B) {
	n := *dayN
	clk := testkit.NewClock(dayStart.Add(10 * time.Hour))
	fakeURL, fakePID := startFakeProcess(b)
	e := newEnvWith(b, clk, fake.NewClient(fakeURL, &http.Client{}).WithToken(benchFakeToken))
	phases := &phaseRecorder{}
	var prov providers.Provider = e.fc
	if !*dayMoney {
		prov = reportOnly{e.fc}
	}
	e.rec = reconcile.New(reconcile.Config{Pool: e.pool, Providers: map[string]providers.Provider{"fake": prov},
		Clock: clk.Now, Logger: slog.New(phases)})
	seedDay(b, e, n)
	want := []string{"amount_mismatch/captured"}
	if *dayMoney {
		seedMoney(b, e, n)
		want = append(want, benchMoneyFindings...)
		slices.Sort(want)
	}
	if _, err := e.rec.SetFeeSchedule(context.Background(), "fake", benchMoneyTerms(), "bench"); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		resetPeakRSS(b)
		peak := watchHeap()
		cpu := cpuClocks(b, e, fakePID)
		start := time.Now()
		run, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerCLI, "bench")
		elapsed := time.Since(start)
		growth := peak()
		for name, v := range cpu() {
			b.ReportMetric(v, name)
		}
		if err != nil {
			b.Fatal(err)
		}
		if run.LocalCount != int64(n) || run.MatchedCount != int64(n) || run.DiscrepancyCount != int64(len(want)) ||
			*dayMoney && (run.Settlement["EUR"] == nil || run.Settlement["EUR"].ChargeCount != int64(n)) {
			b.Fatalf("run %+v", run)
		}
		ds, _, err := e.rec.ListDiscrepancies(ctx, reconcile.DiscrepancyFilter{RunID: run.ID, Limit: 1000})
		if got := categories(ds); err != nil || got != strings.Join(want, ",") {
			b.Fatalf("discrepancies %s (%v), want %s", got, err, strings.Join(want, ","))
		}
		b.ReportMetric(elapsed.Seconds(), "s/run")
		b.ReportMetric(float64(peakRSS(b))/(1<<20), "peak_rss_MiB")
		b.ReportMetric(float64(growth)/(1<<20), "peak_heap_growth_MiB")
		b.ReportMetric(float64(n)/elapsed.Seconds(), "payments/s")
		for name, v := range phases.last() {
			b.ReportMetric(v, name)
		}
	}
}

// rerunN is how many discrepancies the day of BenchmarkReconcileRerun
// has (go test -run '^$' -bench ReconcileRerun ./reconcile/ -args
// -rerun-n 15000 measures another size).
var rerunN = flag.Int("rerun-n", 100_000, "discrepancies of BenchmarkReconcileRerun's day")

// BenchmarkReconcileRerun reconciles a day of 100,000 payments that each
// disagree with the provider's report (100,000 discrepancies), then
// re-runs it, which compares every finding with the first run's. The
// discrepancies table's statistics predate both runs, as they do on a big
// history table between two of autovacuum's analyzes: the planner knows
// nothing of the two runs. It reports the first run's wall time, the
// re-run's, and the re-run's over the first's (the aim: at most 2). Each
// iteration reconciles a fresh database, seeded outside the timer.
func BenchmarkReconcileRerun(b *testing.B) {
	n := *rerunN
	ctx := context.Background()
	var first, rerun time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b, fake.Config{})
		seedStaleStatistics(b, e)
		seedDayOff(b, e, n, func(int) bool { return true })
		b.StartTimer()
		start := time.Now()
		v1, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerCLI, "bench")
		first += time.Since(start)
		if err != nil || v1.DiscrepancyCount != int64(n) {
			b.Fatalf("first run %+v %v", v1, err)
		}
		start = time.Now()
		v2, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerCLI, "bench")
		rerun += time.Since(start)
		if err != nil || v2.Diff.StillOpen != int64(n) || v2.Diff.New != 0 || v2.Diff.Gone != 0 {
			b.Fatalf("re-run %+v %v", v2, err)
		}
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "s/first-run")
	b.ReportMetric(rerun.Seconds()/float64(b.N), "s/re-run")
	b.ReportMetric(rerun.Seconds()/first.Seconds(), "re-run/first-run")
	b.ReportMetric(0, "ns/op") // the op is two runs of different cost: see the metrics above
}

// phaseRecorder is a slog handler keeping the attributes of the last
// "reconciliation phases" record.
type phaseRecorder struct {
	mu     sync.Mutex
	phases map[string]float64
}

func (p *phaseRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (p *phaseRecorder) WithAttrs([]slog.Attr) slog.Handler       { return p }
func (p *phaseRecorder) WithGroup(string) slog.Handler            { return p }
func (p *phaseRecorder) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "reconciliation phases" {
		return nil
	}
	m := map[string]float64{}
	r.Attrs(func(a slog.Attr) bool {
		if strings.HasSuffix(a.Key, "_s") {
			m[a.Key] = a.Value.Float64()
		}
		return true
	})
	p.mu.Lock()
	p.phases = m
	p.mu.Unlock()
	return nil
}

func (p *phaseRecorder) last() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phases
}

// benchFakeToken is the bearer token the benchmark's fake provider is
// started with.
const benchFakeToken = "bench"

// startFakeProcess builds payorch and runs `payorch fakeprovider` on a
// loopback port, with benchFakeToken; it returns the base URL and the
// process id.
func startFakeProcess(b *testing.B) (string, int) {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "payorch")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/payorch").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "fakeprovider", "--listen", addr)
	cmd.Env = []string{"PAYORCH_LOG_LEVEL=error", "PAYORCH_FAKE_TOKEN=" + benchFakeToken, "PATH=" + os.Getenv("PATH")}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	url := "http://" + addr
	testkit.WaitFor(b, 30*time.Second, "the fake provider to start", func() (bool, error) {
		req, _ := http.NewRequest(http.MethodGet, url+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer "+benchFakeToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Errorf("healthz %d", res.StatusCode)
	})
	return url, cmd.Process.Pid
}

// resetPeakRSS resets this process's VmHWM (Linux).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("reset peak RSS: %v", err)
	}
}

// peakRSS reads this process's VmHWM in bytes (Linux).
func peakRSS(b *testing.B) uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// watchHeap samples the live heap every 10ms until the returned function
// is called, which returns the peak growth over the starting value.
func watchHeap() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var (
		mu   sync.Mutex
		max  = base
		stop = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v := read(); v > max {
					mu.Lock()
					max = v
					mu.Unlock()
				}
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		if max < base {
			return 0
		}
		return max - base
	}
}

// cpuClocks starts counting the CPU time (user and system) of this
// process, of the fake provider's (pid fake) and of the database's
// (every process of e's PostgreSQL server: the run's backend among
// them); the function it returns reports each one's since, in seconds
// (cpu_self_s, cpu_fake_s, cpu_db_s). On a machine shared with other
// work the run's wall time varies with the load; the CPU it took varies
// far less.
func cpuClocks(b *testing.B, e *env, fake int) func() map[string]float64 {
	var backend int
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	postmaster := procStat(b, backend).ppid
	dbCPU := func() float64 {
		var sum float64
		ents, _ := os.ReadDir("/proc")
		for _, ent := range ents {
			pid, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			if st, ok := readProcStat(pid); ok && (pid == postmaster || st.ppid == postmaster) {
				sum += st.cpu
			}
		}
		return sum
	}
	self0, fake0, db0 := procStat(b, os.Getpid()).cpu, procStat(b, fake).cpu, dbCPU()
	return func() map[string]float64 {
		return map[string]float64{"cpu_self_s": procStat(b, os.Getpid()).cpu - self0,
			"cpu_fake_s": procStat(b, fake).cpu - fake0, "cpu_db_s": dbCPU() - db0}
	}
}

// procStatus is what cpuClocks reads of a process: its parent and the CPU
// time it took so far, in seconds.
type procStatus struct {
	ppid int
	cpu  float64
}

func procStat(b *testing.B, pid int) procStatus {
	st, ok := readProcStat(pid)
	if !ok {
		b.Fatalf("no /proc/%d/stat", pid)
	}
	return st
}

// readProcStat reads /proc/pid/stat (Linux): the fields after the
// command's closing parenthesis are state, ppid, … utime (14th), stime
// (15th), in clock ticks (100 a second).
func readProcStat(pid int) (procStatus, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStatus{}, false
	}
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return procStatus{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return procStatus{ppid: ppid, cpu: (utime + stime) / 100}, true
}
