package orchestrator

import "github.com/jackc/pgx/v5/pgxpool"

// Pool returns the Service's connection pool, for this package's tests
// that read or arrange rows directly. Production code has no such door:
// the SQL stays in the domain.
func (s *Service) Pool() *pgxpool.Pool { return s.pool }
