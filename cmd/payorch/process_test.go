package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// payorchBinary builds the real binary once per test binary (tests and
// benchmarks share it).
func payorchBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "payorch-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "payorch")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// server is one `payorch serve` process.
type server struct {
	cmd  *exec.Cmd
	base string
	logs *testkit.SyncBuffer
}

// stop ends the process as a deployment would (SIGTERM) and waits until
// it exits cleanly: its last spans flushed, its log complete.
func (srv *server) stop(t *testing.T) {
	t.Helper()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// startServe runs `payorch serve` with env on a free loopback port, as a
// test deployment (PAYORCH_ENVIRONMENT=test, unless env says otherwise),
// and waits until /readyz answers 200.
func startServe(t *testing.T, env map[string]string) *server {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(payorchBinary(t), "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PAYORCH_LOG_LEVEL=info", "PAYORCH_RATE_LIMIT=0", "PAYORCH_ENVIRONMENT=test"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, base: "http://127.0.0.1:" + strconv.Itoa(port), logs: logs}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if t.Failed() {
			t.Logf("payorch serve %s logs:\n%s", s.base, tail(logs.String(), 4000))
		}
	})
	if err := testkit.Poll(60*time.Second, func() (bool, error) {
		res, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false, err
		}
		res.Body.Close()
		return res.StatusCode == 200, nil
	}); err != nil {
		t.Fatalf("payorch serve did not become ready (%v):\n%s", err, logs.String())
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

type answer struct {
	status     int
	body       []byte
	retryAfter string
	replayed   bool
	err        error
}

func authorize(base, apiKey, idemKey, body string) answer {
	req, _ := http.NewRequest("POST", base+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", idemKey)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: b, retryAfter: res.Header.Get("Retry-After"),
		replayed: res.Header.Get("Idempotent-Replayed") == "true", err: err}
}

// world is one database, one fake provider on loopback, and a merchant.
type world struct {
	dbURL  string
	pool   *pgxpool.Pool
	fake   *fake.Running
	fc     *fake.Client
	tenant int64
	key    string
}

func newWorld(t *testing.T, dbURL string) *world {
	t.Helper()
	fr, err := fake.Start("127.0.0.1:0", fake.Config{TimeoutHang: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	pool := pgtest.Pool(t, dbURL)
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool})
	tenant, _, key, err := svc.CreateTenant(context.Background(), "Acme")
	if err != nil {
		t.Fatal(err)
	}
	return &world{dbURL: dbURL, pool: pool, fake: fr, fc: fr.Client(&http.Client{}), tenant: tenant.ID, key: key}
}

func (w *world) env(extra map[string]string) map[string]string {
	env := map[string]string{"DATABASE_URL": w.dbURL, "PAYORCH_FAKE_URL": w.fake.URL(), "PAYORCH_FAKE_TOKEN": w.fake.Token(),
		"PAYORCH_ENVIRONMENT": "test", "PAYORCH_RESOLVER_INTERVAL": "0"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func (w *world) providerAuthorizations(t *testing.T, clientKey string) []fake.Operation {
	t.Helper()
	ops, err := w.fc.Operations(context.Background(), providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, clientKey))
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func (w *world) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStormOverThreeServeProcesses(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	servers := []*server{startServe(t, w.env(nil)), startServe(t, w.env(nil)), startServe(t, w.env(nil))}
	const key = "storm-3"
	body := `{"amount_minor":4200,"currency":"GBP"}`
	if err := w.fc.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency, LatencyMS: 400,
		IdempotencyKey: providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, key)}); err != nil {
		t.Fatal(err)
	}
	answers := make([]answer, 100)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = authorize(servers[i%3].base, w.key, key, body)
		}()
	}
	wg.Wait()
	final := authorize(servers[0].base, w.key, key, body)
	if final.status != 201 || !final.replayed {
		t.Fatalf("final retry %d replayed=%v %s", final.status, final.replayed, final.body)
	}
	created, inUse := 0, 0
	for _, a := range answers {
		switch {
		case a.err != nil:
			t.Fatalf("request failed: %v", a.err)
		case a.status == 201:
			created++
			if !bytes.Equal(a.body, final.body) {
				t.Fatalf("201 bodies differ:\n%s\n%s", a.body, final.body)
			}
		case a.status == 409 && strings.Contains(string(a.body), "idempotency_key_in_use") && a.retryAfter != "":
			inUse++
		default:
			t.Fatalf("unexpected answer %d %s", a.status, a.body)
		}
	}
	if created == 0 || inUse == 0 {
		t.Fatalf("created %d in_use %d: no collision happened", created, inUse)
	}
	if ops := w.providerAuthorizations(t, key); len(ops) != 1 {
		t.Fatalf("provider executed %d authorizations across three instances, want 1", len(ops))
	}
	if n := w.count(t, `SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("%d payment rows", n)
	}
}

// crashAfterProviderCall starts an authorization on a fresh serve process,
// waits until the provider has executed it (its answer held back by a
// fault), then SIGKILLs the process: the provider holds the money, the key
// is claimed by a dead owner, the payment is pending.
func crashAfterProviderCall(t *testing.T, w *world, key, body string, env map[string]string) {
	t.Helper()
	victim := startServe(t, w.env(env))
	if err := w.fc.InjectFault(context.Background(), fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1,
		IdempotencyKey: providers.ForwardedKey(w.tenant, orchestrator.OpAuthorize, key)}); err != nil {
		t.Fatal(err)
	}
	go authorize(victim.base, w.key, key, body) // never answered
	testkit.WaitFor(t, 10*time.Second, "the provider executed the authorization",
		testkit.Until(func() bool { return len(w.providerAuthorizations(t, key)) > 0 }))
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = victim.cmd.Process.Wait()
	var status string
	if err := w.pool.QueryRow(context.Background(), `SELECT status FROM payments WHERE idempotency_key = $1`, key).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("after the crash the payment is %q (%v), want pending", status, err)
	}
}

func TestCrashedOwner(t *testing.T) {
	t.Parallel()
	// A short lease so the test does not wait long; the provider timeout
	// is longer than the kill takes.
	crashEnv := map[string]string{"PAYORCH_PROVIDER_TIMEOUT": "3s", "PAYORCH_IDEMPOTENCY_LEASE": "6s"}
	body := `{"amount_minor":1500,"currency":"EUR"}`

	t.Run("RetryAfterTheLeaseCompletesItWithOneProviderAuthorization", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, pgtest.URL(t))
		const key = "crash-retry"
		crashAfterProviderCall(t, w, key, body, crashEnv)
		survivor := startServe(t, w.env(crashEnv))
		a := authorize(survivor.base, w.key, key, body)
		if a.status != 409 || !strings.Contains(string(a.body), "idempotency_key_in_use") {
			t.Fatalf("retry within the dead owner's lease: %d %s", a.status, a.body)
		}
		testkit.WaitFor(t, 20*time.Second, "the retry completed once the dead owner's lease ended", func() (bool, error) {
			a = authorize(survivor.base, w.key, key, body)
			return a.status == 201, fmt.Errorf("last answer %d %s", a.status, a.body)
		})
		ops := w.providerAuthorizations(t, key)
		var p struct {
			Status      string `json:"status"`
			ProviderRef string `json:"provider_ref"`
		}
		_ = json.Unmarshal(a.body, &p)
		if len(ops) != 1 || p.Status != "authorized" || p.ProviderRef != ops[0].Ref {
			t.Fatalf("after takeover: %s; provider ops %+v", a.body, ops)
		}
		if n := w.count(t, `SELECT takeovers FROM idempotency_keys WHERE key = $1`, key); n != 1 {
			t.Fatalf("takeovers = %d", n)
		}
	})

	t.Run("TheResolverSettlesIt", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, pgtest.URL(t))
		const key = "crash-resolve"
		crashAfterProviderCall(t, w, key, body, crashEnv)
		var out bytes.Buffer
		env := w.env(map[string]string{"PAYORCH_LOG_LEVEL": "error"})
		if err := run(context.Background(), []string{"resolve", "--min-age", "0s"}, &out, envOf(env)); err != nil {
			t.Fatal(err)
		}
		var st orchestrator.ResolveStats
		if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Settled != 1 {
			t.Fatalf("resolve printed %s (%v)", out.String(), err)
		}
		var status, ref string
		if err := w.pool.QueryRow(context.Background(), `SELECT status, provider_ref FROM payments WHERE idempotency_key = $1`, key).Scan(&status, &ref); err != nil {
			t.Fatal(err)
		}
		ops := w.providerAuthorizations(t, key)
		if status != "authorized" || len(ops) != 1 || ref != ops[0].Ref {
			t.Fatalf("resolved payment %s %s; provider ops %+v", status, ref, ops)
		}
		// No retry at all: the reference was saved before the confirmation,
		// so one lookup settled it.
		var calls []string
		rows, err := w.pool.Query(context.Background(), `SELECT e.operation FROM payment_events e JOIN payments p ON p.id = e.payment_id
			WHERE p.idempotency_key = $1 AND e.type = 'provider_call' ORDER BY e.id`, key)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var op string
			if err := rows.Scan(&op); err != nil {
				t.Fatal(err)
			}
			calls = append(calls, op)
		}
		if strings.Join(calls, ",") != "lookup" {
			t.Fatalf("provider calls recorded %v, want just the resolver's lookup", calls)
		}
	})
}
