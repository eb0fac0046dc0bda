// Command payorch is the payments orchestrator: one binary for the API
// server, migrations, the embedded development setup and operator tasks.
// This package parses flags and the environment and wires the other
// packages together; it holds no business logic.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/migrations"
	"github.com/payorch/payorch/orchestrator"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

const usage = `payorch — a payments orchestrator

Usage:
  payorch serve   [--listen ADDR] [--no-migrate]   run the API server
  payorch dev     [--listen ADDR]                  everything on an embedded PostgreSQL
  payorch migrate                                  apply pending migrations
  payorch tenants create --name NAME [--json]      create a tenant and its first merchant key
  payorch tenants list [--json]
  payorch tenants origins --tenant N [--set ORIGIN,…] [--json]
                                                   read or set the browser origins of its publishable keys
  payorch apikeys create --role ROLE [--tenant N] [--description D] [--json]
  payorch apikeys list [--tenant N] [--json]
  payorch apikeys revoke KEY_ID [--json]
  payorch reconcile [--provider CONNECTOR] [--date YYYY-MM-DD] [--json]
                                                   reconcile one business day now
  payorch resolve [--min-age D] [--limit N]        one resolver pass over pending payments
  payorch vault rotate [--batch N]                 re-wrap every card's data key under the newest PAYORCH_VAULT_KEYS version
  payorch fakeprovider [--listen ADDR] [--admin-token T] [--hold-lifetime D] [--state FILE]
                       [--hold-retention D] [--max-live-holds N]
                                                   run the fake provider standalone
  payorch version

Configuration comes from environment variables (see README); flags win.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Getenv)
	stop()
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(os.Stderr, "payorch: %v\n\n%s", err, usage)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "payorch: %v\n", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return usageError{"no command"}
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	cmd, rest := args[0], args[1:]
	if cfg.Environment == "" {
		cfg.Environment = commandEnvironment(cmd)
	}
	switch cmd {
	case "serve":
		return cmdServe(ctx, cfg, rest)
	case "dev":
		return cmdDev(ctx, cfg, rest, stdout)
	case "migrate":
		return cmdMigrate(ctx, cfg, rest, stdout)
	case "tenants":
		return cmdTenants(ctx, cfg, rest, stdout)
	case "apikeys":
		return cmdAPIKeys(ctx, cfg, rest, stdout)
	case "reconcile":
		return cmdReconcile(ctx, cfg, rest, stdout)
	case "resolve":
		return cmdResolve(ctx, cfg, rest, stdout)
	case "vault":
		return cmdVault(ctx, cfg, rest, stdout)
	case "fakeprovider":
		return cmdFakeProvider(ctx, cfg, rest)
	case "version":
		fmt.Fprintln(stdout, "payorch", buildVersion())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}

// openPool connects to url with the configured pool size and checks the
// connection. With tel, queries are traced and the pool's statistics
// exported.
func openPool(ctx context.Context, cfg config, url string, tel *telemetry) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, cfg, url, cfg.DBMaxConns, "", tel)
}

// openNamedPool is openPool for a pool of maxConns connections whose
// statistics carry name (none for the main pool).
// Behind a transaction pooler (cfg.DatabasePooler) its connections
// prepare no named statements.
func openNamedPool(ctx context.Context, cfg config, url string, maxConns int, name string, tel *telemetry) (*pgxpool.Pool, error) {
	if url == "" {
		return nil, errors.New("DATABASE_URL is not set (payorch dev prints the URL of its embedded database)")
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pc.MaxConns = int32(maxConns)
	if cfg.DatabasePooler == poolerTransaction && (url == cfg.DatabaseURL || url == cfg.DatabaseReadURL) {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	if cfg.RequireSyncStandby {
		// Migration 00015's trigger reads it when an answer is stored.
		pc.ConnConfig.RuntimeParams["payorch.require_sync_standby"] = "on"
	}
	if tel != nil {
		tel.traceDatabase(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	if tel != nil {
		if err := tel.recordPoolStats(pool, name); err != nil {
			pool.Close()
			return nil, fmt.Errorf("database pool metrics: %w", err)
		}
	}
	return pool, nil
}

// openReplicaPool opens the pool on DATABASE_READ_URL (nil when it is
// unset): PAYORCH_BACKOFFICE_MAX_CONNS connections, traced, its
// statistics named "replica". A replica that is down or is no standby
// does not stop the command (its reads go to the primary): it is only
// warned about.
func openReplicaPool(ctx context.Context, cfg config, logger *slog.Logger, tel *telemetry) (*pgxpool.Pool, error) {
	if cfg.DatabaseReadURL == "" {
		return nil, nil
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseReadURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_READ_URL: %w", err)
	}
	pc.MaxConns = int32(cfg.BackofficeMaxConns)
	if cfg.DatabasePooler == poolerTransaction {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	if tel != nil {
		tel.traceDatabase(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_READ_URL: %w", err)
	}
	if tel != nil {
		if err := tel.recordPoolStats(pool, "replica"); err != nil {
			pool.Close()
			return nil, fmt.Errorf("read replica pool metrics: %w", err)
		}
	}
	var standby bool
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch err := pool.QueryRow(cctx, `SELECT pg_is_in_recovery()`).Scan(&standby); {
	case err != nil:
		logger.Warn("DATABASE_READ_URL does not answer; its reads go to the primary until it does", "error", err)
	case !standby:
		logger.Warn("DATABASE_READ_URL is not a standby (not in recovery); its reads go to the primary")
	}
	return pool, nil
}

// readReplicaMaxWait is reconcile.Config's ReplicaMaxWait for
// PAYORCH_READ_REPLICA_MAX_WAIT, whose 0 means no wait.
func readReplicaMaxWait(cfg config) time.Duration {
	if cfg.ReadReplicaMaxWait == 0 {
		return -1
	}
	return cfg.ReadReplicaMaxWait
}

// migrate applies pending migrations under the cluster-wide migration lock.
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	_, err := migrations.Apply(ctx, pool, logger)
	return err
}

// migrateDirect applies pending migrations over cfg.migrationURL(): pool
// when that is DATABASE_URL, else a short-lived connection of its own
// (DATABASE_DIRECT_URL, past the pooler).
func migrateDirect(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger) error {
	u, err := cfg.migrationURL()
	if err != nil {
		return err
	}
	if u == cfg.DatabaseURL {
		return migrate(ctx, pool, logger)
	}
	direct, err := openNamedPool(ctx, cfg, u, 2, "migrations", nil)
	if err != nil {
		return fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
	}
	defer direct.Close()
	return migrate(ctx, direct, logger)
}

func cmdMigrate(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := newFlagSet("migrate")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	u, err := cfg.migrationURL()
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, cfg, u, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.New(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	applied, err := m.Up(ctx, newLogger(cfg))
	if err != nil {
		return err
	}
	cur, _, err := m.Versions(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied %d migration(s); schema version %d\n", len(applied), cur)
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// payorchLogHandler adds request-scoped attributes to every record.
func payorchLogHandler(h slog.Handler) slog.Handler { return orchestrator.NewLogHandler(h) }
