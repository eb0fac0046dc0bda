package pgtest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Queries counts the statements sent through a pool (CountedPool): every
// query and exec, BEGIN and COMMIT included.
type Queries struct{ n atomic.Int64 }

// Count is the number of statements sent so far.
func (q *Queries) Count() int64 { return q.n.Load() }

// TraceQueryStart implements pgx.QueryTracer.
func (q *Queries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (q *Queries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// CountedPool is Pool whose statements are counted: for tests that bound
// how often something reads the database.
func CountedPool(t testing.TB, dbURL string) (*pgxpool.Pool, *Queries) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	q := &Queries{}
	cfg.ConnConfig.Tracer = q
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, q
}
