package orchestrator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// BenchmarkWebhookBacklog measures what draining a webhook backlog does to
// concurrent authorizations (the aim: a backlog of 100,000 events
// drains without raising authorize p99 by more than 20%). Durable cluster.
// Phase quiet: benchClients clients authorize for authorizeFor, nothing
// else runs. Phase draining: backlog events (100,000 with -benchtime 1x;
// b.N × 100,000) are written first (payments inserted as the service
// inserts them, each a payment.pending event for one endpoint on loopback
// that answers at once), then the same authorize load runs while one
// delivery worker drains them. Reports each phase's p50 and p99, their
// ratio, and the events delivered during the draining phase. It runs with
// the default senders and with 4 (PAYORCH_WEBHOOK_SENDERS), the throttle
// for an instance that must leave its CPU to payments.
func BenchmarkWebhookBacklog(b *testing.B) {
	for _, senders := range []int{webhooks.DefaultWebhookSenders, 4} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchmarkWebhookBacklog(b, senders) })
	}
}

func benchmarkWebhookBacklog(b *testing.B, senders int) {
	const authorizeFor = 8 * time.Second
	ctx := context.Background()
	w := newBenchWorld(b, pgtest.DurableURL(b))
	svc, done := w.service(b)
	defer done()
	svc2 := webhooks.New(webhooks.Config{Pool: svc.Pool(), AllowPrivate: true, Senders: senders})
	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	b.Cleanup(rcv.Close)
	prefix := fmt.Sprintf("bl%d-", time.Now().UnixNano())
	var seq atomic.Int64
	load := func() []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		stop := time.Now().Add(authorizeFor)
		for range benchClients {
			wg.Go(func() {
				for time.Now().Before(stop) {
					start := time.Now()
					if err := w.authorize(svc, prefix+fmt.Sprint(seq.Add(1)), true); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(start)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(lat)
		return lat
	}
	pct := func(xs []time.Duration, p float64) float64 {
		return float64(xs[int(p*float64(len(xs)-1))].Microseconds()) / 1000
	}
	b.ResetTimer()
	quiet := load()

	b.StopTimer()
	tenant, _, _, err := svc.CreateTenant(ctx, prefix+"backlog")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := svc.Pool().Exec(ctx, `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
		VALUES ($3, $1, $2, '{*}', 'whsec_bench', 'bench', now(), now())`, tenant.ID, rcv.URL, "we_"+prefix); err != nil {
		b.Fatal(err)
	}
	backlog := 100_000 * b.N
	if _, err := svc.Pool().Exec(ctx, `
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
			provider, payment_method, description, metadata, created_at, updated_at, route)
		SELECT $1::bigint, 'pay_' || md5($1::bigint::text || '-' || i), 'backlog-' || i, '\x00', '{}', 'pending', 100, 'EUR',
			'fake', 'pm_card_visa', '', '{}', now(), now(), '{fake}'
		FROM generate_series(1, $2) i`, tenant.ID, backlog); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.Pool().Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()

	wctx, cancel := context.WithCancel(ctx)
	var workers sync.WaitGroup
	workers.Go(func() {
		for wctx.Err() == nil {
			if st, err := svc2.DeliverWebhooks(wctx); err != nil && wctx.Err() == nil {
				b.Error(err)
				return
			} else if st.Sent == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	draining := load()
	delivered := hits.Load()
	cancel()
	workers.Wait()
	b.StopTimer()

	b.ReportMetric(pct(quiet, 0.5), "quiet_p50_ms")
	b.ReportMetric(pct(quiet, 0.99), "quiet_p99_ms")
	b.ReportMetric(pct(draining, 0.5), "draining_p50_ms")
	b.ReportMetric(pct(draining, 0.99), "draining_p99_ms")
	b.ReportMetric(pct(draining, 0.99)/pct(quiet, 0.99), "p99_ratio")
	b.ReportMetric(float64(delivered), "delivered_while_authorizing")
	b.ReportMetric(float64(len(quiet))/authorizeFor.Seconds(), "quiet_req/s")
	b.ReportMetric(float64(len(draining))/authorizeFor.Seconds(), "draining_req/s")
}
