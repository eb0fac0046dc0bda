package orchestrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

// BenchmarkKeyPurge measures the key sweeper on 1,000,000 expired keys
// (issue #18: purge without long locks or bloat), on the durable cluster:
// completed keys with a 600-byte stored answer are written, expired, then
// purged in the sweeper's batches of 1000 (PurgeExpiredKeys, as serve runs
// it), twice over: the second million is written after the first was
// purged and autovacuum-style VACUUM ran, so the sizes show whether the
// space is reused (no bloat) or the table grows. Reports the table's size
// (heap, indexes, TOAST) at each step, the purge rate, and the longest
// batch (how long one DELETE holds its row locks).
func BenchmarkKeyPurge(b *testing.B) {
	const keys = 1_000_000
	ctx := context.Background()
	pool := pgtest.Pool(b, pgtest.DurableURL(b))
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool})
	tenant, _, _, err := svc.CreateTenant(ctx, "purge")
	if err != nil {
		b.Fatal(err)
	}
	size := func() float64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('idempotency_keys')`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return float64(n) / (1 << 20)
	}
	fill := func(round int) {
		if _, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, field_hashes, status, recovery_point,
				payment_id, response_status, response_headers, response_body, created_at, updated_at, expires_at)
			SELECT $1, 'POST /v1/payments', 'purge-' || $2::int || '-' || i, sha256(i::text::bytea), '{"amount_minor":"x","currency":"y"}',
				'completed', 'finished', 'pay_' || md5(i::text), 201, '{"Content-Type":"application/json"}',
				convert_to(repeat(md5(i::text), 19), 'UTF8'), now() - interval '2 days', now() - interval '2 days',
				now() - interval '1 day'
			FROM generate_series(1, $3) i`, tenant.ID, round, keys); err != nil {
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
		fill(2 * i)
		full := size()
		took, longest := purge()
		purged := size()
		vacuum()
		vacuumed := size()
		fill(2*i + 1)
		refilled := size()
		took2, longest2 := purge()
		vacuum()
		b.ReportMetric(full, "MiB_1M_keys")
		b.ReportMetric(purged, "MiB_after_purge")
		b.ReportMetric(vacuumed, "MiB_after_vacuum")
		b.ReportMetric(refilled, "MiB_after_refill")
		b.ReportMetric(size(), "MiB_end")
		b.ReportMetric(float64(2*keys)/(took+took2).Seconds(), "keys_purged/s")
		b.ReportMetric(float64(max(longest, longest2).Microseconds())/1000, "longest_batch_ms")
	}
}
