package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// serviceName is the OpenTelemetry service.name (OTEL_SERVICE_NAME
// overrides it).
const serviceName = "payorch"

// telemetry is the process's OpenTelemetry SDK, set up once per command
// that serves or moves money: a tracer provider that exports over OTLP/HTTP
// when cfg.OTLPEndpoint is set, and a meter provider read by a Prometheus
// registry (plus Go runtime and process collectors) served at /metrics.
type telemetry struct {
	tracerProvider *sdktrace.TracerProvider
	meterProvider  *sdkmetric.MeterProvider
	// metrics is the Prometheus text exposition of meterProvider.
	metrics http.Handler
	// exporting reports whether spans leave the process.
	exporting bool
	logger    *slog.Logger
}

// telemetryShutdownTimeout bounds the final flush of spans.
const telemetryShutdownTimeout = 10 * time.Second

// startTelemetry sets the SDK up; stop flushes and ends it. Without an OTLP endpoint nothing is
// exported and no span is recorded (the sampler drops them all), but every
// request still gets trace and span ids, so its log lines can be found
// together and trace context still reaches the provider. With one, spans
// are batched to it, sampled as OTEL_TRACES_SAMPLER says (by default: all,
// following the caller's decision); the exporter reads the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, …) itself.
func startTelemetry(ctx context.Context, cfg config, logger *slog.Logger) (*telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(buildVersion())),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil { // a partial resource (e.g. a conflicting schema) is still usable
		logger.Warn("opentelemetry resource", "error", err)
	}
	if res == nil {
		res = resource.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "error", err)
	}))

	t := &telemetry{logger: logger}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.OTLPEndpoint != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
		t.exporting = true
	} else {
		topts = append(topts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	t.tracerProvider = sdktrace.NewTracerProvider(topts...)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		_ = t.tracerProvider.Shutdown(ctx)
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t.meterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	return t, nil
}

// stop flushes spans not yet exported and stops the providers; it runs
// last, after the server and the background jobs have stopped.
func (t *telemetry) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), telemetryShutdownTimeout)
	defer cancel()
	if err := errors.Join(t.tracerProvider.Shutdown(ctx), t.meterProvider.Shutdown(ctx)); err != nil {
		t.logger.Warn("opentelemetry shutdown", "error", err)
	}
}

// traceDatabase makes every query of pools built from pc a span (when its
// request's span is recorded) and exports query durations and the pool's
// statistics.
func (t *telemetry) traceDatabase(pc *pgxpool.Config) {
	pc.ConnConfig.Tracer = otelpgx.NewTracer(
		otelpgx.WithTracerProvider(t.tracerProvider),
		otelpgx.WithMeterProvider(t.meterProvider),
		otelpgx.WithDisableAcquireTracer(),
	)
}

// recordPoolStats exports pool's statistics (connections in use, idle,
// waits) as gauges. A named pool (the back-office one) reports as
// db.client.connection.pool.name "host:port/database#name", apart from
// the main pool's "host:port/database".
func (t *telemetry) recordPoolStats(pool *pgxpool.Pool, name string) error {
	opts := []otelpgx.StatsOption{otelpgx.WithStatsMeterProvider(t.meterProvider)}
	if name != "" {
		cc := pool.Config().ConnConfig
		opts = append(opts, otelpgx.WithStatsAttributes(
			semconv.DBClientConnectionPoolName(fmt.Sprintf("%s:%d/%s#%s", cc.Host, cc.Port, cc.Database, name))))
	}
	return otelpgx.RecordStats(pool, opts...)
}

// transport wraps base so each provider request is a client span and
// carries the W3C trace context (traceparent) of the call it belongs to.
func (t *telemetry) transport(base http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(t.tracerProvider),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // payorch_provider_call_duration_seconds covers it
	)
}
