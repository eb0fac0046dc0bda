package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// TestBackofficeWorkNeverStarvesPayments is a finance-heavy attack on a real
// `payorch serve` with a small main pool (8) and the default back-office
// pool (4, so 2 runs at once): while merchants authorize payments, finance starts 25
// reconciliations of a big day at once (each storing over 5,000 findings,
// a batch, so a run that kept its pairing query open while storing them
// would need a second connection) and 20 clients ask for a CSV export of a
// finished run and never read it. Merchants must not notice: no request
// fails or times out, p99 stays under a second, /readyz stays 200; every
// run answers 202 at once and finishes succeeded; every stalled export
// completes once its client reads.
func TestBackofficeWorkNeverStarvesPayments(t *testing.T) {
	const (
		holds    = 20_000 // the 100,000 takes minutes on 2 CPUs; see seedBigDay
		runs     = 25
		stalled  = 20
		findings = (holds + 2) / 3 // every third hold's captured amount is off
	)
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	pool := pgtest.Pool(t, dbURL)
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool})
	tenant, _, merchant, err := svc.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	_, finance, err := svc.CreateAPIKey(ctx, orchestrator.RoleFinance, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	fakeURL := startFakeProvider(t)
	day := time.Now().UTC().AddDate(0, 0, -2).Truncate(24 * time.Hour)
	seedBigDay(t, pool, fake.NewClient(fakeURL, &http.Client{}).WithToken(backofficeFakeToken), tenant.ID, day, holds)

	srv := startServe(t, map[string]string{"DATABASE_URL": dbURL, "PAYORCH_FAKE_URL": fakeURL, "PAYORCH_FAKE_TOKEN": backofficeFakeToken,
		"PAYORCH_DB_MAX_CONNS": "8", "PAYORCH_BACKOFFICE_MAX_CONNS": "4", "PAYORCH_LOG_LEVEL": "warn",
		"PAYORCH_RESOLVER_INTERVAL": "0", "PAYORCH_RECONCILE_SCHEDULE": "off"})
	fin := &financeClient{t: t, base: srv.base, key: finance, day: day.Format(time.DateOnly)}

	// A finished run whose CSV the stalled clients ask for.
	first := fin.waitRuns([]int64{fin.start("first")}, time.Minute)[0]
	if first.Status != "succeeded" || first.DiscrepancyCount != findings {
		t.Fatalf("first run %+v, want succeeded with %d discrepancies", first, findings)
	}

	// Merchants: 4 clients, one authorization every 50 ms each.
	load := startMerchantLoad(srv.base, merchant, 4, 50*time.Millisecond)
	defer load.stop()

	exports := make([]*stalledExport, stalled)
	for i := range exports {
		exports[i] = openStalledExport(t, srv.base, finance, fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies", first.ID))
	}

	started := time.Now()
	ids := make([]int64, runs)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = fin.start(fmt.Sprintf("storm-%d", i))
		}()
	}
	wg.Wait()
	if d := time.Since(started); d > 5*time.Second {
		t.Errorf("starting %d runs took %v; each must answer 202 at once", runs, d)
	}
	for _, run := range fin.waitRuns(ids, 2*time.Minute) {
		if run.Status != "succeeded" || run.LocalCount != holds || run.DiscrepancyCount != findings || run.Error != nil {
			t.Errorf("run %+v, want succeeded with %d payments and %d discrepancies", run, holds, findings)
		}
	}
	stormTook := time.Since(started)
	res := load.stop()
	t.Logf("%d runs of %d holds with %d stalled exports: %v; merchants: %d requests, p50 %v, p99 %v, max %v, readyz %d checks",
		runs, holds, stalled, stormTook.Round(time.Millisecond), len(res.latencies), res.pct(0.50), res.pct(0.99), res.pct(1), res.readyz)
	if len(res.errors) > 0 {
		t.Errorf("%d merchant requests failed, first: %v", len(res.errors), res.errors[0])
	}
	if len(res.latencies) < 20 {
		t.Errorf("only %d merchant requests completed", len(res.latencies))
	}
	if p99 := res.pct(0.99); p99 > time.Second {
		t.Errorf("merchant p99 %v, want under 1s", p99)
	}
	if res.readyz == 0 || len(res.readyzBad) > 0 {
		t.Errorf("readyz: %d checks, bad answers %v", res.readyz, res.readyzBad)
	}

	// The exports were stalled (far more than the sockets buffer), and each
	// completes, whole, once its client reads.
	for i, e := range exports {
		lines := e.finish(t)
		if lines != findings+1 {
			t.Errorf("export %d: %d CSV lines, want %d", i, lines, findings+1)
		}
	}
}

// seedBigDay writes n captured payments of day straight into the payments
// table and the same holds into the fake provider, with every third
// captured amount one unit short at the provider.
func seedBigDay(t *testing.T, pool *pgxpool.Pool, fc *fake.Client, tenant int64, day time.Time, n int) {
	t.Helper()
	ctx := context.Background()
	ref := func(i int) string { return fmt.Sprintf("fh_big%08d", i) }
	id := func(i int) string { return orchestrator.PaymentID(tenant, fmt.Sprintf("big-%d", i)) }
	step := 24 * time.Hour / time.Duration(n+1)
	at := func(i int) time.Time { return day.Add(step * time.Duration(i+1)) }
	amount := func(i int) int64 { return int64(1000 + i%500) }
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"payments"},
		[]string{"tenant_id", "id", "idempotency_key", "request_hash", "field_hashes", "status", "amount_minor", "currency",
			"captured_minor", "provider", "provider_ref", "payment_method", "created_at", "updated_at"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			return []any{tenant, id(i), fmt.Sprintf("big-%d", i), []byte{0}, map[string]string{}, "captured",
				amount(i), "EUR", amount(i), "fake", ref(i), "pm_card_visa", at(i), at(i)}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var seq iter.Seq[fake.SeedHold] = func(yield func(fake.SeedHold) bool) {
		for i := range n {
			captured := amount(i)
			if i%3 == 0 {
				captured--
			}
			if !yield(fake.SeedHold{Ref: ref(i), PaymentID: id(i), TenantID: tenant, Status: providers.StatusCaptured,
				AmountMinor: amount(i), CapturedMinor: captured, Currency: "EUR", CreatedAt: at(i), UpdatedAt: at(i)}) {
				return
			}
		}
	}
	if got, err := fc.Seed(ctx, seq); err != nil || got != n {
		t.Fatalf("seeded %d holds (%v)", got, err)
	}
}

// backofficeFakeToken is the bearer token of the test's fake provider.
const backofficeFakeToken = "backoffice"

// startFakeProvider runs `payorch fakeprovider` as a process of its own on
// a loopback port (its report of the big day is not this test binary's
// work) and returns its base URL.
func startFakeProvider(t *testing.T) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(payorchBinary(t), "fakeprovider", "--listen", addr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PAYORCH_LOG_LEVEL=error", "PAYORCH_FAKE_TOKEN=" + backofficeFakeToken}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	url := "http://" + addr
	testkit.WaitFor(t, 30*time.Second, "the fake provider to start", func() (bool, error) {
		req, _ := http.NewRequest(http.MethodGet, url+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer "+backofficeFakeToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Errorf("healthz %d", res.StatusCode)
	})
	return url
}

type runSummary struct {
	ID               int64   `json:"id"`
	Status           string  `json:"status"`
	LocalCount       int64   `json:"local_count"`
	DiscrepancyCount int64   `json:"discrepancy_count"`
	Error            *string `json:"error"`
}

// financeClient starts and polls runs of one day over the API.
type financeClient struct {
	t         *testing.T
	base, key string
	day       string
}

func (f *financeClient) do(method, path, idemKey, body string) (int, []byte, error) {
	req, _ := http.NewRequest(method, f.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+f.key)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// start starts a run of the day and returns its id.
func (f *financeClient) start(key string) int64 {
	status, b, err := f.do("POST", "/v1/reconciliation/runs", key, `{"provider":"fake","date":"`+f.day+`"}`)
	var run runSummary
	if err != nil || status != http.StatusAccepted || json.Unmarshal(b, &run) != nil {
		f.t.Errorf("start run %s: %d %s %v", key, status, b, err)
	}
	return run.ID
}

// waitRuns polls the runs until none is running, or reports those still
// running (or unreadable) after within.
func (f *financeClient) waitRuns(ids []int64, within time.Duration) []runSummary {
	deadline := time.Now().Add(within)
	out := make([]runSummary, len(ids))
	late := 0
	for i, id := range ids {
		out[i] = runSummary{ID: id, Status: "unfinished"}
		err := testkit.Poll(time.Until(deadline), func() (bool, error) {
			status, b, err := f.do("GET", "/v1/reconciliation/runs/"+strconv.FormatInt(id, 10), "", "")
			if err == nil && status == http.StatusOK && json.Unmarshal(b, &out[i]) == nil && out[i].Status != "running" {
				return true, nil
			}
			return false, fmt.Errorf("%d %s %v", status, b, err)
		})
		if err != nil {
			f.t.Logf("run %d: %v", id, err)
			late = len(ids) - i
			break
		}
	}
	if late > 0 {
		f.t.Errorf("%d of %d runs unfinished after %v", late, len(ids), within)
	}
	return out
}

// merchantLoad authorizes payments from a few clients at a steady pace and
// checks /readyz, until stopped.
type merchantLoad struct {
	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	res      loadResults
}

type loadResults struct {
	latencies []time.Duration
	errors    []error
	readyz    int
	readyzBad []int
}

// pct is the q-quantile (nearest rank) of the latencies.
func (r loadResults) pct(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func startMerchantLoad(base, key string, clients int, every time.Duration) *merchantLoad {
	l := &merchantLoad{done: make(chan struct{})}
	hc := &http.Client{Timeout: 10 * time.Second}
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-l.done:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest("POST", base+"/v1/payments", strings.NewReader(`{"amount_minor":1000,"currency":"EUR"}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("load-%d-%d", c, n))
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				res, err := hc.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusCreated {
						err = fmt.Errorf("authorize: status %d", res.StatusCode)
					}
				}
				d := time.Since(start)
				l.mu.Lock()
				l.res.latencies = append(l.res.latencies, d)
				if err != nil {
					l.res.errors = append(l.res.errors, err)
				}
				l.mu.Unlock()
			}
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-tick.C:
			}
			status := 0
			if res, err := hc.Get(base + "/readyz"); err == nil {
				status = res.StatusCode
				res.Body.Close()
			}
			l.mu.Lock()
			l.res.readyz++
			if status != http.StatusOK {
				l.res.readyzBad = append(l.res.readyzBad, status)
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *merchantLoad) stop() loadResults {
	l.stopOnce.Do(func() { close(l.done) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}

// stalledExport is a client that asked for a CSV export, read the response
// head and then nothing, through a socket with a tiny receive buffer.
type stalledExport struct {
	conn net.Conn
	res  *http.Response
}

func openStalledExport(t *testing.T, base, key, path string) *stalledExport {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	addr := strings.TrimPrefix(base, "http://")
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/csv")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReaderSize(conn, 512), req)
	if err != nil {
		t.Fatalf("stalled export: %v", err)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("stalled export: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	return &stalledExport{conn: conn, res: res}
}

// finish reads the rest of the export and returns its number of lines.
func (e *stalledExport) finish(t *testing.T) int {
	t.Helper()
	_ = e.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	b, err := io.ReadAll(e.res.Body)
	if err != nil {
		t.Errorf("export cut after %d bytes: %v", len(b), err)
	}
	if len(b) < 512<<10 {
		t.Errorf("export of %d bytes: too small to have stalled the server", len(b))
	}
	return strings.Count(string(b), "\n")
}
