package fake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// DefaultAddr is where Start listens when given no address: a free port on
// loopback.
const DefaultAddr = "127.0.0.1:0"

// shutdownGrace bounds ListenAndServe's shutdown.
const shutdownGrace = 10 * time.Second

// Running is a fake provider Server listening and serving with net/http.
type Running struct {
	server *Server
	http   *http.Server
	url    string
	// served is closed when Serve returned, with serveErr.
	served   chan struct{}
	serveErr error
}

// Start listens on addr (DefaultAddr when empty) and serves a NewServer(cfg)
// in the background until Shutdown. It fails if cfg is invalid, its
// StateFile cannot be loaded or addr cannot be listened on.
func Start(addr string, cfg Config) (*Running, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fake: listen on %s: %w", addr, err)
	}
	r := &Running{
		server: s,
		http: &http.Server{
			Handler:           s,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       time.Minute,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		},
		url:    "http://" + ln.Addr().String(),
		served: make(chan struct{}),
	}
	go func() {
		r.serveErr = r.http.Serve(ln)
		close(r.served)
	}()
	return r, nil
}

// URL is the base URL to give NewClient, e.g. "http://127.0.0.1:40321".
func (r *Running) URL() string { return r.url }

// Server is the running Server, for in-process seeding, faults and drift.
func (r *Running) Server() *Server { return r.server }

// Token is the bearer token the server requires (Server.Token).
func (r *Running) Token() string { return r.server.Token() }

// Client returns a Client for this server using hc (see NewClient), sending
// its token.
func (r *Running) Client(hc *http.Client) *Client {
	return NewClient(r.url, hc).WithToken(r.server.Token())
}

// Shutdown stops accepting connections, wakes requests held open by faults
// and waits for in-flight requests until ctx is done. It may be called more
// than once.
func (r *Running) Shutdown(ctx context.Context) error {
	r.server.Close()
	err := r.http.Shutdown(ctx)
	<-r.served
	if err == nil && !errors.Is(r.serveErr, http.ErrServerClosed) {
		err = r.serveErr
	}
	return err
}

// ListenAndServe runs a fake provider on addr until ctx is done, then shuts
// it down gracefully (for `payorch fakeprovider --listen ADDR`). It returns
// nil after a clean shutdown.
func ListenAndServe(ctx context.Context, addr string, cfg Config) error {
	r, err := Start(addr, cfg)
	if err != nil {
		return err
	}
	r.server.log.Info("fake provider listening", "url", r.url)
	select {
	case <-ctx.Done():
	case <-r.served:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	return r.Shutdown(sctx)
}
