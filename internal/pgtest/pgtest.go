// Package pgtest gives tests a real, migrated PostgreSQL database of their
// own, with no set-up.
//
// When PAYORCH_TEST_DATABASE_URL is unset, the first test that asks for a
// database starts one throw-away cluster for the whole test binary (from the
// machine's PostgreSQL binaries, on a Unix socket in a temporary folder, so
// test binaries that `go test` runs in parallel never collide). Either way a
// template database is migrated once per binary and every test gets its own
// database cloned from it, dropped when the test ends. Main stops the cluster
// and removes its files when the binary exits.
//
// Tests never skip for lack of a database: if none can be had, they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgbouncer"
	"github.com/payorch/payorch/internal/pgcluster"
	"github.com/payorch/payorch/migrations"
)

// EnvURL names the variable that points the tests at an existing server
// (a URL whose user may create databases).
const EnvURL = "PAYORCH_TEST_DATABASE_URL"

var (
	mainCalled bool

	startOnce sync.Once
	startErr  error
	baseURL   *url.URL           // admin connection, database replaced per use
	cluster   *pgcluster.Cluster // nil when EnvURL is set
	clusterTo string             // its temporary folder
	prefix    string             // unique per test binary
	template  string

	createMu sync.Mutex // CREATE DATABASE … TEMPLATE needs the template idle

	// The durable cluster (DurableURL), and the durable cluster that
	// keeps statement statistics (DurableStatsURL), each started on first
	// use.
	durable      = &durableServer{}
	durableStats = &durableServer{extra: map[string]string{
		"shared_preload_libraries":          "pg_stat_statements",
		"pg_stat_statements.track":          "all",
		"pg_stat_statements.track_planning": "on",
		"pg_stat_statements.track_utility":  "off",
		"track_functions":                   "all",
	}}
)

// Main runs the tests of a package and then stops the cluster, if one was
// started. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// cleanups run after the tests, before the cluster stops.
func Main(m *testing.M, cleanups ...func()) {
	mainCalled = true
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	shutdown()
	os.Exit(code)
}

func start() error {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix = "t" + hex.EncodeToString(b)
	template = prefix + "_template"

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if raw := os.Getenv(EnvURL); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" {
			return fmt.Errorf("pgtest: %s must be a postgres:// URL", EnvURL)
		}
		baseURL = u
	} else {
		dir, err := os.MkdirTemp("", "payorch-pg-")
		if err != nil {
			return err
		}
		clusterTo = dir
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		c, err := pgcluster.Start(ctx, throwAway(dir))
		if err != nil {
			return err
		}
		cluster = c
		u, _ := url.Parse(c.ConnString("postgres"))
		baseURL = u
	}

	// Build the migrated template once.
	admin, err := pgx.Connect(ctx, urlFor("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create template: %w", err)
	}
	return migrate(ctx, urlFor(template))
}

// migrate applies every migration to the database at dbURL.
func migrate(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = migrations.Apply(ctx, pool, nil)
	return err
}

// throwAway configures a fast, non-durable cluster in dir.
func throwAway(dir string) pgcluster.Config {
	return pgcluster.Config{
		DataDir:   filepath.Join(dir, "data"),
		SocketDir: filepath.Join(dir, "run"),
		NoSync:    true,
		Settings: map[string]string{
			"fsync":              "off",
			"synchronous_commit": "off",
			"full_page_writes":   "off",
			"max_connections":    "300",
			"shared_buffers":     "128MB",
			"log_min_messages":   "warning",
			"log_line_prefix":    "%m [%p] %d ",
		},
	}
}

// NewCluster starts a cluster of t's own, for tests that restart or break
// the database server, with the migrations applied to its postgres
// database. It is stopped and removed when t ends.
func NewCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "payorch-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := throwAway(dir)
	// This cluster gets crashed on purpose: an acknowledged commit must
	// survive a server crash, as in production. (fsync may stay off: the
	// operating system does not crash, only PostgreSQL.)
	cfg.Settings["synchronous_commit"] = "on"
	c, err := pgcluster.Start(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: own cluster: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
		_ = os.RemoveAll(dir)
	})
	if err := migrate(ctx, c.ConnString("postgres")); err != nil {
		t.Fatalf("pgtest: migrate own cluster: %v", err)
	}
	return c
}

// NewStandby starts a streaming hot standby of primary (a cluster of
// NewCluster) for t: a copy made by pg_basebackup -R into a folder of its
// own, listening on its own Unix socket (port 5433, no TCP), that replays
// the primary's WAL as it comes and answers read-only queries. Its
// ConnString("postgres") reads the database NewCluster migrated. Tests
// pause its replay (SELECT pg_wal_replay_pause()) or Stop it to make it
// lag or vanish; it is stopped and removed when t ends.
func NewStandby(t testing.TB, primary *pgcluster.Cluster) *pgcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "payorch-pgs-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := throwAway(dir)
	cfg.Port = 5433
	// Queries on the standby are not cancelled for the vacuums it
	// replays (the primary keeps what they read).
	cfg.Settings["hot_standby_feedback"] = "on"
	c, err := pgcluster.StartStandby(ctx, primary, cfg)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: standby: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
		_ = os.RemoveAll(dir)
	})
	return c
}

func shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if bouncer != nil {
		_ = bouncer.Stop(ctx)
		_ = os.RemoveAll(bouncerTo)
	}
	for _, d := range []*durableServer{durable, durableStats} {
		if d.cluster != nil {
			_ = d.cluster.Stop(ctx)
			_ = os.RemoveAll(d.dir)
		}
	}
	if baseURL == nil {
		return
	}
	if cluster != nil {
		_ = cluster.Stop(ctx)
		_ = os.RemoveAll(clusterTo)
		return
	}
	// An external server: drop what this binary created.
	admin, err := pgx.Connect(ctx, urlFor("postgres"))
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", prefix+"%")
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, n := range names {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
}

func urlFor(db string) string {
	u := *baseURL
	u.Path = "/" + db
	return u.String()
}

func ensure(t testing.TB) {
	t.Helper()
	if !mainCalled {
		t.Fatal("pgtest: call pgtest.Main(m) from TestMain in this package")
	}
	startOnce.Do(func() { startErr = start() })
	if startErr != nil {
		t.Fatalf("pgtest: no database: %v", startErr)
	}
}

// newDatabase creates a database (a clone of the migrated template, or empty
// when migrated is false) that is dropped when t ends, and returns its URL.
func newDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	ensure(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	src := "template0"
	if migrated {
		src = template
	}
	admin, err := pgx.Connect(ctx, urlFor("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	createMu.Lock()
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{src}.Sanitize())
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, urlFor("postgres"))
		if err != nil {
			return // the cluster is going away with the binary anyway
		}
		defer admin.Close(ctx)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return urlFor(name)
}

// URL returns the URL of a new migrated database of t's own.
func URL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// EmptyURL returns the URL of a new database with no schema at all.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

// DB returns a pool on a new migrated database of t's own, closed when t
// ends.
func DB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, URL(t))
}

// Pool opens a pool on dbURL that is closed when t ends.
func Pool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// durableSettings configures a cluster in dir with PostgreSQL's durable
// defaults: fsync, synchronous_commit and full_page_writes on, so every
// commit waits for its WAL flush, as in production. SPEC: benchmarks are
// measured on PostgreSQL with durable settings.
func durableSettings(dir string) pgcluster.Config {
	cfg := throwAway(dir)
	cfg.NoSync = false
	cfg.Settings["fsync"] = "on"
	cfg.Settings["synchronous_commit"] = "on"
	cfg.Settings["full_page_writes"] = "on"
	return cfg
}

// durableServer is a durable cluster (durableSettings plus extra),
// started on first use, once per test binary, and stopped by Main.
type durableServer struct {
	extra   map[string]string
	once    sync.Once
	err     error
	base    *url.URL
	cluster *pgcluster.Cluster
	dir     string
}

// start starts the cluster and migrates its template (the same template
// name as the throw-away cluster's, on another server).
func (d *durableServer) start() error {
	dir, err := os.MkdirTemp("", "payorch-pgd-")
	if err != nil {
		return err
	}
	d.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := durableSettings(dir)
	for k, v := range d.extra {
		cfg.Settings[k] = v
	}
	c, err := pgcluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	d.cluster = c
	u, _ := url.Parse(c.ConnString("postgres"))
	d.base = u
	admin, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: connect to the durable cluster: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create durable template: %w", err)
	}
	return migrate(ctx, c.ConnString(template))
}

// DurableURL returns the URL of a new migrated database of t's own on a
// durable cluster: fsync, synchronous_commit and full_page_writes on, so
// each commit costs a WAL flush to disk. It is for benchmarks that count
// commits (the throw-away cluster of URL turns all three off); the cluster
// is started on first use, once per test binary, and stopped (its
// databases with it) by Main. With
// PAYORCH_TEST_DATABASE_URL set, it is a database on that server, durable
// or not as that server is configured.
func DurableURL(t testing.TB) string {
	t.Helper()
	return durable.database(t, true)
}

// DurableEmptyURL is DurableURL for a database with no schema at all: for
// another service measured on the same durable cluster (the benchmarks'
// reference peer).
func DurableEmptyURL(t testing.TB) string {
	t.Helper()
	return durable.database(t, false)
}

// DurableStatsURL is DurableURL on another durable cluster, one that
// keeps statement statistics: pg_stat_statements loaded with track = all
// (statements run by triggers and functions counted too) and
// track_planning on, and track_functions = all. The extension itself is
// not created in the database; a benchmark that reads the view creates it.
// Only for benchmarks that say where PostgreSQL's time goes (the
// statistics cost a little on every statement, so the other benchmarks
// run on DurableURL's cluster, which keeps none). With
// PAYORCH_TEST_DATABASE_URL set, it is a database on that server, whose
// configuration must load pg_stat_statements.
func DurableStatsURL(t testing.TB) string {
	t.Helper()
	return durableStats.database(t, true)
}

// database creates a database on the cluster (a clone of its migrated
// template, or empty when migrated is false) and returns its URL.
func (d *durableServer) database(t testing.TB, migrated bool) string {
	t.Helper()
	ensure(t)
	if cluster == nil { // an external server
		return newDatabase(t, migrated)
	}
	d.once.Do(func() { d.err = d.start() })
	if d.err != nil {
		t.Fatalf("pgtest: no durable cluster: %v", d.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + "_d" + hex.EncodeToString(b)
	src := "template0"
	if migrated {
		src = template
	}
	u := *d.base
	admin, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	createMu.Lock()
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{src}.Sanitize())
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// The binary's PgBouncer (ThroughPooler), started on first use.
var (
	bouncerOnce sync.Once
	bouncerErr  error
	bouncer     *pgbouncer.Bouncer
	bouncerTo   string
)

// ThroughPooler returns the URL of the database at dbURL (a database of
// URL or EmptyURL) through a real PgBouncer in transaction pool mode: one
// per test binary, in front of its cluster (or of the server of
// PAYORCH_TEST_DATABASE_URL), started on first use and stopped by Main.
// The URL sets no statement mode: a client must avoid server-side
// prepared statements (payorch: PAYORCH_DATABASE_POOLER=transaction).
func ThroughPooler(t testing.TB, dbURL string) string {
	t.Helper()
	ensure(t)
	bouncerOnce.Do(func() { bouncerErr = startBouncer() })
	if bouncerErr != nil {
		t.Fatalf("pgtest: no pgbouncer: %v", bouncerErr)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return bouncer.URL(u.Path[1:])
}

// PoolerPID is the process id of ThroughPooler's PgBouncer, 0 before its
// first use: benchmarks read its CPU time.
func PoolerPID() int {
	if bouncer == nil {
		return 0
	}
	return bouncer.PID()
}

// PoolerAdminURL is the URL of the admin console (database pgbouncer) of
// ThroughPooler's PgBouncer, in pgx's simple protocol mode, the only one
// the console speaks: SHOW STATS and the like. "" before its first use.
func PoolerAdminURL() string {
	if bouncer == nil {
		return ""
	}
	return bouncer.URL("pgbouncer") + "&default_query_exec_mode=simple_protocol"
}

func startBouncer() error {
	dir, err := os.MkdirTemp("", "payorch-pgb-")
	if err != nil {
		return err
	}
	bouncerTo = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bouncer, err = pgbouncer.Start(ctx, pgbouncer.Config{Dir: dir, Server: urlFor("postgres")})
	return err
}
