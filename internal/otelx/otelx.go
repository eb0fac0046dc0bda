// Package otelx is what payorch's packages share in making their
// OpenTelemetry instruments: a tracer and meter from possibly nil
// providers, and a database reading behind observable gauges.
package otelx

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Instruments returns the tracer and meter named name of tp and mp; a nil
// provider is the OpenTelemetry no-op.
func Instruments(name string, tp trace.TracerProvider, mp metric.MeterProvider) (trace.Tracer, metric.Meter) {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	return tp.Tracer(name), mp.Meter(name)
}

// Reading is a value read from the database when gauges are collected:
// at most once per Every, each read bounded by Timeout, so frequent scrapes
// cost one query. A failed read is not kept: the next collection reads
// again, and the caller leaves its gauges out rather than reporting stale
// values.
type Reading[T any] struct {
	Every   time.Duration
	Timeout time.Duration
	Read    func(context.Context) (T, error)

	mu  sync.Mutex
	at  time.Time
	val T
	ok  bool
}

// Get returns the kept value while it is younger than Every, else reads
// anew.
func (r *Reading[T]) Get(ctx context.Context) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok && time.Since(r.at) < r.Every {
		return r.val, nil
	}
	qctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	v, err := r.Read(qctx)
	if err != nil {
		r.ok = false
		return v, err
	}
	r.val, r.at, r.ok = v, time.Now(), true
	return v, nil
}

// Forget drops the kept value, so the next Get reads anew.
func (r *Reading[T]) Forget() {
	r.mu.Lock()
	r.ok = false
	r.mu.Unlock()
}
