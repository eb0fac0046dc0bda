package orchestrator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

// keyPurgeCycles is how many times BenchmarkKeyPurge writes and purges a
// million keys: enough to see whether the indexes level off.
const keyPurgeCycles = 6

// BenchmarkKeyPurge measures the key sweeper on 1,000,000 expired keys
// (the aim: purge without long locks or bloat), on the durable cluster:
// completed keys with a 600-byte stored answer, under random keys (as
// clients' UUIDs are), are written, expired, then purged in the
// sweeper's batches of 1000 (PurgeExpiredKeys, as serve runs it), then
// VACUUM (what autovacuum does), keyPurgeCycles times over, so the sizes
// show whether the space is reused (no bloat) or the table grows cycle
// after cycle. Reports the heap and the indexes (with TOAST in the heap)
// after the first million and after each cycle's purge and vacuum, the
// purge rate, and the longest batch (how long one DELETE holds its row
// locks).
func BenchmarkKeyPurge(b *testing.B) {
	const keys = 1_000_000
	ctx := context.Background()
	pool := pgtest.Pool(b, pgtest.DurableURL(b))
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool})
	tenant, _, _, err := svc.CreateTenant(ctx, "purge")
	if err != nil {
		b.Fatal(err)
	}
	// size is the table's heap (with TOAST) and its indexes, in MiB.
	size := func() (heap, indexes float64) {
		var h, i int64
		if err := pool.QueryRow(ctx, `SELECT pg_table_size('idempotency_keys'), pg_indexes_size('idempotency_keys')`).
			Scan(&h, &i); err != nil {
			b.Fatal(err)
		}
		return float64(h) / (1 << 20), float64(i) / (1 << 20)
	}
	fill := func(round int) {
		if _, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, field_hashes, status, recovery_point,
				payment_id, response_status, response_headers, response_body, created_at, updated_at, expires_at)
			SELECT $1, 'POST /v1/payments', md5($2::int || '-' || i), sha256(i::text::bytea), '{"amount_minor":"x","currency":"y"}',
				'completed', 'finished', 'pay_' || md5(i::text), 201, '{"Content-Type":"application/json"}',
				convert_to(repeat(md5(i::text), 19), 'UTF8'), now() - interval '2 days', now() - interval '2 days',
				now() - interval '1 day'
			FROM generate_series(1, $3) i`, tenant.ID, round, keys); err != nil {
			b.Fatal(err)
		}
		// What autovacuum does after a million inserts. Without
		// statistics a run sat 15 minutes in the purge's first DELETE
		// (planned before autovacuum had analysed the new million).
		if _, err := pool.Exec(ctx, `ANALYZE idempotency_keys`); err != nil {
			b.Fatal(err)
		}
	}
	purge := func() (time.Duration, time.Duration) {
		start, longest := time.Now(), time.Duration(0)
		for {
			t0 := time.Now()
			n, err := svc.PurgeExpiredKeys(ctx, 1000)
			if err != nil {
				b.Fatal(err)
			}
			longest = max(longest, time.Since(t0))
			if n < 1000 {
				return time.Since(start), longest
			}
		}
	}
	vacuum := func() {
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) idempotency_keys`); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		var took, longest time.Duration
		for c := range keyPurgeCycles {
			fill(keyPurgeCycles*i + c)
			if c == 0 {
				heap, idx := size()
				b.ReportMetric(heap, "heap_MiB_1M_keys")
				b.ReportMetric(idx, "index_MiB_1M_keys")
			}
			t, l := purge()
			took, longest = took+t, max(longest, l)
			vacuum()
			heap, idx := size()
			b.ReportMetric(heap, fmt.Sprintf("heap_MiB_after_cycle%d", c+1))
			b.ReportMetric(idx, fmt.Sprintf("index_MiB_after_cycle%d", c+1))
		}
		b.ReportMetric(float64(keyPurgeCycles*keys)/took.Seconds(), "keys_purged/s")
		b.ReportMetric(float64(longest.Microseconds())/1000, "longest_batch_ms")
	}
}
