package orchestrator

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/internal/otelx"
	"github.com/payorch/payorch/providers"
)

// InstrumentationName names the tracer and meter of this package.
const InstrumentationName = "github.com/payorch/payorch/orchestrator"

// Attribute keys of the provider call span. Metric attributes are plain
// Prometheus-style labels (provider, operation, outcome).
const (
	attrProvider     = attribute.Key("payorch.provider")
	attrOperation    = attribute.Key("payorch.operation")
	attrOutcome      = attribute.Key("payorch.outcome")
	attrForwardedKey = attribute.Key("payorch.forwarded_key")
	attrPaymentID    = attribute.Key("payorch.payment_id")
	attrTenantID     = attribute.Key("payorch.tenant_id")
)

// Bucket boundaries, in seconds, of the latency histograms: from a
// loopback call to the provider timeout and the idempotency lease.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60}

// LatencyBuckets returns the bucket boundaries (seconds) payorch uses for
// request and provider-call latencies, so every package shares them.
func LatencyBuckets() []float64 { return append([]float64(nil), latencyBuckets...) }

// Pending gauges are computed from the database when scraped, at most once
// per pendingCacheFor and within pendingQueryTimeout.
const (
	pendingCacheFor     = 10 * time.Second
	pendingQueryTimeout = 2 * time.Second
)

// telemetry is the Service's tracer and instruments.
type telemetry struct {
	tracer       trace.Tracer
	providerCall metric.Float64Histogram
	takeovers    metric.Int64Counter
	purged       metric.Int64Counter
	failovers    metric.Int64Counter
	holds        metric.Int64Counter
	breakerState metric.Int64ObservableGauge

	pendingPayments   metric.Int64ObservableGauge
	pendingOperations metric.Int64ObservableGauge
	pendingOldest     metric.Float64ObservableGauge
	webhookBacklog    metric.Int64ObservableGauge
	webhookOldest     metric.Float64ObservableGauge

	pending otelx.Reading[PendingStats]
}

// newTelemetry creates the Service's instruments on tp and mp (nil: no-op)
// and registers the pending gauges' callback.
func newTelemetry(s *Service, tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	t := &telemetry{pending: otelx.Reading[PendingStats]{Every: pendingCacheFor, Timeout: pendingQueryTimeout, Read: s.Pending}}
	var m metric.Meter
	t.tracer, m = otelx.Instruments(InstrumentationName, tp, mp)
	var errs [13]error
	t.providerCall, errs[0] = m.Float64Histogram("payorch.provider_call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of provider calls by provider, operation and outcome (ok, declined, rejected, not_executed, unknown)."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	t.takeovers, errs[1] = m.Int64Counter("payorch.idempotency.takeovers", metric.WithUnit("{takeover}"),
		metric.WithDescription("Idempotency leases taken over from an expired (crashed or stuck) owner."))
	t.purged, errs[2] = m.Int64Counter("payorch.idempotency.keys_purged", metric.WithUnit("{key}"),
		metric.WithDescription("Expired idempotency keys deleted by the sweeper."))
	t.pendingPayments, errs[3] = m.Int64ObservableGauge("payorch.pending.payments", metric.WithUnit("{payment}"),
		metric.WithDescription("Payments whose provider answer is not known yet (whole database)."))
	t.pendingOperations, errs[4] = m.Int64ObservableGauge("payorch.pending.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Captures, cancels and refunds whose provider answer is not known yet (whole database)."))
	t.pendingOldest, errs[5] = m.Float64ObservableGauge("payorch.pending.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending payment or operation; 0 when nothing is pending."))
	t.failovers, errs[7] = m.Int64Counter("payorch.connector.failovers", metric.WithUnit("{failover}"),
		metric.WithDescription("Payments moved to the next connector of their route, by connector left (from), connector tried (to) and reason (the code that made it safe)."))
	t.breakerState, errs[8] = m.Int64ObservableGauge("payorch.connector.breaker_state", metric.WithUnit("{state}"),
		metric.WithDescription("Health breaker of each connector in this instance: 0 closed, 1 half-open (probing), 2 open (skipped)."))
	_, errs[9] = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, h := range s.ConnectorHealth() {
			o.ObserveInt64(t.breakerState, breakerGauge[h.Breaker], metric.WithAttributes(attribute.String("connector", h.Name)))
		}
		return nil
	}, t.breakerState)
	t.webhookBacklog, errs[10] = m.Int64ObservableGauge("payorch.webhook.undelivered", metric.WithUnit("{delivery}"),
		metric.WithDescription("Webhook deliveries not yet delivered nor given up (whole database)."))
	t.webhookOldest, errs[11] = m.Float64ObservableGauge("payorch.webhook.oldest_undelivered_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest webhook delivery not yet delivered nor given up; 0 when none."))
	t.holds, errs[12] = m.Int64Counter("payorch.holds", metric.WithUnit("{hold}"),
		metric.WithDescription("What the hold sweeper did, by event: expiring (payment.hold_expiring sent), expired (a lapsed hold found and confirmed at the provider), extended (the provider's deadline was later), on_expiry_capture and on_expiry_cancel (the action started)."))
	if s.pool != nil {
		_, errs[6] = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
			st, ok := s.pendingCached(ctx)
			if ok {
				o.ObserveInt64(t.pendingPayments, int64(st.Payments))
				o.ObserveInt64(t.pendingOperations, int64(st.Operations))
				o.ObserveFloat64(t.pendingOldest, st.OldestAge.Seconds())
				o.ObserveInt64(t.webhookBacklog, int64(st.Deliveries))
				o.ObserveFloat64(t.webhookOldest, st.OldestDeliveryAge.Seconds())
			}
			return nil
		}, t.pendingPayments, t.pendingOperations, t.pendingOldest, t.webhookBacklog, t.webhookOldest)
	}
	return t, errors.Join(errs[:]...)
}

// breakerGauge is the value of the breaker-state gauge of each state.
var breakerGauge = map[BreakerState]int64{BreakerClosed: 0, BreakerHalfOpen: 1, BreakerOpen: 2}

// hold counts one thing the hold sweeper did.
func (t *telemetry) hold(ctx context.Context, event string) {
	t.holds.Add(ctx, 1, metric.WithAttributes(attribute.String("event", event)))
}

// failedOver counts a payment moved from one connector to the next.
func (t *telemetry) failedOver(ctx context.Context, from, to, reason string) {
	t.failovers.Add(ctx, 1, metric.WithAttributes(attribute.String("from", from), attribute.String("to", to),
		attribute.String("reason", reason)))
}

// pendingCached returns Pending as t.pending keeps it. ok is false when
// the database could not answer: the gauges are then left out rather than
// reported stale.
func (s *Service) pendingCached(ctx context.Context) (PendingStats, bool) {
	st, err := s.tel.pending.Get(ctx)
	if err != nil {
		s.logger.WarnContext(ctx, "pending gauges: database did not answer", "error", err)
		return st, false
	}
	return st, true
}

// startProviderSpan starts the span of one provider call.
func (t *telemetry) startProviderSpan(ctx context.Context, p Payment, operation, fwd string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "provider "+operation, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrProvider.String(p.Provider), attrOperation.String(operation),
			attrForwardedKey.String(fwd), attrPaymentID.String(p.ID), attrTenantID.Int64(p.TenantID)))
}

// endProviderCall records the outcome of a provider call on its span and
// in the duration histogram, and ends the span. Declines are answers, not
// errors; everything else that is not ok marks the span as failed.
func (t *telemetry) endProviderCall(ctx context.Context, span trace.Span, p Payment, operation, outcome string, err error, d time.Duration) {
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil && providers.KindOf(err) != providers.KindDeclined {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
	t.providerCall.Record(ctx, d.Seconds(), metric.WithAttributes(
		attribute.String("provider", p.Provider), attribute.String("operation", operation), attribute.String("outcome", outcome)))
}
