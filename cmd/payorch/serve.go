package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/migrations"
	"github.com/payorch/payorch/orchestrator"
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
	pool, err := openPool(ctx, cfg, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	return serveAPI(ctx, cfg, pool, logger, nil)
}

// serveAPI migrates (unless told not to), listens on cfg.Listen, calls
// ready (if set) with the bound address, and serves until ctx is done.
func serveAPI(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger, ready func(addr string)) error {
	if cfg.AutoMigrate {
		if err := migrate(ctx, pool, logger); err != nil {
			return err
		}
	}
	m, err := migrations.New(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Logger: logger})
	srv := httpapi.New(httpapi.Config{
		Service:         svc,
		Migrator:        m,
		Logger:          logger,
		RateLimit:       cfg.RateLimit,
		ShutdownTimeout: cfg.ShutdownTimeout,
	})
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	logger.Info("payorch serving", "addr", l.Addr().String(), "version", buildVersion())
	if ready != nil {
		ready(l.Addr().String())
	}
	if err := srv.Serve(ctx, l); err != nil {
		return err
	}
	logger.Info("payorch stopped")
	return nil
}
