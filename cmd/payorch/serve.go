package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/background"
	"github.com/payorch/payorch/migrations"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

func cmdServe(ctx context.Context, cfg config, args []string) error {
	fs := newFlagSet("serve")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on")
	noMigrate := fs.Bool("no-migrate", !cfg.AutoMigrate, "do not apply migrations on start")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	cfg.AutoMigrate = !*noMigrate
	if err := cfg.validate(); err != nil {
		return err
	}
	logger := newLogger(cfg)
	tel, err := startTelemetry(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer tel.stop()
	pool, err := openPool(ctx, cfg, cfg.DatabaseURL, tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	backoffice, err := openBackofficePool(ctx, cfg, cfg.DatabaseURL, tel)
	if err != nil {
		return err
	}
	defer backoffice.Close()
	return serveAPI(ctx, cfg, pool, backoffice, logger, tel, nil)
}

// openBackofficePool opens the back-office pool (PAYORCH_BACKOFFICE_MAX_CONNS
// connections to url): reconciliation and finance's reads and exports use
// it and nothing else does, so however busy they are, payments, the
// sweepers and /readyz keep the main pool to themselves.
func openBackofficePool(ctx context.Context, cfg config, url string, tel *telemetry) (*pgxpool.Pool, error) {
	return openNamedPool(ctx, cfg, url, cfg.BackofficeMaxConns, "backoffice", tel)
}

// serveAPI loads the TLS certificate (if any), migrates (unless told not
// to), listens on cfg.Listen, calls ready (if set) with the bound address
// and the connectors' providers, and serves until ctx is done. Payments, background services and health
// use pool; reconciliation and finance use backoffice.
func serveAPI(ctx context.Context, cfg config, pool, backoffice *pgxpool.Pool, logger *slog.Logger, tel *telemetry,
	ready func(addr string, provs map[string]providers.Provider)) error {
	tlsConfig, publicURL, m, err := prepareServe(ctx, cfg, pool, logger)
	if err != nil {
		return err
	}
	defer m.Close()
	// Listen first: embedded fakes learn where to send their webhooks
	// (over plain HTTP only: with TLS they would have to trust our
	// certificate, so they send none).
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer l.Close() // a no-op once served
	if tlsConfig == nil {
		cfg.webhookBase = selfURL(l.Addr())
	}
	provs, stopProviders, err := startProviders(cfg, logger, tel)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopProviders(sctx)
	}()
	// The vault (nil: off) is the payment domain's, for the cards of
	// vaulted methods, and the API's, for /v1/payment_methods.
	cards, err := openVault(ctx, cfg, pool, logger, tel)
	if err != nil {
		return err
	}
	svc, err := newService(cfg, pool, logger, provs, tel, m.Versions, cards)
	if err != nil {
		return err
	}
	metricsHandler, metricsAt, stopSide, err := startSideListeners(cfg, logger, tel)
	if err != nil {
		return err
	}
	defer stopSide()
	replica, err := openReplicaPool(ctx, cfg, logger, tel)
	if err != nil {
		return err
	}
	if replica != nil {
		defer replica.Close()
	}
	rec := newReconciler(cfg, backoffice, replica, logger, provs, tel)
	hooks := newWebhooks(cfg, pool, logger, tel)
	jobs, err := backgroundJobs(cfg, svc, hooks, rec, cards, logger)
	if err != nil {
		return err
	}
	stopJobs := background.Start(context.WithoutCancel(ctx), jobs...)
	defer stopJobs()

	srv := newAPIServer(cfg, apiParts{svc: svc, hooks: hooks, rec: rec, cards: cards}, logger, tel, metricsHandler, publicURL, tlsConfig)
	logger.Info("payorch serving", "addr", l.Addr().String(), "tls", tlsConfig != nil, "version", buildVersion(),
		"metrics", metricsAt, "otlp_traces", tel.exporting)
	if ready != nil {
		ready(l.Addr().String(), provs)
	}
	if err := srv.Serve(ctx, l); err != nil {
		return err
	}
	logger.Info("payorch stopped")
	return nil
}

// prepareServe loads the TLS certificate (nil: plain HTTP) and the public
// URL (nil: none set), and migrates unless told not to; the Migrator it
// returns tells /readyz whether the schema is current.
func prepareServe(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger) (*tls.Config, *url.URL,
	*migrations.Migrator, error) {
	tlsConfig, err := loadTLS(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	var publicURL *url.URL
	if cfg.PublicURL != "" {
		if publicURL, err = cfg.publicURL(); err != nil {
			return nil, nil, nil, err
		}
	}
	if cfg.insecureConsoleCookies() {
		logger.Warn(insecureCookiesWarning)
	}
	if cfg.AutoMigrate {
		if err := migrateDirect(ctx, cfg, pool, logger); err != nil {
			return nil, nil, nil, err
		}
	}
	m, err := migrations.New(pool)
	if err != nil {
		return nil, nil, nil, err
	}
	return tlsConfig, publicURL, m, nil
}

// startSideListeners starts what listens beside the API: the debug
// listener (PAYORCH_DEBUG_LISTEN) and /metrics on its own address
// (PAYORCH_METRICS_LISTEN). metricsHandler is what the API serves at
// /metrics: nil when metrics have their own address. stop closes both.
func startSideListeners(cfg config, logger *slog.Logger, tel *telemetry) (metricsHandler http.Handler, metricsAt string,
	stop func(), err error) {
	stopDebug, err := startDebug(cfg, logger)
	if err != nil {
		return nil, "", nil, fmt.Errorf("PAYORCH_DEBUG_LISTEN: %w", err)
	}
	if cfg.MetricsListen == "" {
		return tel.metrics, "/metrics", stopDebug, nil
	}
	stopMetrics, err := startMetrics(cfg, logger, tel.metrics)
	if err != nil {
		stopDebug()
		return nil, "", nil, fmt.Errorf("PAYORCH_METRICS_LISTEN: %w", err)
	}
	return nil, cfg.MetricsListen + "/metrics", func() { stopMetrics(); stopDebug() }, nil
}

// apiParts are the services the HTTP API serves; cards is nil when the
// vault is off (its routes answer 503).
type apiParts struct {
	svc   *orchestrator.Service
	hooks *webhooks.Service
	rec   *reconcile.Reconciler
	cards *vault.Vault
}

// offIfZero is a limit of the configuration (0: off) as httpapi's
// (negative: off; 0 would be its default).
func offIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// newAPIServer is the HTTP API, the console and the health and metrics
// endpoints, as cfg configures them.
func newAPIServer(cfg config, parts apiParts, logger *slog.Logger, tel *telemetry, metricsHandler http.Handler,
	publicURL *url.URL, tlsConfig *tls.Config) *httpapi.Server {
	return httpapi.New(httpapi.Config{
		Reconciler:       parts.rec,
		Service:          parts.svc,
		Webhooks:         parts.hooks,
		Vault:            parts.cards,
		Logger:           logger,
		RateLimit:        cfg.RateLimit,
		ShutdownTimeout:  cfg.ShutdownTimeout,
		ExecutionTimeout: cfg.IdempotencyLease - cfg.ProviderTimeout/2,
		TracerProvider:   tel.tracerProvider,
		MeterProvider:    tel.meterProvider,
		MetricsHandler:   metricsHandler,

		ConsoleSignInLimit:     offIfZero(cfg.ConsoleSignInLimit),
		AuthFailureLimit:       offIfZero(cfg.AuthFailureLimit),
		PublishableKeyLimit:    offIfZero(cfg.PublishableKeyLimit),
		PublishableClientLimit: offIfZero(cfg.PublishableClientLimit),
		// http://localhost origins are for trying the card form locally.
		AllowHTTPLoopbackOrigins: cfg.Environment != envProduction,
		TrustedProxies:           cfg.TrustedProxies,
		PublicURL:                publicURL,
		TLSConfig:                tlsConfig,
	})
}

// backgroundJobs is everything `serve` runs besides the API, in the order
// it is started (and the reverse of the order it is stopped): the key
// cache's listener first, so that requests answered meanwhile use it;
// then the jobs that settle and sweep; the reconciliation schedule last.
// Several instances may run all of them at once. A job whose interval is
// 0 is off.
func backgroundJobs(cfg config, svc *orchestrator.Service, hooks *webhooks.Service, rec *reconcile.Reconciler,
	cards *vault.Vault, logger *slog.Logger) ([]background.Job, error) {
	var jobs []background.Job
	switch {
	case cfg.APIKeyCache && cfg.listenURL() == "":
		logger.Warn("api key cache off: PAYORCH_DATABASE_POOLER=transaction and no DATABASE_DIRECT_URL to LISTEN on; " +
			"every request reads its key, and every authorization its routing, from the database")
	case cfg.APIKeyCache:
		// Revocations reach it by NOTIFY; off whenever its listener is down.
		jobs = append(jobs, svc.KeyCacheJob())
	}
	if cfg.ResolverInterval > 0 {
		jobs = append(jobs, svc.ResolverJob(cfg.ResolverInterval, cfg.ResolverMinAge, cfg.ProviderTimeout))
	}
	if cfg.WebhookInterval > 0 {
		jobs = append(jobs, hooks.WebhookJob(cfg.WebhookInterval))
	}
	// Reads the scores of auth_rate routing while some rule uses it.
	jobs = append(jobs, svc.AuthRatesJob())
	jobs = append(jobs, svc.HistoryJob(orchestrator.HistoryRetention{Payments: cfg.HistoryRetentionMonths,
		Events: cfg.EventsRetentionMonths}))
	if cfg.HoldSweepInterval > 0 {
		jobs = append(jobs, svc.HoldSweeperJob(cfg.HoldSweepInterval, cfg.ProviderTimeout))
	}
	if cfg.SweepInterval > 0 {
		jobs = append(jobs, svc.KeySweeperJob(cfg.SweepInterval), rec.AbandonedRunsJob(cfg.SweepInterval))
	}
	if cards != nil {
		// Not behind a setting: card rules forbid keeping a CVC.
		jobs = append(jobs, cards.CVCSweeperJob(cvcSweepInterval))
	}
	if cfg.ReconcileSchedule != "off" {
		sched, err := reconcile.NewScheduler(rec, cfg.ReconcileSchedule, time.Hour)
		if err != nil {
			return nil, fmt.Errorf("PAYORCH_RECONCILE_SCHEDULE: %w", err)
		}
		jobs = append(jobs, sched)
	}
	return jobs, nil
}

// loadTLS loads PAYORCH_TLS_CERT and PAYORCH_TLS_KEY: nil when neither is
// set (plain HTTP), an error naming them when they do not load.
func loadTLS(cfg config) (*tls.Config, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("PAYORCH_TLS_CERT, PAYORCH_TLS_KEY: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// newService wires the domain; schemaVersions (nil for one-shot commands)
// lets its readiness check (/readyz) see whether migrations are current,
// and cards (nil: off) holds the cards of vaulted payment methods.
// The key cache's listener connects to cfg.listenURL() when that is not
// DATABASE_URL (DATABASE_DIRECT_URL).
func newService(cfg config, pool *pgxpool.Pool, logger *slog.Logger, provs map[string]providers.Provider, tel *telemetry,
	schemaVersions func(context.Context) (current, target int64, err error), cards *vault.Vault) (*orchestrator.Service, error) {
	var listen *pgx.ConnConfig
	if u := cfg.listenURL(); u != "" && u != cfg.DatabaseURL {
		var err error
		if listen, err = pgx.ParseConfig(u); err != nil {
			return nil, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
	}
	var cardVault orchestrator.CardVault
	if cards != nil {
		cardVault = cards // never a nil *vault.Vault in a non-nil interface
	}
	return orchestrator.NewService(orchestrator.Config{
		Pool:             pool,
		ListenConfig:     listen,
		SchemaVersions:   schemaVersions,
		Logger:           logger,
		Providers:        provs,
		DefaultProvider:  cfg.DefaultProvider,
		Connectors:       cfg.connectorOptions(),
		MaxAttempts:      cfg.MaxAttempts,
		HoldExpiringLead: cfg.HoldExpiringLead,
		HoldActionLead:   cfg.HoldActionLead,
		ActionTimeout:    cfg.AuthenticationTimeout,
		// As for browser origins: http://localhost return URLs outside
		// production only.
		AllowHTTPLoopbackReturnURLs: cfg.Environment != envProduction,
		Breaker:                     cfg.Breaker,
		ProviderTimeout:             cfg.ProviderTimeout,
		Lease:                       cfg.IdempotencyLease,
		KeyTTL:                      cfg.IdempotencyTTL,
		ReplayCache:                 cfg.ReplayCache,
		TracerProvider:              tel.tracerProvider,
		MeterProvider:               tel.meterProvider,
		Vault:                       cardVault,
	}), nil
}

func cmdResolve(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := newFlagSet("resolve")
	minAge := fs.Duration("min-age", cfg.ResolverMinAge, "only items pending at least this long")
	limit := fs.Int("limit", 1000, "at most this many payments and operations")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if err := cfg.needStandaloneFakes("resolve"); err != nil {
		return err
	}
	o, err := openOneShot(ctx, cfg)
	if err != nil {
		return err
	}
	defer o.close()
	cards, err := openVault(ctx, cfg, o.pool, o.logger, o.tel)
	if err != nil {
		return err
	}
	svc, err := newService(cfg, o.pool, o.logger, o.provs, o.tel, nil, cards)
	if err != nil {
		return err
	}
	st, err := svc.ResolvePending(ctx, *minAge, *limit)
	if err != nil {
		return err
	}
	return printJSON(stdout, st)
}

func cmdFakeProvider(ctx context.Context, cfg config, args []string) error {
	fs := newFlagSet("fakeprovider")
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on")
	token := fs.String("admin-token", cfg.FakeToken, "bearer secret every request must carry (default PAYORCH_FAKE_TOKEN, which does not show in ps)")
	holdLifetime := fs.Duration("hold-lifetime", fake.DefaultHoldLifetime, "how long holds can be captured")
	state := fs.String("state", "", "file to keep the state in across restarts (default: memory only)")
	webhookURL := fs.String("webhook-url", "", "where to POST its webhooks, e.g. http://127.0.0.1:8080/webhooks/fake (default: none are sent)")
	webhookSecret := fs.String("webhook-secret", cfg.FakeWebhookSecret,
		"secret the webhooks are signed with (default PAYORCH_FAKE_WEBHOOK_SECRET; payorch verifies with the connector's _WEBHOOK_SECRET)")
	publicURL := fs.String("public-url", "", "base URL shoppers' browsers reach it at, for 3-D Secure challenge pages (default: the address payorch calls it by)")
	holdRetention := fs.Duration("hold-retention", fake.DefaultHoldRetention, "how long a hold stays as it is after its last change before it is compacted (its answers unchanged)")
	maxLiveHolds := fs.Int("max-live-holds", fake.DefaultMaxLiveHolds, "at most this many holds stay uncompacted; beyond, those changed longest ago are compacted sooner")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if *token == "" {
		return usageError{"fakeprovider: set PAYORCH_FAKE_TOKEN (or --admin-token) to the bearer secret its clients send, e.g. $(openssl rand -hex 32); payorch finds it in PAYORCH_FAKE_TOKEN too"}
	}
	if *webhookURL != "" && *webhookSecret == "" {
		return usageError{"fakeprovider: --webhook-url needs PAYORCH_FAKE_WEBHOOK_SECRET (or --webhook-secret), the secret payorch verifies them with"}
	}
	return fake.ListenAndServe(ctx, *listen, fake.Config{HoldLifetime: *holdLifetime, Logger: newLogger(cfg), StateFile: *state, Token: *token,
		WebhookURL: *webhookURL, WebhookSecret: *webhookSecret, PublicURL: *publicURL,
		HoldRetention: *holdRetention, MaxLiveHolds: *maxLiveHolds})
}

// newWebhooks wires the webhook endpoints and their delivery worker on
// pool, the primary's pool payments use: deliveries are written with
// their events, and claimed and recorded in transactions of a few
// milliseconds.
func newWebhooks(cfg config, pool *pgxpool.Pool, logger *slog.Logger, tel *telemetry) *webhooks.Service {
	return webhooks.New(webhooks.Config{Pool: pool, Logger: logger, MeterProvider: tel.meterProvider,
		AllowPrivate: cfg.WebhookAllowPrivate, Senders: cfg.WebhookSenders, Timeout: cfg.WebhookTimeout})
}

// newReconciler wires the Reconciler on pool: the back-office pool for
// `serve` and `dev`, the command's only pool for `payorch reconcile`;
// replica (DATABASE_READ_URL, or nil) serves its reads when caught up.
func newReconciler(cfg config, pool, replica *pgxpool.Pool, logger *slog.Logger, provs map[string]providers.Provider,
	tel *telemetry) *reconcile.Reconciler {
	loc, _ := time.LoadLocation(cfg.ReconcileTZ) // validated
	return reconcile.New(reconcile.Config{Pool: pool, Replica: replica, ReplicaMaxWait: readReplicaMaxWait(cfg),
		Providers: provs, Location: loc, Grace: cfg.ReconcileGrace,
		Logger: logger, StuckAfter: max(cfg.ResolverMinAge*10, time.Hour),
		TracerProvider: tel.tracerProvider, MeterProvider: tel.meterProvider})
}

func cmdReconcile(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := newFlagSet("reconcile")
	provider := fs.String("provider", cfg.DefaultProvider, "connector to reconcile")
	date := fs.String("date", "", "business date YYYY-MM-DD (default: yesterday)")
	asJSON := fs.Bool("json", false, "print the run as JSON")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if err := cfg.needStandaloneFakes("reconcile", *provider); err != nil {
		return err
	}
	o, err := openOneShot(ctx, cfg)
	if err != nil {
		return err
	}
	defer o.close()
	replica, err := openReplicaPool(ctx, cfg, o.logger, o.tel)
	if err != nil {
		return err
	}
	if replica != nil {
		defer replica.Close()
	}
	rec := newReconciler(cfg, o.pool, replica, o.logger, o.provs, o.tel)
	day := rec.Yesterday()
	if *date != "" {
		if day, err = reconcile.ParseDate(*date); err != nil {
			return cliError(err)
		}
	}
	run, err := rec.Reconcile(ctx, *provider, day, reconcile.TriggerCLI, "cli")
	if err != nil {
		return cliError(err)
	}
	if *asJSON {
		return printJSON(stdout, run)
	}
	fmt.Fprintf(stdout, "run %d: %s %s version %d %s: local %d, provider %d, matched %d, discrepancies %d (new %d, still open %d, gone %d)\n",
		run.ID, run.Provider, run.BusinessDate, run.Version, run.Status, run.LocalCount, run.ProviderCount, run.MatchedCount,
		run.DiscrepancyCount, run.Diff.New, run.Diff.StillOpen, run.Diff.Gone)
	for _, c := range reconcile.Categories {
		if n := run.CategoryCounts[c]; n > 0 {
			fmt.Fprintf(stdout, "  %-24s %d\n", c, n)
		}
	}
	return nil
}

// needStandaloneFakes checks that each fake connector a one-shot command
// works with (those named, or every active one when none is) has a URL:
// a fake embedded in the command would start empty, knowing none of the
// payments it is asked about.
func (c config) needStandaloneFakes(cmd string, names ...string) error {
	for _, cc := range c.activeConnectors() {
		if cc.Adapter != adapterFake || cc.URL != "" || (len(names) > 0 && !slices.Contains(names, cc.Name)) {
			continue
		}
		return fmt.Errorf("%s: set %s to the fake provider connector %s's payments were made with", cmd, cc.varOf(settingURL), cc.Name)
	}
	return nil
}

// oneShot is what a one-shot command (resolve, reconcile) works with.
type oneShot struct {
	logger *slog.Logger
	tel    *telemetry
	pool   *pgxpool.Pool
	provs  map[string]providers.Provider
	close  func()
}

// openOneShot checks cfg as the command runs it (PAYORCH_ENVIRONMENT
// resolved: no fake in production), then sets up telemetry, the database
// pool and the providers; close releases them in reverse order.
func openOneShot(ctx context.Context, cfg config) (*oneShot, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := &oneShot{logger: newLogger(cfg)}
	tel, err := startTelemetry(ctx, cfg, o.logger)
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, cfg, cfg.DatabaseURL, tel)
	if err != nil {
		tel.stop()
		return nil, err
	}
	provs, stop, err := startProviders(cfg, o.logger, tel)
	if err != nil {
		pool.Close()
		tel.stop()
		return nil, err
	}
	o.tel, o.pool, o.provs = tel, pool, provs
	o.close = func() {
		stop(context.Background())
		pool.Close()
		tel.stop()
	}
	return o, nil
}
