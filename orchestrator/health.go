package orchestrator

import (
	"context"
	"errors"
	"fmt"
)

// Ready's failures: its error wraps exactly one of them (and the cause).
var (
	// ErrDatabaseUnreachable: the database did not answer a ping.
	ErrDatabaseUnreachable = errors.New("database unreachable")
	// ErrSchemaUnknown: the database's schema version could not be read.
	ErrSchemaUnknown = errors.New("schema version unknown")
	// ErrMigrationsPending: the database's schema is not at the newest
	// migration the binary embeds.
	ErrMigrationsPending = errors.New("migrations pending")
)

// Ready reports whether the Service can serve: nil when the database
// answers a ping and (when Config.SchemaVersions is set) its schema is at
// the newest embedded migration; otherwise an error wrapping
// ErrDatabaseUnreachable, ErrSchemaUnknown or ErrMigrationsPending, checked
// in that order (the schema is not asked about when the database is
// unreachable). ctx bounds the checks.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrDatabaseUnreachable, err)
	}
	if s.schemaVersions == nil {
		return nil
	}
	current, target, err := s.schemaVersions(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrSchemaUnknown, err)
	case current != target:
		return fmt.Errorf("%w: schema at version %d, newest is %d", ErrMigrationsPending, current, target)
	}
	return nil
}
