// Package pgbouncer runs PgBouncer, the connection pooler from Debian's
// pgbouncer package, in front of a PostgreSQL server, as a child process on
// a loopback port. Tests use it to prove payorch works behind a
// transaction-mode pooler (PAYORCH_DATABASE_POOLER=transaction).
//
// PgBouncer refuses to run as root; when the current user is root it runs
// as the `postgres` system user, like the clusters of internal/pgcluster.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgcluster"
)

// ErrNoBinary is returned by Start when pgbouncer is not installed.
var ErrNoBinary = errors.New("pgbouncer: no pgbouncer binary in PATH or /usr/sbin (Debian: apt-get install pgbouncer)")

// Config describes one pooler.
type Config struct {
	// Dir holds the configuration, the user list and the log; it must
	// exist.
	Dir string
	// Server is the URL of the PostgreSQL server to pool (its host, port,
	// user and password; the database is the client's): a Unix socket
	// folder in host= or a TCP host.
	Server string
	// PoolMode is session, transaction or statement; default transaction.
	PoolMode string
	// PoolSize is the number of server connections per database and user
	// (default_pool_size); default 20.
	PoolSize int
	// StartTimeout bounds the wait for PgBouncer to accept connections;
	// default 30s.
	StartTimeout time.Duration
}

// Bouncer is a running PgBouncer started by Start.
type Bouncer struct {
	cfg  Config
	port int
	user string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// findBinary looks for pgbouncer in PATH, then where Debian installs it.
func findBinary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoBinary
}

// Start writes cfg.Dir/pgbouncer.ini (any database name is passed through
// to the server's database of that name; trust authentication for the
// server's user), starts PgBouncer on a free 127.0.0.1 port and waits until
// it answers. It dies with this process (SIGTERM).
func Start(ctx context.Context, cfg Config) (*Bouncer, error) {
	if cfg.PoolMode == "" {
		cfg.PoolMode = "transaction"
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 20
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	server, err := pgx.ParseConfig(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: server URL: %w", err)
	}
	cred, err := pgcluster.RunAs()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	b := &Bouncer{cfg: cfg, port: port, user: server.User}
	ini := filepath.Join(cfg.Dir, "pgbouncer.ini")
	if err := b.writeConfig(ini, server.Host, server.Port, server.User, server.Password); err != nil {
		return nil, err
	}
	if err := pgcluster.Chown(cfg.Dir, cred); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, "pgbouncer.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	cmd := exec.Command(bin, ini)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Credential: cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	b.cmd, b.done = cmd, make(chan struct{})
	go func() {
		b.err = cmd.Wait()
		logf.Close()
		close(b.done)
	}()
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop(context.Background())
		return nil, err
	}
	return b, nil
}

// writeConfig writes the configuration and the user list (server's user,
// trusted) for a server at host:port.
func (b *Bouncer) writeConfig(ini, host string, port uint16, user, password string) error {
	dest := fmt.Sprintf("host=%s port=%d user=%s", host, port, user)
	if password != "" {
		dest += " password=" + password
	}
	users := filepath.Join(b.cfg.Dir, "users.txt")
	conf := strings.Join([]string{
		"[databases]",
		"* = " + dest,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + users,
		"admin_users = " + user,
		"pool_mode = " + b.cfg.PoolMode,
		"default_pool_size = " + strconv.Itoa(b.cfg.PoolSize),
		"max_client_conn = 2000",
		// A server connection closed while idle is a new backend at the
		// next burst, cold (catalogs, PL/pgSQL triggers compiled again),
		// with clients queued for it: 5 s closed them between the turns
		// of BenchmarkServePooler (3.6 to 14.6 ms of wait per authorize in
		// SHOW STATS; BENCHMARKS.md). Tests' databases are dropped WITH
		// (FORCE), which closes their server connections anyway.
		"server_idle_timeout = 60",
		"server_lifetime = 300",
		"logfile = " + filepath.Join(b.cfg.Dir, "pgbouncer.log"),
		"log_connections = 0",
		"log_disconnections = 0",
		// SHOW STATS's totals are brought up to date every stats_period:
		// every second, so a benchmark can read them around a run; not
		// logged.
		"stats_period = 1",
		"log_stats = 0",
		"",
	}, "\n")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("%q \"\"\n", user)), 0o644); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (b *Bouncer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, b.URL("postgres")+"&default_query_exec_mode=simple_protocol")
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-b.done:
			return fmt.Errorf("pgbouncer: exited during start-up (%v); see %s", b.err, filepath.Join(b.cfg.Dir, "pgbouncer.log"))
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer: not ready after %s: %w", b.cfg.StartTimeout, err)
		case <-tick.C:
		}
	}
}

// URL is the URL of database dbname through the pooler, as the server's
// user. It sets no statement mode: a client must not use server-side
// prepared statements in transaction mode (payorch:
// PAYORCH_DATABASE_POOLER=transaction; pgx: default_query_exec_mode=exec).
func (b *Bouncer) URL(dbname string) string {
	return (&url.URL{Scheme: "postgres", User: url.User(b.user), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)),
		Path: "/" + dbname, RawQuery: "sslmode=disable"}).String()
}

// Port is the loopback port PgBouncer listens on.
func (b *Bouncer) Port() int { return b.port }

// PID is the PgBouncer process's id (for its CPU time in benchmarks).
func (b *Bouncer) PID() int { return b.cmd.Process.Pid }

// Stop shuts PgBouncer down (SIGTERM: at once) and waits for it, killing
// it if ctx ends first.
func (b *Bouncer) Stop(ctx context.Context) error {
	select {
	case <-b.done:
		return nil
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	}
	_ = b.cmd.Process.Kill()
	<-b.done
	return errors.New("pgbouncer: had to be killed")
}
