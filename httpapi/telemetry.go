package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/internal/otelx"
	"github.com/payorch/payorch/orchestrator"
)

// InstrumentationName names the tracer and meter of this package.
const InstrumentationName = "github.com/payorch/payorch/httpapi"

// Idempotency outcomes of a keyed request (the outcome label of
// payorch_idempotency_requests_total and idempotency_outcome in the request
// log line).
const (
	OutcomeNew      = "new"      // the key was claimed for the first time
	OutcomeReplayed = "replayed" // the stored answer was sent again
	OutcomeReused   = "reused"   // idempotency_key_reused
	OutcomeInUse    = "in_use"   // idempotency_key_in_use
	OutcomeTakeover = "takeover" // the expired lease of a crashed owner was taken over
	OutcomeResumed  = "resumed"  // a key released after an unknown outcome was picked up again
)

// Echo context keys of facts the request log line reports.
const (
	outcomeKey   = "payorch.idempotency_outcome"
	errorCodeKey = "payorch.error_code"
)

// traceContext is how trace context crosses HTTP: W3C traceparent and
// tracestate, and baggage.
var traceContext = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// telemetry is the server's tracer and instruments.
type telemetry struct {
	tracer         trace.Tracer
	httpRequests   metric.Int64Counter
	httpDuration   metric.Float64Histogram
	idempotency    metric.Int64Counter
	firstExecution metric.Float64Histogram
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	t := &telemetry{}
	var m metric.Meter
	t.tracer, m = otelx.Instruments(InstrumentationName, tp, mp)
	var errs [4]error
	t.httpRequests, errs[0] = m.Int64Counter("payorch.http.requests", metric.WithUnit("{request}"),
		metric.WithDescription("HTTP requests answered, by method, route template and status code."))
	t.httpDuration, errs[1] = m.Float64Histogram("payorch.http.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP requests, by method and route template."),
		metric.WithExplicitBucketBoundaries(orchestrator.LatencyBuckets()...))
	t.idempotency, errs[2] = m.Int64Counter("payorch.idempotency.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Keyed requests by operation and idempotency outcome (new, replayed, reused, in_use, takeover, resumed)."))
	t.firstExecution, errs[3] = m.Float64Histogram("payorch.first_execution.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of first executions of keyed requests (claim to stored answer), by operation and result (stored, pending, failed)."),
		metric.WithExplicitBucketBoundaries(orchestrator.LatencyBuckets()...))
	return t, errors.Join(errs[:]...)
}

// methodLabel bounds the method label to the methods HTTP defines.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// routeLabel is the route label of a request routed to path: its route
// template, or "unmatched" (never the raw path, which would make a label
// value per URL).
func routeLabel(path string) string {
	if path == "" {
		return "unmatched"
	}
	return path
}

// spanName is "METHOD /route/:template", or the method alone when no route
// matched.
func spanName(method, path string) string {
	if path == "" {
		return method
	}
	return method + " " + path
}

// instrument gives every request a server span (continuing the caller's
// W3C trace context) named after its route template, counts it by method,
// route and status and times it. It runs inside requestID and outside
// accessLog, so the request log line carries the span's trace id. Console
// pages are routed by the console's own router, inside this middleware:
// their route template is known only when they return, so the route is
// read again then.
func (s *Server) instrument(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		method := methodLabel(req.Method)
		path := c.Path()
		route := routeLabel(path)
		name := spanName(method, path)
		ctx := traceContext.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		ctx, span := s.tel.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(method), semconv.HTTPRoute(route), semconv.URLPath(req.URL.Path),
			attribute.String("payorch.request_id", c.Response().Header().Get(echo.HeaderXRequestID))))
		defer span.End()
		c.SetRequest(req.WithContext(ctx))
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		if p := c.Path(); p != path {
			route = routeLabel(p)
			span.SetName(spanName(method, p))
			span.SetAttributes(semconv.HTTPRoute(route))
		}
		status := c.Response().Status
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		m, r := attribute.String("method", method), attribute.String("route", route)
		s.tel.httpRequests.Add(ctx, 1, metric.WithAttributes(m, r, attribute.String("status", strconv.Itoa(status))))
		s.tel.httpDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(m, r))
		return nil
	}
}

// idempotencyOutcome classifies the answer of BeginIdempotent; "" for an
// error that is not part of the protocol (an internal one).
func idempotencyOutcome(b orchestrator.Begin, err error) string {
	switch {
	case err != nil:
		switch orchestrator.ErrorCode(err) {
		case orchestrator.CodeIdempotencyKeyReused:
			return OutcomeReused
		case orchestrator.CodeIdempotencyKeyInUse:
			return OutcomeInUse
		}
		return ""
	case b.Replay != nil:
		return OutcomeReplayed
	case b.Claim != nil && b.Claim.Takeover:
		return OutcomeTakeover
	case b.Claim != nil && b.Claim.Resumed:
		return OutcomeResumed
	}
	return OutcomeNew
}

// recordIdempotency counts a keyed request's outcome and notes it on the
// request's span and log line.
func (s *Server) recordIdempotency(ctx context.Context, c echo.Context, op, outcome string) {
	if outcome == "" {
		return
	}
	c.Set(outcomeKey, outcome)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("payorch.idempotency.outcome", outcome))
	s.tel.idempotency.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", op), attribute.String("outcome", outcome)))
}
