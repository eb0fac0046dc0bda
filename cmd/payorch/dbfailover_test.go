package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgautofailover"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/migrations"
)

// TestDatabaseFailover runs two `payorch serve` processes on a real
// pg_auto_failover formation (monitor, primary, two standbys,
// number_sync_standbys 1: every commit acknowledged is on a standby, and
// the election promotes the most advanced one) whose DATABASE_URL names
// every node with target_session_attrs=read-write,
// under a load of new authorizations (some declined), captures and replays,
// through (a) `pg_autoctl perform failover`, (b) a SIGKILL of the
// primary's postmaster (its keeper restarts it, or the monitor fails over,
// whichever comes first) and (c) the loss of the
// primary's node, keeper and PostgreSQL (the monitor promotes a
// standby, which keeps the other as its synchronous standby). Neither server is restarted. Afterwards every
// answer a client got (201, 402, 200) is still there, replayed
// byte-identically by both instances, its payment in the state the client
// saw or a legal successor; every key made at most one provider hold
// (exactly one when acknowledged); no payment or operation is left
// pending once the resolver has passed; the key cache's listener came back
// after each fault. It logs the time from each fault to the first
// successful write.
func TestDatabaseFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	begin := time.Now()
	f := startFormation(t)
	t.Logf("formation up after %s", time.Since(begin).Round(time.Millisecond))
	dbURL := f.URL("payorch")
	if _, err := migrations.Apply(ctx, pgtest.Pool(t, dbURL), nil); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, dbURL)
	env := w.env(map[string]string{
		"PAYORCH_PROVIDER_TIMEOUT":  "2s",
		"PAYORCH_IDEMPOTENCY_LEASE": "4s",
		"PAYORCH_RESOLVER_INTERVAL": "1s",
		"PAYORCH_RESOLVER_MIN_AGE":  "2s",
		"PAYORCH_DB_MAX_CONNS":      "8",
		// No answer is stored unless a standby has it: not even when
		// pg_auto_failover lets the old primary replicate asynchronously
		// during a failover (migration 00015).
		"PAYORCH_REQUIRE_SYNC_STANDBY": "true",
	})
	servers := []*server{startServe(t, env), startServe(t, env)}
	stopWatch := watchFormation(t, f)
	defer stopWatch()
	const workers = 4
	load := startFailoverLoad(w, servers, workers)
	if err := load.progressed(2*workers, 60*time.Second); err != nil {
		load.stop()
		t.Fatalf("the load before the faults: %v", err)
	}

	var lost *pgautofailover.Node
	faults := []struct {
		name  string
		cause func() error
		// settled waits until the formation has a primary again; nil:
		// until it is stable, with both nodes.
		settled func() error
	}{
		{"PerformFailover", func() error {
			// PAYORCH_TEST_FREEZE_KEEPER=1: the old primary's keeper
			// stalls through the failover (its PostgreSQL runs on past
			// the standby's promotion and primary_demote_timeout).
			if os.Getenv("PAYORCH_TEST_FREEZE_KEEPER") != "" {
				p, err := f.Primary(ctx)
				if err != nil {
					return err
				}
				if err := f.FreezeKeeper(p, 45*time.Second); err != nil {
					return err
				}
			}
			return f.PerformFailover(ctx)
		}, nil},
		{"SIGKILLPrimaryPostmaster", func() error {
			p, err := f.Primary(ctx)
			if err != nil {
				return err
			}
			_, err = f.KillPostmaster(p)
			return err
		}, nil},
		// The primary's host dies: keeper and PostgreSQL. The monitor
		// fails over once it finds the node unhealthy and the old
		// primary's demotion timeout has passed (pg_auto_failover's
		// defaults: about 50 s here); the standby then runs alone, as
		// wait_primary, without synchronous replication.
		{"PrimaryNodeLost", func() error {
			p, err := f.Primary(ctx)
			if err != nil {
				return err
			}
			lost = p
			return f.KillNode(p)
		}, func() error {
			_, err := f.WaitPrimary(ctx, 90*time.Second, lost)
			return err
		}},
	}
	for i, fault := range faults {
		before, _ := f.Primary(ctx)
		at := time.Now()
		if err := fault.cause(); err != nil {
			load.stop()
			t.Fatalf("%s: %v", fault.name, err)
		}
		rec, ok := load.recovery(at, 90*time.Second)
		if !ok {
			load.stop()
			t.Fatalf("%s: no write failed, or none succeeded after one, within 90s of the fault (%d failed)", fault.name, rec.failed)
		}
		settled := fault.settled
		if settled == nil {
			settled = func() error { return settle(ctx, f) }
		}
		if err := settled(); err != nil {
			load.stop()
			t.Fatalf("%s: %v", fault.name, err)
		}
		after, err := f.Primary(ctx)
		if err != nil {
			load.stop()
			t.Fatal(err)
		}
		t.Logf("%s: primary %s → %s; fault to first successful write: %s (%d failed requests; at %s)", fault.name,
			before.Name, after.Name, rec.firstWrite.Round(time.Millisecond), rec.failed, time.Since(begin).Round(time.Millisecond))
		// The key cache's listener came back on every instance.
		for _, s := range servers {
			waitLogCount(t, s, "api key cache listener reconnected; cache on", i+1, 20*time.Second)
		}
		// The next fault meets a load that runs again.
		if err := load.progressed(workers, 60*time.Second); err != nil {
			load.stop()
			t.Fatalf("the load after %s: %v", fault.name, err)
		}
	}
	acked := load.stop()
	t.Logf("load stopped at %s", time.Since(begin).Round(time.Millisecond))
	for _, v := range load.violations {
		t.Error(v)
	}
	checkAcknowledged(t, w, servers, acked)
	// The resolver (every second, in both servers) settles anything left
	// pending by a request the faults cut short.
	testkit.WaitFor(t, 30*time.Second, "no payment or operation pending after the load", func() (bool, error) {
		p := w.count(t, `SELECT count(*) FROM payments WHERE status = 'pending'`)
		o := w.count(t, `SELECT count(*) FROM payment_operations WHERE status = 'pending'`)
		return p == 0 && o == 0, fmt.Errorf("%d payments and %d operations pending", p, o)
	})
	t.Logf("%d keys acknowledged (%d captured); checked at %s", len(acked), load.captures, time.Since(begin).Round(time.Millisecond))
}

// watchFormation samples the formation every 250 ms until stopped: each
// node's state at the monitor and, from the node itself, whether it is in
// recovery, its synchronous_standby_names, its WAL position and its
// standbys' replication state. When t fails, the samples are written to a
// file kept for the post-mortem (named in the log).
func watchFormation(t *testing.T, f *pgautofailover.Formation) (stop func()) {
	var (
		mu      sync.Mutex
		samples strings.Builder
		async   int // samples of a primary without synchronous replication
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	const q = `SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),
		current_setting('default_transaction_read_only'),
		coalesce(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn()::text || '/' || pg_last_wal_replay_lsn()::text
			ELSE pg_current_wal_flush_lsn()::text END, ''),
		coalesce((SELECT string_agg(application_name || ':' || sync_state || ':' || coalesce(flush_lsn::text, ''), ',')
			FROM pg_stat_replication), '')`
	wg.Go(func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			line := time.Now().UTC().Format("15:04:05.000")
			st, stErr := f.States(ctx)
			if stErr == nil {
				line += fmt.Sprintf(" monitor %v", st)
			}
			for _, n := range f.Nodes {
				conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=1", n.Port))
				if err != nil {
					line += " | " + n.Name + " down"
					continue
				}
				var rec bool
				var sync, ro, lsn, repl string
				err = conn.QueryRow(ctx, q).Scan(&rec, &sync, &ro, &lsn, &repl)
				conn.Close(ctx)
				line += fmt.Sprintf(" | %s recovery=%v sync=%q ro=%s lsn=%s repl=%s err=%v", n.Name, rec, sync, ro, lsn, repl, err)
				// A node the monitor holds for a primary with a standby
				// (state primary, reached) must commit synchronously.
				for _, s := range st {
					if err == nil && s.Name == n.Name && s.Reported == "primary" && s.Assigned == "primary" && !rec && sync == "" {
						mu.Lock()
						async++
						mu.Unlock()
						line += " ASYNC-PRIMARY"
					}
				}
			}
			cancel()
			mu.Lock()
			samples.WriteString(line + "\n")
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		mu.Lock()
		if async > 0 {
			t.Errorf("%d samples show a node in state primary with synchronous_standby_names empty", async)
		}
		mu.Unlock()
		if t.Failed() || os.Getenv("PAYORCH_TEST_KEEP_SAMPLES") != "" {
			path := filepath.Join(os.TempDir(), fmt.Sprintf("payorch-dbfailover-%d.txt", time.Now().Unix()))
			mu.Lock()
			_ = os.WriteFile(path, []byte(samples.String()), 0o644)
			mu.Unlock()
			t.Logf("formation samples kept in %s", path)
		}
	}
}

// settle waits until the formation is stable, every node in its
// assigned state, and still is in two rounds of reports every keeper made
// since (its PostgreSQL running): a crashed primary's keeper may restart
// it, or the monitor may fail over to a standby, and the monitor decides
// within its keepers' next reports. A round that finds the formation moving
// again starts the wait over.
func settle(ctx context.Context, f *pgautofailover.Formation) error {
	conn, err := pgx.Connect(ctx, f.MonitorURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	n := len(f.Nodes)
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if err := f.WaitStable(ctx, time.Until(deadline), n); err != nil {
			return err
		}
		var since time.Time
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
			return err
		}
		steady := true
		for round := 0; round < 2 && steady; round++ {
			var fresh, settled, primaries int
			var now time.Time
			err := testkit.Poll(30*time.Second, func() (bool, error) {
				err := conn.QueryRow(ctx, settledSQL, since).Scan(&fresh, &settled, &primaries, &now)
				steady = err == nil && settled == n && primaries == 1
				return err == nil && (fresh == n || !steady), err
			})
			if err != nil {
				return fmt.Errorf("the keepers' reports after the formation was stable: %d of %d: %w", fresh, n, err)
			}
			since = now
		}
		if steady {
			return nil
		}
	}
	return errors.New("the formation did not stay stable within 3 minutes")
}

// settledSQL counts, from the monitor, the nodes that reported after $1,
// those in their assigned state (primary, single or secondary) with their
// PostgreSQL running, and the primaries among them; and reads the
// monitor's clock, the start of the next round.
const settledSQL = `SELECT count(*) FILTER (WHERE reporttime > $1),
	count(*) FILTER (WHERE reportedstate = goalstate AND reportedpgisrunning
		AND reportedstate IN ('primary', 'single', 'secondary')),
	count(*) FILTER (WHERE reportedstate = goalstate AND reportedstate IN ('primary', 'single')),
	now()
	FROM pgautofailover.node`

// startFormation starts a monitor, a primary and two synchronous standbys
// (number_sync_standbys 1) with a payorch
// database, stopped and removed when t ends.
func startFormation(t *testing.T) *pgautofailover.Formation {
	t.Helper()
	dir, err := os.MkdirTemp("", "payorch-paf-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := pgautofailover.Start(ctx, pgautofailover.Config{Dir: dir, DBName: "payorch", Nodes: 3, NumberSyncStandbys: 1})
	if err != nil {
		logsOf(t, dir)
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = f.Stop(sctx)
		if t.Failed() {
			logsOf(t, dir)
			t.Logf("formation's folder kept: %s", dir) // the post-mortem needs its logs
			return
		}
		_ = os.RemoveAll(dir)
	})
	return f
}

// logsOf logs the tail of the formation's logs.
func logsOf(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		t.Logf("%s:\n%s", filepath.Base(l), tail(string(b), 3000))
	}
}

// waitLogCount waits until s has logged msg at least n times.
func waitLogCount(t *testing.T, s *server, msg string, n int, within time.Duration) {
	t.Helper()
	testkit.WaitFor(t, within, fmt.Sprintf("%s to log %q %d times", s.base, msg, n), func() (bool, error) {
		got := strings.Count(s.logs.String(), msg)
		return got >= n, fmt.Errorf("logged %d times", got)
	})
}

// ackedKey is what a client was finally told about one key: the
// authorization's answer, and the capture's when one was made.
type ackedKey struct {
	status  int
	body    []byte
	capture []byte // nil: not captured
}

// writeEvent is one attempt at a write (a new authorization or a capture).
type writeEvent struct {
	start, end time.Time
	ok, failed bool // 201/402/200; a 5xx or no answer
}

// failoverLoad is workers sending new authorizations (every fifth
// declined), capturing every other authorized payment and replaying a
// key already answered, each retrying a key until it gets a final answer.
type failoverLoad struct {
	mu         sync.Mutex
	acked      map[string]ackedKey
	events     []writeEvent
	violations []string
	captures   int
	done       chan struct{}
	wg         sync.WaitGroup
}

func startFailoverLoad(w *world, servers []*server, workers int) *failoverLoad {
	l := &failoverLoad{acked: map[string]ackedKey{}, done: make(chan struct{})}
	for i := range workers {
		l.wg.Go(func() { l.work(w, servers, i) })
	}
	return l
}

func (l *failoverLoad) stopped() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// record notes one write attempt.
func (l *failoverLoad) record(start time.Time, status int, err error, final bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, writeEvent{start: start, end: time.Now(), ok: final, failed: err != nil || status >= 500})
}

func (l *failoverLoad) work(w *world, servers []*server, worker int) {
	for i := 0; !l.stopped(); i++ {
		srv := servers[(worker+i)%len(servers)]
		key := fmt.Sprintf("dbfo-%d-%d", worker, i)
		body := `{"amount_minor":3000,"currency":"EUR"}`
		if i%5 == 4 {
			body = `{"amount_minor":3000,"currency":"EUR","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`
		}
		a, ok := l.untilFinal(func() answer { return authorize(srv.base, w.key, key, body) }, 201, 402)
		if !ok {
			l.violate("%s: no final answer to the authorization within 90s (last %d %s %v)", key, a.status, a.body, a.err)
			continue
		}
		k := ackedKey{status: a.status, body: a.body}
		if a.status == 201 && i%2 == 0 {
			var p struct{ ID string }
			_ = json.Unmarshal(a.body, &p)
			c, ok := l.untilFinal(func() answer {
				return post(servers[(worker+i+1)%len(servers)].base+"/v1/payments/"+p.ID+"/capture", w.key, "cap-"+key, `{}`)
			}, 200)
			if !ok {
				l.violate("%s: no final answer to the capture within 90s (last %d %s %v)", key, c.status, c.body, c.err)
			} else {
				k.capture = c.body
			}
		}
		// The client's pause between keys: the pace of a load that runs
		// for minutes (every key answered is checked at the end), not a
		// wait for anything.
		time.Sleep(20 * time.Millisecond)
		l.mu.Lock()
		l.acked[key] = k
		if k.capture != nil {
			l.captures++
		}
		l.mu.Unlock()
		// Replay an earlier key on the other instance: an answer must be
		// the same bytes (a failure is not an answer).
		if i > 0 {
			old := fmt.Sprintf("dbfo-%d-%d", worker, i/2)
			l.mu.Lock()
			prev, seen := l.acked[old]
			l.mu.Unlock()
			oldBody := `{"amount_minor":3000,"currency":"EUR"}`
			if (i/2)%5 == 4 {
				oldBody = `{"amount_minor":3000,"currency":"EUR","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`
			}
			r := authorize(servers[(worker+i+1)%len(servers)].base, w.key, old, oldBody)
			if seen && r.err == nil && r.status < 500 && (r.status != prev.status || !bytes.Equal(r.body, prev.body)) {
				l.violate("%s: replay %d %s differs from the answer %d %s", old, r.status, r.body, prev.status, prev.body)
			}
		}
	}
}

// untilFinal sends a write until its answer has one of the final statuses
// (retrying after a 5xx, which must be problem+json, a 409
// idempotency_key_in_use, a 202 pending when the provider was slow, or no
// answer), for up to 90s.
func (l *failoverLoad) untilFinal(send func() answer, final ...int) (answer, bool) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		start := time.Now()
		a := send()
		ok := a.err == nil && (a.status == final[0] || (len(final) > 1 && a.status == final[1]))
		l.record(start, a.status, a.err, ok)
		if ok {
			return a, true
		}
		if a.err == nil && a.status >= 500 && !bytes.Contains(a.body, []byte(`"type":"urn:payorch:problem:`)) {
			l.violate("a %d that is not problem+json: %s", a.status, a.body)
		}
		if a.err == nil && a.status < 500 && a.status != 409 && a.status != 202 {
			l.violate("unexpected answer %d %s", a.status, a.body)
			return a, false
		}
		if time.Now().After(deadline) {
			return a, false
		}
		// A client's pause before it retries: its pace, not a wait for
		// anything (recovery and progressed read what the retries find).
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *failoverLoad) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

// recoveryResult is how a fault went for the load.
type recoveryResult struct {
	firstWrite time.Duration // fault to the end of the first write that succeeded after one failed
	failed     int           // write attempts that failed after the fault
}

// recovery waits up to within for the load to write again after the fault
// at: the first write that succeeded having started after the first one
// that failed (a fault that makes no write fail is not seen: false).
func (l *failoverLoad) recovery(at time.Time, within time.Duration) (recoveryResult, bool) {
	var r recoveryResult
	err := testkit.Poll(time.Until(at.Add(within)), func() (bool, error) {
		var first time.Time
		r.failed, first = l.recovered(at)
		r.firstWrite = first.Sub(at)
		return !first.IsZero(), nil
	})
	if err != nil {
		return recoveryResult{failed: r.failed}, false
	}
	return r, true
}

// recovered counts the writes that failed after at, and finds the end of
// the first write that succeeded having started after the first that
// failed (zero: none yet).
func (l *failoverLoad) recovered(at time.Time) (failed int, first time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var firstFail time.Time
	for _, e := range l.events {
		if e.failed && e.end.After(at) {
			failed++
			if firstFail.IsZero() || e.end.Before(firstFail) {
				firstFail = e.end
			}
		}
	}
	for _, e := range l.events {
		if !firstFail.IsZero() && e.ok && e.start.After(firstFail) && (first.IsZero() || e.end.Before(first)) {
			first = e.end
		}
	}
	return failed, first
}

// progressed waits up to within until the clients have had final answers
// for n more keys than when it was called.
func (l *failoverLoad) progressed(n int, within time.Duration) error {
	l.mu.Lock()
	want := len(l.acked) + n
	l.mu.Unlock()
	return testkit.Poll(within, func() (bool, error) {
		l.mu.Lock()
		got, failed := len(l.acked), len(l.violations)
		l.mu.Unlock()
		return got >= want, fmt.Errorf("%d of %d keys answered (%d violations)", got, want, failed)
	})
}

// stop ends the load (each worker finishes its key) and returns what the
// clients were told.
func (l *failoverLoad) stop() map[string]ackedKey {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	l.wg.Wait()
	return l.acked
}

// post sends a keyed POST with a JSON body as the merchant.
func post(u, apiKey, idemKey, body string) answer {
	return request("POST", u, apiKey, idemKey, body)
}

// checkAcknowledged replays every acknowledged write on every instance
// (byte-identical, marked replayed), reads its payment (the state the
// client saw or a legal successor: nothing here moves a payment on by
// itself) and counts its provider holds (one).
func checkAcknowledged(t *testing.T, w *world, servers []*server, acked map[string]ackedKey) {
	t.Helper()
	for key, k := range acked {
		body := `{"amount_minor":3000,"currency":"EUR"}`
		if k.status == 402 {
			body = `{"amount_minor":3000,"currency":"EUR","payment_method":"pm_card_chargeDeclinedInsufficientFunds"}`
		}
		var p struct {
			ID        string `json:"id"`
			PaymentID string `json:"payment_id"`
		}
		_ = json.Unmarshal(k.body, &p)
		id := p.ID + p.PaymentID
		for _, s := range servers {
			r := authorize(s.base, w.key, key, body)
			if r.status != k.status || !r.replayed || !bytes.Equal(r.body, k.body) {
				t.Errorf("%s on %s: replay %d replayed=%v %s, acknowledged %d %s", key, s.base, r.status, r.replayed, r.body, k.status, k.body)
			}
			if k.capture != nil {
				c := post(s.base+"/v1/payments/"+id+"/capture", w.key, "cap-"+key, `{}`)
				if c.status != 200 || !c.replayed || !bytes.Equal(c.body, k.capture) {
					t.Errorf("%s on %s: capture replay %d %s, acknowledged %s", key, s.base, c.status, c.body, k.capture)
				}
			}
		}
		want := map[int]string{201: "authorized", 402: "failed"}[k.status]
		if k.capture != nil {
			want = "captured"
		}
		g := request("GET", servers[0].base+"/v1/payments/"+id, w.key, "", "")
		if g.status != 200 || !strings.Contains(string(g.body), `"status":"`+want+`"`) {
			t.Errorf("%s: payment %s is %d %s, want %s", key, id, g.status, g.body, want)
		}
		if ops := w.providerAuthorizations(t, key); len(ops) != 1 {
			t.Errorf("%s: %d provider authorizations, want 1", key, len(ops))
		}
	}
}

// request sends one request as apiKey (with idemKey when set, and body as
// JSON when set) and returns the answer.
func request(method, u, apiKey, idemKey, body string) answer {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: b, retryAfter: res.Header.Get("Retry-After"),
		replayed: res.Header.Get("Idempotent-Replayed") == "true", err: err}
}
