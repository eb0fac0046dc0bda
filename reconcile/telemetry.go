package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/internal/otelx"
)

// InstrumentationName names the tracer and meter of this package.
const InstrumentationName = "github.com/payorch/payorch/reconcile"

// The gauges of the last runs are read from the database when collected,
// at most once per lastRunsCacheFor (runs happen daily) and within
// lastRunsQueryTimeout. Every instance reports the same values, so alert
// on max by (provider, …).
const (
	lastRunsCacheFor     = time.Minute
	lastRunsQueryTimeout = 5 * time.Second
)

// runBuckets are the bucket boundaries (seconds) of the run duration
// histogram: from a quiet test day to a million-payment day.
var runBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}

type telemetry struct {
	tracer      trace.Tracer
	runDuration metric.Float64Histogram

	discrepancies metric.Int64ObservableGauge
	lastSuccess   metric.Float64ObservableGauge

	last otelx.Reading[[]lastRun]
}

// lastRun is the latest succeeded run of one provider and its open
// (unresolved) discrepancies by category.
type lastRun struct {
	provider   string
	finishedAt time.Time
	open       map[string]int64
}

func newTelemetry(r *Reconciler, tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	t := &telemetry{last: otelx.Reading[[]lastRun]{Every: lastRunsCacheFor, Timeout: lastRunsQueryTimeout, Read: r.lastRuns}}
	var m metric.Meter
	t.tracer, m = otelx.Instruments(InstrumentationName, tp, mp)
	var errs [4]error
	t.runDuration, errs[0] = m.Float64Histogram("payorch.reconciliation.run.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of reconciliation runs executed by this instance, by provider and status (succeeded, failed)."),
		metric.WithExplicitBucketBoundaries(runBuckets...))
	t.discrepancies, errs[1] = m.Int64ObservableGauge("payorch.reconciliation.discrepancies", metric.WithUnit("{discrepancy}"),
		metric.WithDescription("Open (unresolved) discrepancies of each provider's latest succeeded run, by category."))
	t.lastSuccess, errs[2] = m.Float64ObservableGauge("payorch.reconciliation.last_success_timestamp", metric.WithUnit("s"),
		metric.WithDescription("Unix time at which each provider's latest succeeded reconciliation run finished."))
	if r.pool != nil {
		_, errs[3] = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
			runs, ok := r.lastRunsCached(ctx)
			if !ok {
				return nil
			}
			for _, lr := range runs {
				p := attribute.String("provider", lr.provider)
				o.ObserveFloat64(t.lastSuccess, float64(lr.finishedAt.UnixNano())/1e9, metric.WithAttributes(p))
				for _, c := range Categories {
					o.ObserveInt64(t.discrepancies, lr.open[c], metric.WithAttributes(p, attribute.String("category", c)))
				}
			}
			return nil
		}, t.discrepancies, t.lastSuccess)
	}
	return t, errors.Join(errs[:]...)
}

// lastRunsCached returns lastRuns as t.last keeps it. ok is false when
// the database could not answer.
func (r *Reconciler) lastRunsCached(ctx context.Context) ([]lastRun, bool) {
	runs, err := r.tel.last.Get(ctx)
	if err != nil {
		r.logger.WarnContext(ctx, "reconciliation gauges: database did not answer", "error", err)
		return nil, false
	}
	return runs, true
}

// lastRuns reads each provider's latest succeeded run and counts its
// unresolved discrepancies by category.
func (r *Reconciler) lastRuns(ctx context.Context) ([]lastRun, error) {
	const q = `
		SELECT lr.provider, lr.finished_at, d.category, coalesce(d.n, 0)
		FROM (SELECT DISTINCT ON (provider) id, provider, finished_at FROM reconciliation_runs
			WHERE status = 'succeeded' ORDER BY provider, finished_at DESC) lr
		LEFT JOIN LATERAL (SELECT category, count(*) AS n FROM reconciliation_discrepancies
			WHERE run_id = lr.id AND resolved_at IS NULL GROUP BY category) d ON true
		ORDER BY lr.provider`
	rows, err := r.pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("reconcile: last runs: %w", err)
	}
	defer rows.Close()
	var runs []lastRun
	for rows.Next() {
		var (
			provider string
			finished time.Time
			category *string
			n        int64
		)
		if err := rows.Scan(&provider, &finished, &category, &n); err != nil {
			return nil, fmt.Errorf("reconcile: last runs: %w", err)
		}
		if len(runs) == 0 || runs[len(runs)-1].provider != provider {
			runs = append(runs, lastRun{provider: provider, finishedAt: finished, open: map[string]int64{}})
		}
		if category != nil {
			runs[len(runs)-1].open[*category] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reconcile: last runs: %w", err)
	}
	return runs, nil
}

// startRunSpan starts the span of one run's execution.
func (t *telemetry) startRunSpan(ctx context.Context, run Run) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "reconciliation run", trace.WithAttributes(
		attribute.String("payorch.provider", run.Provider),
		attribute.String("payorch.business_date", run.BusinessDate),
		attribute.Int64("payorch.reconciliation.run_id", run.ID),
		attribute.Int("payorch.reconciliation.version", run.Version),
		attribute.String("payorch.reconciliation.trigger", run.Trigger)))
}

// endRun records a run's outcome on its span and in the duration
// histogram, and ends the span.
func (t *telemetry) endRun(ctx context.Context, span trace.Span, run Run, res result, err error, d time.Duration) {
	status := "succeeded"
	if err != nil {
		status = "failed"
		span.SetStatus(codes.Error, "reconciliation failed")
	} else {
		span.SetAttributes(attribute.Int64("payorch.reconciliation.local_count", res.LocalCount),
			attribute.Int64("payorch.reconciliation.provider_count", res.ProviderCount),
			attribute.Int64("payorch.reconciliation.discrepancy_count", res.DiscrepancyCount))
	}
	span.End()
	t.runDuration.Record(ctx, d.Seconds(), metric.WithAttributes(
		attribute.String("provider", run.Provider), attribute.String("status", status)))
}

// forgetLastRuns drops the cached gauges of the last runs, so a run this
// instance just finished shows at the next collection.
func (t *telemetry) forgetLastRuns() { t.last.Forget() }
