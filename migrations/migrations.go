// Package migrations holds payorch's schema as plain SQL files, embedded in
// the binary, and applies them with goose v3. A PostgreSQL session advisory
// lock serialises concurrent migrators, so several instances starting at
// once migrate exactly once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// lockID is payorch's advisory lock key for migrations ("payorch" in ASCII,
// truncated), distinct from goose's default so other goose users sharing
// the cluster never wait on us.
const lockID int64 = 0x7061796f726368

// Migrator applies and inspects the embedded migrations on one database.
type Migrator struct {
	db       *sql.DB
	provider *goose.Provider
}

// New returns a Migrator working through pool. Close releases its
// database/sql handle (the pool itself stays open).
func New(pool *pgxpool.Pool) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(lockID),
		lock.WithLockTimeout(1, 600), // try every second for up to ten minutes
		lock.WithUnlockTimeout(1, 60),
	)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{db: db, provider: p}, nil
}

// Close releases the Migrator's database/sql handle.
func (m *Migrator) Close() error { return m.db.Close() }

// Apply applies every pending migration to pool's database, as New and
// Up do (logger as for Up), and returns the versions applied.
func Apply(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) ([]int64, error) {
	m, err := New(pool)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.Up(ctx, logger)
}

// Up applies every pending migration, holding the migration lock, and
// returns the versions it applied (none when another instance got there
// first).
func (m *Migrator) Up(ctx context.Context, logger *slog.Logger) ([]int64, error) {
	results, err := m.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
		if logger != nil {
			logger.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	return applied, nil
}

// Versions returns the database's current version and the newest embedded
// one; the schema is current when they are equal.
func (m *Migrator) Versions(ctx context.Context) (current, target int64, err error) {
	current, target, err = m.provider.GetVersions(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("migrations: versions: %w", err)
	}
	return current, target, nil
}
