package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/migrations"
	"github.com/payorch/payorch/orchestrator"
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
	tlsConfig, err := loadTLS(cfg)
	if err != nil {
		return err
	}
	var publicURL *url.URL
	if cfg.PublicURL != "" {
		if publicURL, err = cfg.publicURL(); err != nil {
			return err
		}
	}
	if cfg.AutoMigrate {
		if err := migrateDirect(ctx, cfg, pool, logger); err != nil {
			return err
		}
	}
	m, err := migrations.New(pool)
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
	svc, err := newService(cfg, pool, logger, provs, tel, m.Versions)
	if err != nil {
		return err
	}
	switch {
	case cfg.APIKeyCache && cfg.listenURL() == "":
		logger.Warn("api key cache off: PAYORCH_DATABASE_POOLER=transaction and no DATABASE_DIRECT_URL to LISTEN on; " +
			"every request reads its key, and every authorization its routing, from the database")
	case cfg.APIKeyCache:
		// Revocations reach it by NOTIFY; off whenever its listener is down.
		stopKeyCache := svc.StartKeyCache(context.WithoutCancel(ctx))
		defer stopKeyCache()
	}
	stopDebug, err := startDebug(cfg, logger)
	if err != nil {
		return fmt.Errorf("PAYORCH_DEBUG_LISTEN: %w", err)
	}
	defer stopDebug()
	// /metrics on its own address, or on the API's.
	metricsHandler, metricsAt := tel.metrics, "/metrics"
	if cfg.MetricsListen != "" {
		stopMetrics, err := startMetrics(cfg, logger, tel.metrics)
		if err != nil {
			return fmt.Errorf("PAYORCH_METRICS_LISTEN: %w", err)
		}
		defer stopMetrics()
		metricsHandler, metricsAt = nil, cfg.MetricsListen+"/metrics"
	}

	// Background services: settle pending payments, purge expired keys.
	// Several instances may run them at once (SKIP LOCKED).
	var workers []*orchestrator.Worker
	if cfg.ResolverInterval > 0 {
		workers = append(workers, orchestrator.NewWorker("resolver", cfg.ResolverInterval, cfg.ResolverInterval+cfg.ProviderTimeout*4, logger,
			func(ctx context.Context) error {
				st, err := svc.ResolvePending(ctx, cfg.ResolverMinAge, 100)
				if st.Examined > 0 {
					logger.InfoContext(ctx, "resolver pass", "examined", st.Examined, "settled", st.Settled, "still_pending", st.Pending, "errors", st.Errors)
				}
				return err
			}))
	}
	if cfg.WebhookInterval > 0 {
		workers = append(workers, orchestrator.NewWorker("webhooks", cfg.WebhookInterval, 2*orchestrator.WebhookTimeout+time.Minute, logger,
			func(ctx context.Context) error {
				// Passes follow each other at once while they find work,
				// for up to 30 s (a pass claims for 10 s, then waits at
				// most one send timeout for those in flight: well within
				// the run's timeout; sends cut short by it are not
				// recorded, and go again when their leases end).
				for start := time.Now(); time.Since(start) < 30*time.Second; {
					st, err := svc.DeliverWebhooks(ctx)
					if err != nil || st.Sent == 0 {
						return err
					}
				}
				return nil
			}))
	}
	// History: next months' partitions made ahead, old ones dropped past
	// the retention (hourly; every instance, serialised in the database).
	workers = append(workers, orchestrator.NewWorker("history", time.Hour, time.Minute, logger,
		func(ctx context.Context) error {
			m, err := svc.MaintainHistory(ctx, orchestrator.HistoryRetention{Payments: cfg.HistoryRetentionMonths,
				Events: cfg.EventsRetentionMonths})
			if m != (orchestrator.HistoryMaintenance{}) {
				logger.InfoContext(ctx, "history partitions", "created", m.Created, "dropped", m.Dropped)
			}
			return err
		}))
	if cfg.HoldSweepInterval > 0 {
		// Holds: warn before the deadline, act on it, expire at it.
		workers = append(workers, orchestrator.NewWorker("hold-sweeper", cfg.HoldSweepInterval,
			cfg.HoldSweepInterval+cfg.ProviderTimeout*4, logger,
			func(ctx context.Context) error {
				st, err := svc.SweepHolds(ctx)
				if st != (orchestrator.HoldStats{}) {
					logger.InfoContext(ctx, "hold sweeper pass", "warned", st.Warned, "acted", st.Acted,
						"expired", st.Expired, "extended", st.Extended, "errors", st.Errors)
				}
				return err
			}))
	}
	if cfg.SweepInterval > 0 {
		workers = append(workers, orchestrator.NewWorker("key-sweeper", cfg.SweepInterval, time.Minute, logger,
			func(ctx context.Context) error {
				total := 0
				for {
					n, err := svc.PurgeExpiredKeys(ctx, 1000)
					total += n
					if err != nil || n < 1000 {
						if total > 0 {
							logger.InfoContext(ctx, "expired idempotency keys purged", "count", total)
						}
						return err
					}
				}
			}))
	}
	replica, err := openReplicaPool(ctx, cfg, logger, tel)
	if err != nil {
		return err
	}
	if replica != nil {
		defer replica.Close()
	}
	rec := newReconciler(cfg, backoffice, replica, logger, provs, tel)
	if cfg.SweepInterval > 0 {
		// A run whose instance died is recorded failed, and announced.
		workers = append(workers, orchestrator.NewWorker("abandoned-runs", cfg.SweepInterval, time.Minute, logger,
			func(ctx context.Context) error {
				n, err := rec.FailAbandoned(ctx)
				if n > 0 {
					logger.WarnContext(ctx, "abandoned reconciliation runs recorded failed", "count", n)
				}
				return err
			}))
	}
	for _, w := range workers {
		w.Start(context.WithoutCancel(ctx))
	}
	defer func() {
		for _, w := range workers {
			w.Stop()
		}
	}()

	if cfg.ReconcileSchedule != "off" {
		sched, err := reconcile.NewScheduler(rec, cfg.ReconcileSchedule, time.Hour)
		if err != nil {
			return fmt.Errorf("PAYORCH_RECONCILE_SCHEDULE: %w", err)
		}
		sched.Start(context.WithoutCancel(ctx))
		defer sched.Stop()
	}

	signInLimit := cfg.ConsoleSignInLimit
	if signInLimit == 0 {
		signInLimit = -1 // off
	}
	srv := httpapi.New(httpapi.Config{
		Reconciler:       rec,
		Service:          svc,
		Logger:           logger,
		RateLimit:        cfg.RateLimit,
		ShutdownTimeout:  cfg.ShutdownTimeout,
		ExecutionTimeout: cfg.IdempotencyLease - cfg.ProviderTimeout/2,
		TracerProvider:   tel.tracerProvider,
		MeterProvider:    tel.meterProvider,
		MetricsHandler:   metricsHandler,

		ConsoleSignInLimit: signInLimit,
		TrustedProxies:     cfg.TrustedProxies,
		PublicURL:          publicURL,
		TLSConfig:          tlsConfig,
	})
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
// lets its readiness check (/readyz) see whether migrations are current.
// The key cache's listener connects to cfg.listenURL() when that is not
// DATABASE_URL (DATABASE_DIRECT_URL).
func newService(cfg config, pool *pgxpool.Pool, logger *slog.Logger, provs map[string]providers.Provider, tel *telemetry,
	schemaVersions func(context.Context) (current, target int64, err error)) (*orchestrator.Service, error) {
	var listen *pgx.ConnConfig
	if u := cfg.listenURL(); u != "" && u != cfg.DatabaseURL {
		var err error
		if listen, err = pgx.ParseConfig(u); err != nil {
			return nil, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
	}
	return orchestrator.NewService(orchestrator.Config{
		Pool:                pool,
		ListenConfig:        listen,
		SchemaVersions:      schemaVersions,
		Logger:              logger,
		Providers:           provs,
		DefaultProvider:     cfg.DefaultProvider,
		Connectors:          cfg.connectorOptions(),
		MaxAttempts:         cfg.MaxAttempts,
		WebhookAllowPrivate: cfg.WebhookAllowPrivate,
		WebhookSenders:      cfg.WebhookSenders,
		WebhookTimeout:      cfg.WebhookTimeout,
		HoldExpiringLead:    cfg.HoldExpiringLead,
		HoldActionLead:      cfg.HoldActionLead,
		Breaker:             cfg.Breaker,
		ProviderTimeout:     cfg.ProviderTimeout,
		Lease:               cfg.IdempotencyLease,
		KeyTTL:              cfg.IdempotencyTTL,
		ReplayCache:         cfg.ReplayCache,
		TracerProvider:      tel.tracerProvider,
		MeterProvider:       tel.meterProvider,
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
	svc, err := newService(cfg, o.pool, o.logger, o.provs, o.tel, nil)
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
		WebhookURL: *webhookURL, WebhookSecret: *webhookSecret})
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
