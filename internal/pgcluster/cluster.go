// Package pgcluster runs a private PostgreSQL cluster from the machine's
// PostgreSQL binaries: initdb once into a data folder, then postgres on a
// Unix socket (and optionally a loopback TCP port) as a child process that
// dies with its parent. It backs `payorch dev` (the embedded default) and the
// test helper in internal/pgtest.
//
// PostgreSQL refuses to run as root; when the current user is root the
// cluster is initialised and run as the `postgres` system user.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned by FindBinDir when no PostgreSQL server binaries
// are installed.
var ErrNoBinaries = errors.New("pgcluster: no PostgreSQL server binaries found (initdb and postgres)")

// Config describes one cluster.
type Config struct {
	// BinDir holds initdb and postgres; empty means FindBinDir().
	BinDir string
	// DataDir is the cluster's data folder; created by initdb when empty.
	DataDir string
	// SocketDir holds the Unix socket; keep its path short (the socket path
	// must fit in 107 bytes).
	SocketDir string
	// Port is the port number of the socket and, when ListenTCP is set, of
	// 127.0.0.1. Defaults to 5432 (a socket file name only, unless
	// ListenTCP).
	Port int
	// ListenTCP also listens on 127.0.0.1:Port.
	ListenTCP bool
	// Settings are passed as `-c name=value` to postgres (for tests:
	// fsync=off and friends).
	Settings map[string]string
	// NoSync runs initdb with --no-sync (throw-away clusters).
	NoSync bool
	// LogFile receives the server's output; empty means DataDir/../postgres.log.
	LogFile string
	// StartTimeout bounds the wait for the server to accept connections.
	// Defaults to 60s.
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start.
type Cluster struct {
	cfg  Config
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// FindBinDir returns the folder holding initdb and postgres: $PAYORCH_PG_BIN
// is not read here (configuration belongs to the caller); it looks in PATH,
// then in /usr/lib/postgresql/<newest>/bin.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool { return pgVersionOf(matches[i]) > pgVersionOf(matches[j]) })
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func pgVersionOf(path string) int {
	// /usr/lib/postgresql/15/bin/postgres → 15
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// Start initialises DataDir if it holds no cluster yet, starts postgres and
// waits until it accepts connections. The server is a child process in its
// own process group that receives SIGQUIT (immediate shutdown) if this
// process dies without calling Stop.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Port == 0 {
		cfg.Port = 5432
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.DataDir == "" || cfg.SocketDir == "" {
		return nil, errors.New("pgcluster: DataDir and SocketDir are required")
	}
	if cfg.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = dir
	}
	if cfg.LogFile == "" {
		cfg.LogFile = filepath.Join(filepath.Dir(cfg.DataDir), "postgres.log")
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	for _, dir := range []string{cfg.DataDir, cfg.SocketDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
		if err := chown(dir, cred); err != nil {
			return nil, err
		}
	}
	if cred != nil {
		if err := checkTraversable(cfg.DataDir, cred); err != nil {
			return nil, err
		}
	}

	if _, err := os.Stat(filepath.Join(cfg.DataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initdb(ctx, cfg, cred); err != nil {
			return nil, err
		}
	}

	c := &Cluster{cfg: cfg, cred: cred}
	if err := c.launch(ctx); err != nil {
		return nil, err
	}
	cfg.Logger.Info("postgres started", "data_dir", cfg.DataDir, "socket_dir", cfg.SocketDir, "port", cfg.Port, "tcp", cfg.ListenTCP)
	return c, nil
}

// launch starts postgres on the initialised data folder and waits for it.
func (c *Cluster) launch(ctx context.Context) error {
	cfg := c.cfg
	logf, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: open log: %w", err)
	}
	listen := ""
	if cfg.ListenTCP {
		listen = "127.0.0.1"
	}
	args := []string{"-D", cfg.DataDir, "-k", cfg.SocketDir, "-p", strconv.Itoa(cfg.Port), "-c", "listen_addresses=" + listen}
	keys := make([]string, 0, len(cfg.Settings))
	for k := range cfg.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+cfg.Settings[k])
	}
	cmd := exec.Command(filepath.Join(cfg.BinDir, "postgres"), args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,            // Ctrl-C in a terminal reaches us, not postgres: we stop it in order.
		Pdeathsig:  syscall.SIGQUIT, // our death takes the server down (immediate shutdown).
		Credential: c.cred,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	done := make(chan struct{})
	c.cmd, c.done = cmd, done
	go func() {
		err := cmd.Wait()
		logf.Close()
		c.err = err
		close(done)
	}()
	if err := c.waitReady(ctx); err != nil {
		_ = c.Stop(context.Background())
		return err
	}
	return nil
}

func initdb(ctx context.Context, cfg Config, cred *syscall.Credential) error {
	args := []string{"-D", cfg.DataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if cfg.NoSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"), args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("pgcluster: postgres exited during start-up (%v); see %s", c.err, c.cfg.LogFile)
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: postgres not ready after %s: %w; see %s", c.cfg.StartTimeout, err, c.cfg.LogFile)
		case <-tick.C:
		}
	}
}

// ConnString returns a connection URL for database dbname over the Unix
// socket, as the postgres superuser.
func (c *Cluster) ConnString(dbname string) string {
	q := url.Values{}
	q.Set("host", c.cfg.SocketDir)
	q.Set("port", strconv.Itoa(c.cfg.Port))
	q.Set("user", "postgres")
	q.Set("sslmode", "disable")
	return (&url.URL{Scheme: "postgres", Host: "", Path: "/" + dbname, RawQuery: q.Encode()}).String()
}

// TCPConnString returns a connection URL over 127.0.0.1 (only meaningful
// with ListenTCP).
func (c *Cluster) TCPConnString(dbname string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.Port)), dbname)
}

// PID is the postmaster's process id.
func (c *Cluster) PID() int { return c.cmd.Process.Pid }

// Done is closed when the server process has exited.
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Stop shuts the server down in fast mode (open sessions are rolled back,
// a checkpoint is written) and waits for it; if ctx ends first it falls
// back to an immediate shutdown, then to SIGKILL.
func (c *Cluster) Stop(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	return errors.New("pgcluster: postgres had to be killed")
}

// Restart stops the server with mode "immediate" (a crash, as far as
// clients can tell) or "fast", and starts it again on the same data folder.
// Tests use it to prove the service survives a database restart.
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	_ = c.cmd.Process.Signal(sig)
	<-c.done
	return c.launch(ctx)
}

// RunAs is the credential PostgreSQL's programs (postgres, pgbouncer,
// pg_autoctl, which all refuse root) are run with: the postgres system
// user's when this process is root, nil (this process's user) otherwise.
func RunAs() (*syscall.Credential, error) { return credential() }

// Chown gives dir to cred's user (nothing when cred is nil), so that a
// program run as RunAs can write in it.
func Chown(dir string, cred *syscall.Credential) error { return chown(dir, cred) }

// credential returns the postgres user's credential when running as root,
// nil otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs the postgres system user (install the postgresql package): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chown(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pgcluster: chown %s: %w", dir, err)
	}
	return nil
}

// checkTraversable makes sure the postgres user can reach dir: every parent
// must be searchable by others (or owned by postgres).
func checkTraversable(dir string, cred *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm()&0o001 == 0 && (st == nil || st.Uid != cred.Uid) {
			return fmt.Errorf("pgcluster: the postgres user cannot enter %s (mode %v); put the data folder somewhere world-searchable or set DATABASE_URL", p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}
