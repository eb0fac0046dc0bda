package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// startMetrics serves h at /metrics, and nothing else, on
// cfg.MetricsListen until the returned stop is called: Prometheus scrapes
// it there while the API's address (public, behind a proxy) no longer
// answers /metrics. It is plain HTTP, for the scrapers' network.
func startMetrics(cfg config, logger *slog.Logger, h http.Handler) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	l, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener stopped", "error", err)
		}
	}()
	logger.Info("metrics listening", "addr", l.Addr().String(), "path", "/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
