package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgcluster"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// demoKeys is what `dev` keeps in DataDir/demo-keys.json between runs.
type demoKeys struct {
	TenantID int64  `json:"tenant_id"`
	Merchant string `json:"merchant"`
	Support  string `json:"support"`
	Finance  string `json:"finance"`
	Admin    string `json:"admin"`
}

const devDatabase = "payorch"

// cmdDev runs the whole product locally: an embedded PostgreSQL under
// DataDir (unless DATABASE_URL is set), migrations, a demo tenant with one
// key per role, the connectors (devConnectors: by default two embedded
// fakes, fake_a and fake_b, each with its state in
// DataDir/fake-provider-<name>.json), and the API on cfg.Listen.
func cmdDev(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := newFlagSet("dev")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	cfg = devConnectors(cfg, dataDir)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	if cfg, err = devVaultKeys(cfg, dataDir); err != nil {
		return err
	}
	if !cfg.webhookAllowPrivateSet {
		cfg.WebhookAllowPrivate = true // receivers on this machine, for trying webhooks
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	logger := newLogger(cfg)
	tel, err := startTelemetry(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer tel.stop()

	dbURL, stopCluster, err := devDatabaseURL(ctx, cfg, dataDir, logger, stdout)
	if err != nil {
		return err
	}
	defer stopCluster()
	// From here on it is the database, as DATABASE_URL would be: the key
	// cache's LISTEN connection (cfg.listenURL) uses it too.
	cfg.DatabaseURL = dbURL

	pool, err := openPool(ctx, cfg, dbURL, tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	backoffice, err := openBackofficePool(ctx, cfg, dbURL, tel)
	if err != nil {
		return err
	}
	defer backoffice.Close()
	if err := migrate(ctx, pool, logger); err != nil {
		return err
	}
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Logger: logger})
	keys, err := ensureDemoKeys(ctx, svc, filepath.Join(dataDir, "demo-keys.json"))
	if err != nil {
		return err
	}
	cfg.AutoMigrate = false // done above
	scheme := "http://"
	if cfg.TLSCert != "" {
		scheme = "https://"
	}
	return serveAPI(ctx, cfg, pool, backoffice, logger, tel, func(addr string, provs map[string]providers.Provider) {
		printDevBanner(stdout, scheme+addr, dbURL, keys)
		printDevConnectors(stdout, cfg, provs)
	})
}

// devDatabaseURL is DATABASE_URL when set; otherwise it starts the
// embedded cluster in dataDir, makes sure its database exists and returns
// its URL and what stops the cluster.
func devDatabaseURL(ctx context.Context, cfg config, dataDir string, logger *slog.Logger, stdout io.Writer) (string, func(), error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, func() {}, nil
	}
	cluster, err := startDevCluster(ctx, cfg, dataDir, logger, stdout)
	if err != nil {
		return "", nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(sctx); err != nil {
			logger.Error("postgres stop", "error", err)
		} else {
			logger.Info("postgres stopped")
		}
	}
	if err := ensureDatabase(ctx, cluster.TCPConnString("postgres"), devDatabase); err != nil {
		stop()
		return "", nil, err
	}
	return cluster.TCPConnString(devDatabase), stop, nil
}

// devConnectors returns cfg with the connectors `dev` runs. With
// PAYORCH_CONNECTORS and PAYORCH_FAKE_URL unset, those are two embedded
// fakes, fake_a (the default provider, unless PAYORCH_DEFAULT_PROVIDER
// names another connector) and fake_b, so that routing and failover can
// be tried at once, and stripe when it is configured; a data folder of an
// earlier version, whose fake-provider.json holds payments of the single
// fake, keeps that fake too, as the disabled connector fake, so that they
// can still be captured, refunded and reconciled. Every embedded fake
// keeps its holds next to the database, in DataDir/fake-provider-<name>.json
// unless its _STATE says otherwise, so the payments of an earlier run can
// still be captured, refunded, looked up and reconciled.
func devConnectors(cfg config, dataDir string) config {
	conns := slices.Clone(cfg.Connectors)
	if i := slices.IndexFunc(conns, func(cc connectorConfig) bool { return cc.implicit }); i >= 0 && conns[i].URL == "" {
		single := conns[i]
		conns = slices.Concat(conns[:i], cfg.DevConnectors, conns[i+1:])
		if single.State == "" {
			single.State = filepath.Join(dataDir, "fake-provider.json")
		}
		if _, err := os.Stat(single.State); err == nil {
			single.Disabled = true
			conns = append(conns, single)
		}
		if cfg.DefaultProvider == single.Name {
			cfg.DefaultProvider = cfg.DevConnectors[0].Name
		}
	}
	for i, cc := range conns {
		if cc.Adapter == adapterFake && cc.URL == "" && cc.State == "" {
			conns[i].State = filepath.Join(dataDir, "fake-provider-"+cc.Name+".json")
		}
	}
	cfg.Connectors = conns
	return cfg
}

// printDevConnectors lists the connectors `dev` runs, the embedded fakes
// with their URL, and how to arm a fault on the default one when its
// token is known (PAYORCH_CONNECTOR_<NAME>_TOKEN).
func printDevConnectors(w io.Writer, cfg config, provs map[string]providers.Provider) {
	fmt.Fprintf(w, "connectors (default %s):\n", cfg.DefaultProvider)
	for _, cc := range cfg.activeConnectors() {
		where := ""
		if fc, ok := provs[cc.Name].(*fake.Client); ok {
			where = fc.BaseURL()
		}
		state := ""
		if cc.Disabled {
			state = " (disabled)"
		}
		fmt.Fprintf(w, "  %-12s %-7s %s%s\n", cc.Name, cc.Adapter, where, state)
	}
	if cfg.TLSCert == "" {
		fmt.Fprintln(w, "  (the embedded fakes send their webhooks to this server's /webhooks/<connector>, signed)")
	}
	def, _ := cfg.connector(cfg.DefaultProvider)
	fc, ok := provs[def.Name].(*fake.Client)
	switch {
	case !ok:
		fmt.Fprintln(w)
		return
	case def.Token == "":
		fmt.Fprintf(w, "  (set %s to drive %s's admin API: faults, operations)\n\n", def.varOf(settingToken), def.Name)
		return
	}
	fmt.Fprintf(w, `
  # make %[1]s refuse authorizations before executing them (a failover case);
  # DELETE the same URL to clear it
  curl -s -X POST %[2]s/_admin/faults -H "Authorization: Bearer $%[3]s" \
    -H 'Content-Type: application/json' -d '{"operation":"authorize","fault":"error_before_execute"}'

`, def.Name, fc.BaseURL(), def.varOf(settingToken))
}

// startDevCluster starts (initialising on first run) the cluster under
// dataDir/pgdata on 127.0.0.1:DevPGPort, installing PostgreSQL first when
// it is missing on a Debian machine and we are root.
func startDevCluster(ctx context.Context, cfg config, dataDir string, logger *slog.Logger, stdout io.Writer) (*pgcluster.Cluster, error) {
	bin := cfg.PGBin
	if bin == "" {
		var err error
		bin, err = pgcluster.FindBinDir()
		if errors.Is(err, pgcluster.ErrNoBinaries) {
			if err := installPostgres(ctx, stdout); err != nil {
				return nil, err
			}
			bin, err = pgcluster.FindBinDir()
		}
		if err != nil {
			return nil, err
		}
	}
	socketDir := filepath.Join(dataDir, "run")
	// A Unix socket path must fit in 107 bytes.
	if len(socketDir)+len("/.s.PGSQL.")+len(strconv.Itoa(cfg.DevPGPort)) > 100 {
		socketDir = filepath.Join(os.TempDir(), fmt.Sprintf("payorch-%d-%d", os.Getuid(), cfg.DevPGPort))
	}
	fmt.Fprintf(stdout, "starting PostgreSQL (%s) in %s …\n", bin, filepath.Join(dataDir, "pgdata"))
	return pgcluster.Start(ctx, pgcluster.Config{
		BinDir:    bin,
		DataDir:   filepath.Join(dataDir, "pgdata"),
		SocketDir: socketDir,
		Port:      cfg.DevPGPort,
		ListenTCP: true,
		LogFile:   filepath.Join(dataDir, "postgres.log"),
		Logger:    logger,
	})
}

// installPostgres installs Debian's postgresql package when that is
// possible here, and otherwise says what to install.
func installPostgres(ctx context.Context, stdout io.Writer) error {
	_, debian := os.Stat("/etc/debian_version")
	if debian != nil || os.Geteuid() != 0 {
		return errors.New("no PostgreSQL server binaries found: install PostgreSQL ≥ 14 " +
			"(Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@16), " +
			"set PAYORCH_PG_BIN to the folder holding initdb and postgres, or set DATABASE_URL")
	}
	fmt.Fprintln(stdout, "PostgreSQL not found: installing Debian's postgresql package …")
	for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "postgresql"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %v: %w", args, err)
		}
	}
	return nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// ensureDemoKeys returns the demo tenant's keys, creating the tenant and
// keys on the first run (or when the saved keys no longer work, e.g. after
// the data folder was reset) and saving them with mode 0600.
func ensureDemoKeys(ctx context.Context, svc *orchestrator.Service, path string) (demoKeys, error) {
	var k demoKeys
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &k) == nil && demoKeysWork(ctx, svc, k) {
		return k, nil
	}
	t, err := svc.TenantByName(ctx, "demo")
	switch orchestrator.ErrorCode(err) {
	case "":
		_, k.Merchant, err = svc.CreateAPIKey(ctx, orchestrator.RoleMerchant, t.ID, "dev demo merchant")
		if err != nil {
			return k, err
		}
	case orchestrator.CodeNotFound:
		t, _, k.Merchant, err = svc.CreateTenant(ctx, "demo")
		if err != nil {
			return k, err
		}
	default:
		return k, err
	}
	k.TenantID = t.ID
	for role, dst := range map[orchestrator.Role]*string{
		orchestrator.RoleSupport: &k.Support,
		orchestrator.RoleFinance: &k.Finance,
		orchestrator.RoleAdmin:   &k.Admin,
	} {
		if _, *dst, err = svc.CreateAPIKey(ctx, role, 0, "dev demo "+string(role)); err != nil {
			return k, err
		}
	}
	b, _ := json.MarshalIndent(k, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return k, err
	}
	return k, nil
}

func demoKeysWork(ctx context.Context, svc *orchestrator.Service, k demoKeys) bool {
	for _, key := range []string{k.Merchant, k.Support, k.Finance, k.Admin} {
		if _, err := svc.Authenticate(ctx, key); err != nil {
			return false
		}
	}
	return true
}

func printDevBanner(w io.Writer, base, dbURL string, k demoKeys) {
	// A new order key per start, so every run's example makes a new
	// payment (and works against a standalone fake that keeps no state).
	order := "order-" + time.Now().UTC().Format("20060102-150405")
	fmt.Fprintf(w, `
payorch dev is up: %[1]s   (Ctrl-C stops the server and the database)

  DATABASE_URL=%[2]s

  demo tenant %[3]d keys (kept in the data folder, the same on every run):
    merchant  %[4]s
    support   %[5]s
    finance   %[6]s
    admin     %[7]s

try:
  curl -s %[1]s/readyz
  curl -s -H 'Authorization: Bearer %[4]s' %[1]s/v1/me

  # authorize 10.50 EUR (retry it as often as you like: same answer, one hold)
  curl -si -X POST %[1]s/v1/payments -H 'Authorization: Bearer %[4]s' \
    -H 'Idempotency-Key: %[9]s' -H 'Content-Type: application/json' \
    -d '{"amount_minor":1050,"currency":"EUR","description":"%[9]s"}'
  # capture it (the payment id is derived from the tenant and the key)
  curl -s -X POST %[1]s/v1/payments/%[8]s/capture -H 'Authorization: Bearer %[4]s' \
    -H 'Idempotency-Key: capture-%[9]s'
  # support: find it by its key, and its history
  curl -s -H 'Authorization: Bearer %[5]s' '%[1]s/v1/payments?idempotency_key=%[9]s'
  curl -s -H 'Authorization: Bearer %[5]s' %[1]s/v1/payments/%[8]s/events

  curl -s -H 'Authorization: Bearer %[7]s' %[1]s/v1/tenants
  DATABASE_URL='%[2]s' ./bin/payorch tenants list

`, base, dbURL, k.TenantID, k.Merchant, k.Support, k.Finance, k.Admin, orchestrator.PaymentID(k.TenantID, order), order)
}
