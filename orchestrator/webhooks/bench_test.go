package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// BenchmarkWebhookDelivery measures one instance's delivery worker
// draining a backlog: b.N events (of b.N payments, written by the outbox
// trigger as payments write them), one endpoint on loopback that
// answers 200 at once, passes run back to back until none is due. Durable
// cluster (fsync, synchronous_commit on). Reports events/s (the
// aim: at least 1,000).
func BenchmarkWebhookDelivery(b *testing.B) {
	ctx := context.Background()
	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	b.Cleanup(rcv.Close)
	pool := pgtest.Pool(b, pgtest.DurableURL(b))
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool})
	hooks := webhooks.New(webhooks.Config{Pool: pool, AllowPrivate: true})
	tenant, _, _, err := svc.CreateTenant(ctx, fmt.Sprintf("bench-%d", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
		VALUES ($3, $1, $2, '{*}', 'whsec_bench', 'bench', now(), now())`, tenant.ID, rcv.URL, fmt.Sprintf("we_bench_%d", tenant.ID)); err != nil {
		b.Fatal(err)
	}
	// b.N payments, inserted as the service inserts them: the outbox
	// trigger makes each a payment.pending event, delivered to the one
	// endpoint.
	if _, err := pool.Exec(ctx, `
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
			provider, payment_method, description, metadata, created_at, updated_at, route)
		SELECT $1::bigint, 'pay_' || md5($1::bigint::text || '-' || i), 'bench-' || i, '\x00', '{}', 'pending', 100, 'EUR', 'fake',
			'pm_card_visa', '', '{}', now(), now(), '{fake}'
		FROM generate_series(1, $2) i`, tenant.ID, b.N); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for {
		st, err := hooks.DeliverWebhooks(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.Sent == 0 {
			break
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if int(hits.Load()) != b.N {
		b.Fatalf("receiver got %d of %d events", hits.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
