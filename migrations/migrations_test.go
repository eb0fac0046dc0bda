package migrations_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/migrations"
)

func TestMain(m *testing.M) {
	// Re-executed as a child by ThreeProcessesMigrateOnce.
	if url := os.Getenv("PAYORCH_MIGRATE_CHILD_URL"); url != "" {
		os.Exit(migrateChild(url))
	}
	pgtest.Main(m)
}

func migrateChild(url string) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	m, err := migrations.New(pool)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer m.Close()
	applied, err := m.Up(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("applied=%d\n", len(applied))
	return 0
}

func up(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	m, err := migrations.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	applied, err := m.Up(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

func TestMigrations(t *testing.T) {
	t.Parallel()

	t.Run("RunningTwiceAppliesNothingTheSecondTime", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t, pgtest.EmptyURL(t))
		first := up(t, pool)
		if len(first) == 0 {
			t.Fatal("first run applied nothing on an empty database")
		}
		if second := up(t, pool); len(second) != 0 {
			t.Fatalf("second run applied %v, want nothing", second)
		}
		m, err := migrations.New(pool)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		cur, target, err := m.Versions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cur != target || cur != first[len(first)-1] {
			t.Fatalf("versions: current %d target %d, last applied %d", cur, target, first[len(first)-1])
		}
	})

	t.Run("FreshDatabaseIsBehind", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t, pgtest.EmptyURL(t))
		m, err := migrations.New(pool)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		cur, target, err := m.Versions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cur >= target {
			t.Fatalf("fresh database: current %d, target %d", cur, target)
		}
	})

	t.Run("ThreeProcessesMigrateOnce", func(t *testing.T) {
		t.Parallel()
		url := pgtest.EmptyURL(t)
		const n = 3
		outs := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "PAYORCH_MIGRATE_CHILD_URL="+url)
				out, err := cmd.CombinedOutput()
				outs[i], errs[i] = string(out), err
			}()
		}
		wg.Wait()
		total := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i])
			}
			var k int
			if _, err := fmt.Sscanf(strings.TrimSpace(outs[i]), "applied=%d", &k); err != nil {
				t.Fatalf("child %d printed %q", i, outs[i])
			}
			total += k
		}
		pool := pgtest.Pool(t, url)
		var rows int
		if err := pool.QueryRow(context.Background(),
			"SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if total != rows || rows == 0 {
			t.Fatalf("children applied %d migrations in total, version table has %d rows: each must be applied exactly once", total, rows)
		}
	})

	t.Run("EveryConstraintIsNamedByConvention", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.DB(t)
		rows, err := pool.Query(context.Background(), `
			SELECT conname, conrelid::regclass::text
			FROM pg_constraint
			WHERE connamespace = 'public'::regnamespace AND conrelid <> 0
			  AND conrelid::regclass::text NOT LIKE 'goose%'
			  -- a partition's copies of its parent's constraints carry
			  -- the parent's names
			  AND conparentid = 0 AND coninhcount = 0`)
		if err != nil {
			t.Fatal(err)
		}
		type con struct{ Name, Table string }
		cons, err := pgx.CollectRows(rows, pgx.RowToStructByPos[con])
		if err != nil {
			t.Fatal(err)
		}
		if len(cons) == 0 {
			t.Fatal("no constraints found")
		}
		for _, c := range cons {
			if !strings.HasPrefix(c.Name, c.Table+"_") {
				t.Errorf("constraint %s on %s is not named <table>_…", c.Name, c.Table)
			}
		}
	})
}
