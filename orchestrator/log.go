package orchestrator

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

type logAttrsKey struct{}

// WithLogAttrs returns a context whose log lines carry attrs in addition to
// those already attached. Request-scoped facts (request id, tenant id,
// idempotency key, payment id) are attached once and appear on every line
// logged with that context through a handler wrapped by NewLogHandler.
func WithLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	merged := make([]slog.Attr, 0, len(prev)+len(attrs))
	merged = append(merged, prev...)
	merged = append(merged, attrs...)
	return context.WithValue(ctx, logAttrsKey{}, merged)
}

// LogAttrs returns the attributes attached to ctx by WithLogAttrs.
func LogAttrs(ctx context.Context) []slog.Attr {
	attrs, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return attrs
}

// NewLogHandler wraps h so that every record logged with a context carries
// that context's WithLogAttrs attributes and, when the context holds an
// OpenTelemetry span, its trace_id and span_id (also when the span is not
// sampled, so log lines of one request can always be found together).
func NewLogHandler(h slog.Handler) slog.Handler { return ctxHandler{h} }

type ctxHandler struct{ slog.Handler }

func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	attrs := LogAttrs(ctx)
	sc := trace.SpanContextFromContext(ctx)
	if len(attrs) > 0 || sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(attrs...)
		if sc.IsValid() {
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h ctxHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return ctxHandler{h.Handler.WithAttrs(attrs)}
}

func (h ctxHandler) WithGroup(name string) slog.Handler {
	return ctxHandler{h.Handler.WithGroup(name)}
}
