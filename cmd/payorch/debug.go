package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startDebug serves Go's profiler on cfg.DebugListen (a loopback address,
// checked by validate) until the returned stop is called; it does nothing
// when DebugListen is empty. It is separate from the API so that no API
// route, middleware or key ever reaches it.
func startDebug(cfg config, logger *slog.Logger) (stop func(), err error) {
	if cfg.DebugListen == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	l, err := net.Listen("tcp", cfg.DebugListen)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("debug listener stopped", "error", err)
		}
	}()
	logger.Info("profiler listening", "addr", l.Addr().String(), "path", "/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
