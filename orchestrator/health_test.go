package orchestrator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/migrations"
	"github.com/payorch/payorch/orchestrator"
)

func TestReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// service returns a Service on dbURL whose schema check is the real
	// migrator's.
	service := func(t *testing.T, dbURL string) *orchestrator.Service {
		t.Helper()
		pool := pgtest.Pool(t, dbURL)
		m, err := migrations.New(pool)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return orchestrator.NewService(orchestrator.Config{Pool: pool, SchemaVersions: m.Versions})
	}

	t.Run("MigratedDatabaseIsReady", func(t *testing.T) {
		t.Parallel()
		if err := service(t, pgtest.URL(t)).Ready(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("UnmigratedDatabaseHasMigrationsPending", func(t *testing.T) {
		t.Parallel()
		if err := service(t, pgtest.EmptyURL(t)).Ready(ctx); !errors.Is(err, orchestrator.ErrMigrationsPending) {
			t.Fatalf("Ready: %v, want migrations pending", err)
		}
	})

	t.Run("WithoutASchemaCheckOnlyTheDatabaseCounts", func(t *testing.T) {
		t.Parallel()
		s := orchestrator.NewService(orchestrator.Config{Pool: pgtest.Pool(t, pgtest.EmptyURL(t))})
		if err := s.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("UnreadableSchemaVersionIsUnknown", func(t *testing.T) {
		t.Parallel()
		cause := errors.New("goose: no version table")
		s := orchestrator.NewService(orchestrator.Config{Pool: pgtest.DB(t),
			SchemaVersions: func(context.Context) (int64, int64, error) { return 0, 0, cause }})
		if err := s.Ready(ctx); !errors.Is(err, orchestrator.ErrSchemaUnknown) || !errors.Is(err, cause) {
			t.Fatalf("Ready: %v, want schema unknown wrapping its cause", err)
		}
	})

	t.Run("UnreachableDatabaseIsReportedAlone", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		asked := false
		s := orchestrator.NewService(orchestrator.Config{Pool: pool,
			SchemaVersions: func(context.Context) (int64, int64, error) { asked = true; return 1, 1, nil }})
		pool.Close()
		err := s.Ready(ctx)
		if !errors.Is(err, orchestrator.ErrDatabaseUnreachable) || errors.Is(err, orchestrator.ErrSchemaUnknown) || asked {
			t.Fatalf("Ready: %v (schema asked: %v), want database unreachable only", err, asked)
		}
	})
}
