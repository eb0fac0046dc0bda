// Package orchestrator is payorch's domain: tenants and API keys, payments
// and their state machine, the idempotency protocol, the application error
// type and its codes, and Service, the pgx-backed type that does it all on
// PostgreSQL, the system of record.
//
// orchestrator never imports Echo, stripe-go or cron; the HTTP layer
// (httpapi) and the reconciliation job (reconcile) call into it.
package orchestrator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/providers"
)

// Config wires a Service.
type Config struct {
	// Pool is the connection pool on the primary.
	Pool *pgxpool.Pool
	// SchemaVersions returns the database's schema version and the newest
	// one the binary embeds (migrations.Migrator.Versions); Ready checks
	// they are equal. Nil skips that check.
	SchemaVersions func(ctx context.Context) (current, target int64, err error)
	// Clock returns the current time; defaults to time.Now.
	Clock func() time.Time
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Providers by name; DefaultProvider is used when a request names none.
	Providers       map[string]providers.Provider
	DefaultProvider string
	// ProviderTimeout bounds one provider call. Defaults to 15s.
	ProviderTimeout time.Duration
	// Lease is how long a request holds an idempotency key before another
	// may take it over; longer than any provider call. Defaults to 60s.
	Lease time.Duration
	// KeyTTL is how long an idempotency key is kept (SPEC: default 24h, at
	// most 72h).
	KeyTTL time.Duration
	// TracerProvider makes the span of each provider call; nil means no
	// spans (the OpenTelemetry no-op).
	TracerProvider trace.TracerProvider
	// ReplayCache is how many completed idempotency keys each instance
	// keeps in memory to answer replays without reading the database
	// (replaycache.go); 0 turns it off.
	ReplayCache int
	// MeterProvider takes the Service's metrics: provider call durations,
	// lease takeovers, purged keys and the pending gauges (computed from
	// the database when collected). Nil means no metrics.
	MeterProvider metric.MeterProvider
}

// Service is the pgx-backed implementation of payorch's domain.
type Service struct {
	pool            *pgxpool.Pool
	schemaVersions  func(context.Context) (current, target int64, err error)
	now             func() time.Time
	logger          *slog.Logger
	providers       map[string]providers.Provider
	defaultProvider string
	providerTimeout time.Duration
	lease           time.Duration
	keyTTL          time.Duration
	tel             *telemetry
	// replays holds completed keys for replays; nil when off.
	replays *replayCache

	// keys caches valid API keys while StartKeyCache's listener runs.
	keys          *keyCache
	keyListenerMu sync.Mutex
	keyListenerOn bool
	// keyListenerDial opens the cache's listener connection; nil means
	// keyListenerConn (tests stand in for it).
	keyListenerDial func(context.Context) (*pgx.Conn, error)
}

// NewService returns a Service on cfg.Pool.
func NewService(cfg Config) *Service {
	s := &Service{pool: cfg.Pool, now: cfg.Clock, logger: cfg.Logger, providers: cfg.Providers,
		defaultProvider: cfg.DefaultProvider, providerTimeout: cfg.ProviderTimeout, lease: cfg.Lease, keyTTL: cfg.KeyTTL,
		keys: newKeyCache(keyCacheMaxEntries, keyCacheMaxAge), replays: newReplayCache(cfg.ReplayCache)}
	s.schemaVersions = cfg.SchemaVersions
	if s.providerTimeout == 0 {
		s.providerTimeout = 15 * time.Second
	}
	if s.lease == 0 {
		s.lease = 60 * time.Second
	}
	if s.keyTTL == 0 {
		s.keyTTL = DefaultKeyTTL
	}
	if s.keyTTL > MaxKeyTTL {
		s.keyTTL = MaxKeyTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var err error
	if s.tel, err = newTelemetry(s, cfg.TracerProvider, cfg.MeterProvider); err != nil {
		s.logger.Warn("orchestrator: telemetry instruments", "error", err)
	}
	return s
}

// Idempotency key lifetimes (SPEC: Idempotency protocol).
const (
	DefaultKeyTTL = 24 * time.Hour
	MaxKeyTTL     = 72 * time.Hour
)

// PostgreSQL error codes translated at the storage edge.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
	pgCheckViolation      = "23514"
)

// constraintOf returns the SQLSTATE and constraint name of a PostgreSQL
// error, or "" for any other error.
func constraintOf(err error) (code, constraint string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.ConstraintName
	}
	return "", ""
}

// isNoRows reports whether err is pgx's "no rows" error.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
