// Package orchestrator is payorch's domain: tenants and API keys, payments
// and their state machine, the idempotency protocol, the application error
// type and its codes, and Service, the pgx-backed type that does it all on
// PostgreSQL, the system of record.
//
// orchestrator never imports Echo, stripe-go or cron; the HTTP layer
// (httpapi) and the reconciliation job (reconcile) call into it.
package orchestrator

import (
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config wires a Service.
type Config struct {
	// Pool is the connection pool on the primary.
	Pool *pgxpool.Pool
	// Clock returns the current time; defaults to time.Now.
	Clock func() time.Time
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
}

// Service is the pgx-backed implementation of payorch's domain.
type Service struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	logger *slog.Logger
}

// NewService returns a Service on cfg.Pool.
func NewService(cfg Config) *Service {
	s := &Service{pool: cfg.Pool, now: cfg.Clock, logger: cfg.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s
}

// Pool returns the Service's connection pool (for health checks).
func (s *Service) Pool() *pgxpool.Pool { return s.pool }

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
