package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
)

// The reference peer: the Go service of the article the project started
// from (idempotency keys in PostgreSQL with lib/pq, four autocommit
// statements per new request, no provider call). It lives outside the
// project, in its own module; BenchmarkServe builds it from there (never
// copied in), runs it on a database of its own on the same cluster as the
// service, and loads it with the same generator.
const (
	// benchPeerEnv names the variable that points at the peer's folder.
	benchPeerEnv = "PAYORCH_BENCH_PEER"
	// benchPeerDir is the peer's folder when benchPeerEnv is unset,
	// relative to this package: ../shared/peers/seed-example next to the
	// repository.
	benchPeerDir = "../../../shared/peers/seed-example"
	// benchPeerBody is the body the peer's README gives for its POST
	// /v1/payments (the same shape as benchBody; it takes no
	// authentication).
	benchPeerBody = `{"amount_minor":19900,"currency":"RUB"}`
)

// benchPeer is the running reference peer.
type benchPeer struct {
	dir         string // its source folder
	dbURL       string // its own database, on the benchmark's cluster
	dbName      string
	floorScript string // its floor.sql: pgbench's two-transaction floor
	base        string
	cmd         *exec.Cmd
	logs        *testkit.SyncBuffer

	// newRate and replayRate are the req/s of the last run of
	// Peer/NewAuthorize and Peer/Replay, for the service's ratios to
	// them.
	newRate, replayRate float64

	replayOnce   sync.Once
	replayKeys   []string
	replayBodies [][]byte
}

// peerDir is the peer's folder: $PAYORCH_BENCH_PEER or benchPeerDir.
func peerDir(b *testing.B) string {
	b.Helper()
	dir := os.Getenv(benchPeerEnv)
	if dir == "" {
		dir = benchPeerDir
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "go.mod")); err != nil {
		b.Fatalf("the reference peer is not at %s (set %s to its folder): %v", abs, benchPeerEnv, err)
	}
	return abs
}

// startPeer builds the peer into a temporary folder (go build in its own
// folder and module), creates its database on e's cluster with its
// schema.sql, starts it on a loopback port and warms it up as e was.
func startPeer(b *testing.B, e *benchEnv) *benchPeer {
	b.Helper()
	p := &benchPeer{dir: peerDir(b), logs: &testkit.SyncBuffer{}}
	p.floorScript = filepath.Join(p.dir, "floor.sql")
	bin := filepath.Join(b.TempDir(), "seedex")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = p.dir
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the reference peer in %s: %v\n%s", p.dir, err, out)
	}

	if e.opts.durable {
		p.dbURL = pgtest.DurableEmptyURL(b)
	} else {
		p.dbURL = pgtest.EmptyURL(b)
	}
	u, err := url.Parse(p.dbURL)
	if err != nil {
		b.Fatal(err)
	}
	p.dbName = strings.TrimPrefix(u.Path, "/")
	schema, err := os.ReadFile(filepath.Join(p.dir, "schema.sql"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dbURL)
	if err != nil {
		b.Fatal(err)
	}
	// Without arguments, Exec sends the file in one simple query: every
	// statement of it, the function body's $$ quoting included.
	_, err = conn.Exec(ctx, string(schema))
	conn.Close(ctx)
	if err != nil {
		b.Fatalf("apply the peer's schema.sql: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p.cmd = e.command(bin)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + p.dbURL, "ADDR=" + addr}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
		if b.Failed() {
			b.Logf("reference peer logs:\n%s", tail(p.logs.String(), 4000))
		}
	})
	p.base = "http://" + addr
	// It has no health endpoint: a GET of its one route answers (400, no
	// key) once it listens.
	testkit.WaitFor(b, 30*time.Second, "the reference peer to start", func() (bool, error) {
		res, err := e.client.Get(p.base + "/v1/payments")
		if err != nil {
			return false, fmt.Errorf("%v\n%s", err, p.logs.String())
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return true, nil
	})
	e.peer = p // the load generator reads its CPU from here
	e.load(b, benchClients, benchWarmup, false, func(i int) error { return e.peerNewKey(fmt.Sprintf("warmup-%d", i)) })
	analyze, err := pgx.Connect(ctx, p.dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer analyze.Close(ctx)
	if _, err := analyze.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return p
}

// peerPost sends one keyed POST /v1/payments to the peer.
func (e *benchEnv) peerPost(key string) (benchAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, e.peer.base+"/v1/payments", strings.NewReader(benchPeerBody))
	if err != nil {
		return benchAnswer{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := e.client.Do(req)
	if err != nil {
		return benchAnswer{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return benchAnswer{status: res.StatusCode, body: body}, err
}

// peerNewKey sends the peer a key never used before: it answers 200 with
// the authorized payment.
func (e *benchEnv) peerNewKey(key string) error {
	a, err := e.peerPost(key)
	if err != nil {
		return err
	}
	if a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"status":"authorized"`)) {
		return fmt.Errorf("peer answered %d: %s", a.status, a.body)
	}
	return nil
}

// peerNew is NewAuthorize against the peer.
func (e *benchEnv) peerNew(b *testing.B) {
	run := e.run.Add(1)
	res := e.load(b, benchClients, 0, e.wantStats(b), func(i int) error {
		return e.peerNewKey(fmt.Sprintf("new-%d-%d", run, i))
	})
	res.report(b, true)
	e.ran(b, res)
	e.peer.newRate = res.perSecond()
}

// peerReplay is Replay against the peer: benchReplayKeys keys answered
// once (not timed), then replayed round robin by benchClients clients;
// every answer must be the stored one, byte for byte (the peer marks no
// replay).
func (e *benchEnv) peerReplay(b *testing.B) {
	p := e.peer
	p.replayOnce.Do(func() {
		for k := range benchReplayKeys {
			key := fmt.Sprintf("replay-%d", k)
			a, err := e.peerPost(key)
			if err != nil || a.status != http.StatusOK {
				b.Fatalf("peer %s: %d %v %s", key, a.status, err, a.body)
			}
			p.replayKeys = append(p.replayKeys, key)
			p.replayBodies = append(p.replayBodies, a.body)
		}
	})
	if len(p.replayKeys) != benchReplayKeys {
		b.Fatal("peer replay keys were not set up")
	}
	res := e.load(b, benchClients, 0, e.wantStats(b), func(i int) error {
		k := i % benchReplayKeys
		a, err := e.peerPost(p.replayKeys[k])
		if err != nil {
			return err
		}
		if a.status != http.StatusOK || !bytes.Equal(a.body, p.replayBodies[k]) {
			return fmt.Errorf("peer replay of %s answered %d: %s, first answer %s", p.replayKeys[k], a.status, a.body, p.replayBodies[k])
		}
		return nil
	})
	res.report(b, true)
	e.ran(b, res)
	p.replayRate = res.perSecond()
}
