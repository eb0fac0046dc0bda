package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

// footprintTables are the tables a payment writes to, by the capacity
// model (docs/capacity.md).
var footprintTables = []string{"payments", "payment_attempts", "payment_events", "payment_operations", "idempotency_keys",
	"events", "webhook_deliveries"}

// BenchmarkFootprint measures what one payment costs the database, for the
// capacity model (docs/operations.md, Capacity), on the durable
// cluster: footprintPayments authorizations (16 at once, each under its
// key, with the merchant's one webhook endpoint registered so each event
// has a delivery row, not sent) then a capture of each (keyed too). It
// reports, per payment, how much each table grew (heap, indexes and TOAST,
// as on disk, before any vacuum) and the WAL written per authorize and per
// capture (pg_current_wal_lsn; the durable cluster runs nothing else
// meanwhile). b.N repeats the whole; run it with -benchtime 1x.
func BenchmarkFootprint(b *testing.B) {
	const footprintPayments = 20_000
	ctx := context.Background()
	w := newBenchWorld(b, pgtest.DurableURL(b))
	svc, done := w.service(b)
	defer done()
	pool := svc.Pool()
	if _, err := pool.Exec(ctx, `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
		VALUES ('we_footprint', $1, 'https://hooks.example.com/payorch', '{*}', 'whsec_footprint', 'bench', now(), now())`,
		w.tenant); err != nil {
		b.Fatal(err)
	}
	sizes := func() map[string]int64 {
		out := map[string]int64{}
		for _, t := range footprintTables {
			var n int64
			// A partitioned table's size is its partitions'.
			if err := pool.QueryRow(ctx, `
				SELECT pg_total_relation_size($1::regclass)
					+ coalesce((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = $1::regclass), 0)`,
				t).Scan(&n); err != nil {
				b.Fatal(err)
			}
			out[t] = n
		}
		return out
	}
	wal := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	capFP, err := orchestrator.NewFingerprint(orchestrator.OpCapture, map[string]string{"id": "x"}, []byte(`{}`))
	if err != nil {
		b.Fatal(err)
	}
	each := func(n int, do func(i int) error) {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for c := range 16 {
			wg.Go(func() {
				for i := c; i < n; i += 16 {
					if err := do(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	for run := range b.N {
		prefix := fmt.Sprintf("fp%d-%d-", w.runs.Add(1), run)
		s0, w0 := sizes(), wal()
		each(footprintPayments, func(i int) error { return w.authorize(svc, prefix+fmt.Sprint(i), true) })
		s1, w1 := sizes(), wal()
		each(footprintPayments, func(i int) error {
			key := prefix + fmt.Sprint(i)
			id := orchestrator.PaymentID(w.tenant, key)
			begin, err := svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{TenantID: w.tenant,
				Operation: orchestrator.OpCapture, Key: key + "-cap", Fingerprint: capFP})
			if err != nil || begin.Claim == nil {
				return fmt.Errorf("capture %s: not claimed: %v", key, err)
			}
			c := begin.Claim
			out, err := svc.Capture(ctx, c, orchestrator.OperationInput{TenantID: w.tenant, PaymentID: id, Key: key + "-cap"})
			if err != nil || out.Payment.Status != orchestrator.StatusCaptured {
				return fmt.Errorf("capture %s: %+v %v", key, out.Payment, err)
			}
			if c.Completed() != nil {
				return nil
			}
			res, _, err := c.Answer(id, out, nil)
			if err != nil {
				return err
			}
			return svc.CompleteIdempotent(ctx, c, id, res)
		})
		s2, w2 := sizes(), wal()
		var total int64
		for _, t := range footprintTables {
			d := s2[t] - s0[t]
			total += d
			b.ReportMetric(float64(d)/footprintPayments, t+"_B/payment")
		}
		b.ReportMetric(float64(total)/footprintPayments, "total_B/payment")
		b.ReportMetric(float64(w1-w0)/footprintPayments, "WAL_B/authorize")
		b.ReportMetric(float64(w2-w1)/footprintPayments, "WAL_B/capture")
		var authorized int64
		for _, t := range footprintTables {
			authorized += s1[t] - s0[t]
		}
		b.ReportMetric(float64(authorized)/footprintPayments, "authorized_B/payment")
	}
}
