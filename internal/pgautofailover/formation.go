// Package pgautofailover runs a pg_auto_failover formation (Debian's
// postgresql-NN-auto-failover and pg-auto-failover-cli packages) on
// loopback: a monitor and a primary with its standbys, each node a
// `pg_autoctl create … --run` child process that keeps its PostgreSQL up.
// pg_auto_failover configures synchronous replication to the standbys
// (synchronous_standby_names = 'ANY 1 (…)' with one standby), so a commit
// the primary acknowledges is on a standby too. Tests use it to prove
// payorch survives a failover of its database.
//
// pg_autoctl and PostgreSQL refuse to run as root; when the current user is
// root the formation runs as the `postgres` system user, like the clusters
// of internal/pgcluster.
package pgautofailover

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

// ErrNoBinary is returned by Start when pg_autoctl is not installed.
var ErrNoBinary = errors.New("pgautofailover: no pg_autoctl in PATH (Debian: apt-get install postgresql-NN-auto-failover)")

// Config describes one formation.
type Config struct {
	// Dir holds the nodes' data folders, configuration, sockets and logs;
	// it must exist, be writable and be reachable by the postgres user.
	Dir string
	// Nodes is the number of PostgreSQL nodes, a primary and its
	// standbys; default 2.
	Nodes int
	// DBName is the database pg_autoctl creates on the primary; default
	// postgres.
	DBName string
	// NumberSyncStandbys, when set, is the formation's
	// number_sync_standbys, set once every node is up: how many standbys
	// must have a commit before the primary acknowledges it. With two or
	// more standbys the monitor then names them all in the primary's
	// synchronous_standby_names (ANY n (…)) whatever their state, and
	// promotes only after the election finds the most advanced of them.
	NumberSyncStandbys int
	// StartTimeout bounds the wait for each node to reach its state;
	// default 2 minutes.
	StartTimeout time.Duration
}

// Node is one PostgreSQL node of the formation and its pg_autoctl keeper.
type Node struct {
	Name   string
	Port   int
	PGData string
	cmd    *exec.Cmd
	done   chan struct{}
}

// Formation is a running monitor and its nodes.
type Formation struct {
	cfg     Config
	binDir  string
	autoctl string
	cred    *syscall.Credential
	env     []string
	monitor *Node
	Nodes   []*Node
}

// newFormation finds pg_autoctl and PostgreSQL's binaries and prepares
// cfg.Dir and the environment pg_autoctl runs in; nothing is started.
func newFormation(cfg Config) (*Formation, error) {
	autoctl, err := exec.LookPath("pg_autoctl")
	if err != nil {
		return nil, ErrNoBinary
	}
	binDir, err := pgcluster.FindBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgcluster.RunAs()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(cfg.Dir, "sock")
	for _, d := range []string{cfg.Dir, sock} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("pgautofailover: %w", err)
		}
		if err := pgcluster.Chown(d, cred); err != nil {
			return nil, err
		}
	}
	f := &Formation{cfg: cfg, binDir: binDir, autoctl: autoctl, cred: cred}
	// pg_autoctl keeps its configuration and state under XDG folders and
	// connects to its local PostgreSQL through PGHOST's socket folder.
	f.env = []string{"LC_ALL=C", "PATH=" + binDir + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + cfg.Dir,
		"XDG_CONFIG_HOME=" + filepath.Join(cfg.Dir, "config"), "XDG_DATA_HOME=" + filepath.Join(cfg.Dir, "share"),
		"XDG_RUNTIME_DIR=" + filepath.Join(cfg.Dir, "run"), "PG_REGRESS_SOCK_DIR=" + sock, "PGHOST=" + sock}

	return f, nil
}

// Start creates and runs the monitor, then each node in turn (the first
// becomes the primary, the others standbys cloned from it), and waits until
// every node reports the state the monitor assigned it.
func Start(ctx context.Context, cfg Config) (*Formation, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 2
	}
	if cfg.DBName == "" {
		cfg.DBName = "postgres"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	f, err := newFormation(cfg)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(cfg.Nodes + 1)
	if err != nil {
		return nil, err
	}
	f.monitor = &Node{Name: "monitor", Port: ports[0], PGData: filepath.Join(cfg.Dir, "monitor")}
	if err := f.launch(f.monitor, "create", "monitor", "--pgdata", f.monitor.PGData, "--pgport", strconv.Itoa(f.monitor.Port),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run"); err != nil {
		return nil, err
	}
	if err := f.waitMonitor(ctx); err != nil {
		_ = f.Stop(context.Background())
		return nil, err
	}
	for i := range cfg.Nodes {
		n := &Node{Name: "node" + strconv.Itoa(i+1), Port: ports[i+1], PGData: filepath.Join(cfg.Dir, "node"+strconv.Itoa(i+1))}
		f.Nodes = append(f.Nodes, n)
		if err := f.launch(n, "create", "postgres", "--pgdata", n.PGData, "--pgport", strconv.Itoa(n.Port),
			"--hostname", "127.0.0.1", "--name", n.Name, "--dbname", cfg.DBName, "--auth", "trust", "--no-ssl",
			"--monitor", f.MonitorURL(), "--run"); err != nil {
			_ = f.Stop(context.Background())
			return nil, err
		}
		if err := f.WaitStable(ctx, cfg.StartTimeout, i+1); err != nil {
			_ = f.Stop(context.Background())
			return nil, err
		}
		if i == 0 {
			// A standby is cloned by pg_basebackup, which waits for a
			// spread checkpoint: paced over most of checkpoint_timeout
			// when buffers are dirty. Write them now.
			if err := f.checkpoint(ctx, n); err != nil {
				_ = f.Stop(context.Background())
				return nil, err
			}
		}
	}
	if cfg.NumberSyncStandbys > 0 {
		if err := f.requireSyncStandbys(ctx); err != nil {
			_ = f.Stop(context.Background())
			return nil, err
		}
	}
	return f, nil
}

// requireSyncStandbys sets the formation's number_sync_standbys to the
// configured number and waits until the primary applies it.
func (f *Formation) requireSyncStandbys(ctx context.Context) error {
	// What `pg_autoctl set formation number-sync-standbys` runs; the
	// command itself (2.0) reads a stale errno and refuses any value.
	if _, err := f.query(ctx, f.monitor, "pg_auto_failover",
		fmt.Sprintf(`SELECT pgautofailover.set_formation_number_sync_standbys('default', %d)::text`, f.cfg.NumberSyncStandbys)); err != nil {
		return fmt.Errorf("pgautofailover: number_sync_standbys: %w", err)
	}
	// The primary applies the new synchronous_standby_names
	// (apply_settings) and returns to primary.
	if err := f.waitSyncNames(ctx); err != nil {
		return err
	}
	return f.WaitStable(ctx, f.cfg.StartTimeout, f.cfg.Nodes)
}

// waitSyncNames waits up to the start timeout until the primary's
// synchronous_standby_names is what the monitor computes for it.
func (f *Formation) waitSyncNames(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout)
	defer cancel()
	var want, have string
	for {
		p, err := f.Primary(ctx)
		if err == nil {
			want, err = f.query(ctx, f.monitor, "pg_auto_failover", `SELECT pgautofailover.synchronous_standby_names('default', 0)`)
		}
		if err == nil {
			have, err = f.query(ctx, p, "postgres", `SELECT current_setting('synchronous_standby_names')`)
		}
		if err == nil && want != "" && have == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgautofailover: the primary's synchronous_standby_names is %q, the monitor's %q (%v)", have, want, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// query runs a one-value query on database dbname of n.
func (f *Formation) query(ctx context.Context, n *Node, dbname, sql string) (string, error) {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", n.Port, dbname))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, sql).Scan(&v)
	return v, err
}

// checkpoint runs CHECKPOINT on n.
func (f *Formation) checkpoint(ctx context.Context, n *Node) error {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", n.Port))
	if err != nil {
		return fmt.Errorf("pgautofailover: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("pgautofailover: checkpoint %s: %w", n.Name, err)
	}
	return nil
}

// launch starts pg_autoctl with args for n, its output in n's log file,
// in a process group of its own (Stop ends the group) that receives
// SIGTERM if this process dies.
func (f *Formation) launch(n *Node, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(f.cfg.Dir, n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgautofailover: %w", err)
	}
	cmd := exec.Command(f.autoctl, args...)
	cmd.Dir = f.cfg.Dir
	cmd.Env = f.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Credential: f.cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgautofailover: start %s: %w", n.Name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(n.done)
	}()
	return nil
}

// run runs one pg_autoctl command (as the formation's user) and
// returns its combined output.
func (f *Formation) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, f.autoctl, args...)
	cmd.Dir = f.cfg.Dir
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("pgautofailover: pg_autoctl %s: %w: %s", strings.Join(args, " "), err, tailOf(string(out), 2000))
	}
	return string(out), nil
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pgautofailover: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// MonitorURL is the URL the nodes reach the monitor by.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitor.Port)
}

// URL is the URL of database dbname on whichever node is the primary: every
// node's address, with target_session_attrs=read-write (libpq and pgx try
// them in turn and keep the one that accepts writes).
func (f *Formation) URL(dbname string) string {
	hosts := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
	}
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Host: strings.Join(hosts, ","), Path: "/" + dbname,
		RawQuery: "sslmode=disable&target_session_attrs=read-write&connect_timeout=5"}).String()
}

// waitMonitor waits until the monitor's database answers.
func (f *Formation) waitMonitor(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout)
	defer cancel()
	for {
		if _, err := f.states(ctx); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("pgautofailover: monitor not ready: %w; see %s", err, filepath.Join(f.cfg.Dir, "monitor.log"))
		}
		select {
		case <-f.monitor.done:
			return fmt.Errorf("pgautofailover: the monitor exited; see %s", filepath.Join(f.cfg.Dir, "monitor.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// NodeState is a node as the monitor sees it.
type NodeState struct {
	Name, Reported, Assigned string
	Port                     int
}

// states reads every node's reported and assigned state from the monitor.
func (f *Formation) states(ctx context.Context) ([]NodeState, error) {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", f.monitor.Port))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, _ := conn.Query(ctx, `SELECT nodename, nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid`)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
		var s NodeState
		err := r.Scan(&s.Name, &s.Port, &s.Reported, &s.Assigned)
		return s, err
	})
}

// States is every node's state as the monitor sees it.
func (f *Formation) States(ctx context.Context) ([]NodeState, error) { return f.states(ctx) }

// stable reports whether want nodes are registered, each in the state the
// monitor assigned it, exactly one of them primary (or single) and the
// others secondaries.
func stable(st []NodeState, want int) bool {
	if len(st) != want {
		return false
	}
	primaries := 0
	for _, s := range st {
		if s.Reported != s.Assigned {
			return false
		}
		switch s.Reported {
		case "primary", "single":
			primaries++
		case "secondary":
		default:
			return false
		}
	}
	return primaries == 1
}

// WaitStable waits up to timeout until the formation's want nodes are
// stable: one primary, the others secondaries, each in its assigned state.
func (f *Formation) WaitStable(ctx context.Context, timeout time.Duration, want int) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []NodeState
	for {
		st, err := f.states(ctx)
		if err == nil {
			last = st
			if stable(st, want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgautofailover: formation not stable after %s: %+v (%v); logs in %s", timeout, last, err, f.cfg.Dir)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Primary is the node that reports itself primary (or single, or
// wait_primary: a primary without a standby) as the monitor assigned: a
// lost primary's last report stays, but its assignment moves on.
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	st, err := f.states(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range st {
		if s.Reported == s.Assigned && (s.Reported == "primary" || s.Reported == "single" || s.Reported == "wait_primary") {
			for _, n := range f.Nodes {
				if n.Name == s.Name {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("pgautofailover: no primary: %+v", st)
}

// PerformFailover runs `pg_autoctl perform failover`: the monitor demotes
// the primary and promotes a standby, and the command returns once the new
// primary is in place. It waits up to 120 s: on a loaded machine the
// formation's state changes take well over pg_autoctl's default 60 s
// (a run with load average 17 timed out at 60 s in report_lsn).
func (f *Formation) PerformFailover(ctx context.Context) error {
	_, err := f.run(ctx, "perform", "failover", "--pgdata", f.monitor.PGData, "--wait", "120")
	return err
}

// KillPostmaster sends SIGKILL to n's postmaster (read from its
// postmaster.pid) and returns its pid: a crash of PostgreSQL, not of the
// node's keeper, which notices and restarts it.
func (f *Formation) KillPostmaster(n *Node) (int, error) {
	raw, err := os.ReadFile(filepath.Join(n.PGData, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgautofailover: %w", err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("pgautofailover: postmaster.pid of %s: %q", n.Name, first)
	}
	return pid, syscall.Kill(pid, syscall.SIGKILL)
}

// KillNode sends SIGKILL to n's keeper and its PostgreSQL (the keeper's
// process group): the node is lost, as when its host dies, and the monitor
// fails over to a standby once it finds it unhealthy. The node stays down.
func (f *Formation) KillNode(n *Node) error {
	if err := syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgautofailover: kill %s: %w", n.Name, err)
	}
	<-n.done
	return nil
}

// WaitPrimary waits up to timeout until a node other than lost is the
// primary: it reports primary, or wait_primary (a primary whose standbys
// are gone, which accepts writes without waiting for one), as the monitor
// assigned.
func (f *Formation) WaitPrimary(ctx context.Context, timeout time.Duration, lost *Node) (*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []NodeState
	for {
		st, err := f.states(ctx)
		for _, s := range st {
			if s.Name != lost.Name && s.Reported == s.Assigned && (s.Reported == "primary" || s.Reported == "wait_primary") {
				for _, n := range f.Nodes {
					if n.Name == s.Name {
						return n, nil
					}
				}
			}
		}
		if err == nil {
			last = st
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pgautofailover: no new primary after %s: %+v (%v)", timeout, last, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop ends every node, then the monitor: SIGTERM to each keeper (which
// stops its PostgreSQL), then SIGKILL to the process groups left after
// ctx's end.
func (f *Formation) Stop(ctx context.Context) error {
	all := append([]*Node{}, f.Nodes...)
	if f.monitor != nil {
		all = append(all, f.monitor)
	}
	var errs []error
	for _, n := range all {
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range all {
		if n.cmd == nil {
			continue
		}
		select {
		case <-n.done:
		case <-ctx.Done():
			_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			<-n.done
			errs = append(errs, fmt.Errorf("pgautofailover: %s had to be killed", n.Name))
		}
		// Whatever of the group outlived its keeper (a postmaster that
		// had not yet stopped) goes too.
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	return errors.Join(errs...)
}

// FreezeKeeper stops (SIGSTOP) n's keeper, the `pg_autoctl: node active`
// process that talks to the monitor and carries out its decisions, while
// n's PostgreSQL keeps running, and resumes it (SIGCONT) after d: a keeper
// too slow to follow the monitor, as on an overloaded machine.
func (f *Formation) FreezeKeeper(n *Node, d time.Duration) error {
	pids, err := groupProcs(n.cmd.Process.Pid, "node active")
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("pgautofailover: no node-active process for %s", n.Name)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("pgautofailover: freeze %s: %w", n.Name, err)
		}
	}
	time.AfterFunc(d, func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	return nil
}

// groupProcs lists the processes of process group pgid whose command line
// contains title.
func groupProcs(pgid int, title string) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("pgautofailover: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		g, err := syscall.Getpgid(pid)
		if err != nil || g != pgid {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), title) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
