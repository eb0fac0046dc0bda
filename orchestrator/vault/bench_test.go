package vault

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
)

// benchVault is a vault with KEKs versions on its own database of the
// durable cluster (fsync, synchronous_commit on), and a tenant.
func benchVault(b *testing.B, versions ...int) (*pgxpool.Pool, *Vault, int64) {
	b.Helper()
	pool := pgtest.Pool(b, pgtest.DurableURL(b))
	var tenant int64
	if err := pool.QueryRow(context.Background(), `INSERT INTO tenants (name) VALUES ('bench') RETURNING id`).Scan(&tenant); err != nil {
		b.Fatal(err)
	}
	return pool, New(Config{Pool: pool, Keys: testKeys(b, versions...)}), tenant
}

// BenchmarkTokenize measures Create: validation, a fresh data key,
// encryption and the one statement that stores the method and its key,
// committed durably; parallel clients (GOMAXPROCS × 8), one new key each
// time. Reports methods/s (the aim: at least 1,000).
func BenchmarkTokenize(b *testing.B) {
	_, v, tenant := benchVault(b, 1)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("bench-%d", n.Add(1))
			if _, err := v.Create(ctx, CreateInput{TenantID: tenant, Key: key, RequestHash: []byte(key), Card: visa()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "methods/s")
}

// BenchmarkRotate measures Rotate from KEK version 1 to 2 over b.N
// payment methods (seeded by COPY, sealed in Go under version 1 as Create
// seals them), 1,000 keys per batch. Reports methods/s and the seconds a
// million would take at that rate (the aim: at most 300).
func BenchmarkRotate(b *testing.B) {
	pool, _, tenant := benchVault(b, 1)
	ctx := context.Background()
	seedSealed(b, pool, testKeys(b, 1), tenant, b.N)
	v := New(Config{Pool: pool, Keys: testKeys(b, 1, 2)})
	b.ResetTimer()
	start := time.Now()
	if err := v.Rotate(ctx, DefaultRotateBatch, nil); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payment_method_keys WHERE kek_version <> 2`).Scan(&left); err != nil || left != 0 {
		b.Fatalf("%d keys not rotated (%v)", left, err)
	}
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "methods/s")
	b.ReportMetric(1e6/rate, "s/1M-methods")
}

// seedSealed stores n payment methods of a tenant, sealed under keys, by
// COPY: the rows Create would write, without its round trip per method.
func seedSealed(b *testing.B, pool *pgxpool.Pool, keys *Keyring, tenant int64, n int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now()
	methods := make([][]any, 0, n)
	wrapped := make([][]any, 0, n)
	fp := keys.Fingerprint(tenant, "4242424242424242")
	for i := range n {
		id := methodID(tenant, fmt.Sprintf("seed-%d", i))
		s, err := keys.sealCard(tenant, id, "4242424242424242", "", "Ada")
		if err != nil {
			b.Fatal(err)
		}
		methods = append(methods, []any{tenant, id, fmt.Sprintf("seed-%d", i), []byte{1}, "card", "visa", "4242",
			12, 2034, fp, map[string]string{}, s.card, now})
		wrapped = append(wrapped, []any{tenant, id, s.kekVersion, s.wrappedKey})
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"payment_methods"}, []string{"tenant_id", "id", "idempotency_key",
		"request_hash", "type", "brand", "last4", "exp_month", "exp_year", "fingerprint", "metadata", "card_ciphertext",
		"created_at"}, pgx.CopyFromRows(methods)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"payment_method_keys"},
		[]string{"tenant_id", "payment_method_id", "kek_version", "wrapped_key"}, pgx.CopyFromRows(wrapped)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE payment_methods, payment_method_keys`); err != nil {
		b.Fatal(err)
	}
}
