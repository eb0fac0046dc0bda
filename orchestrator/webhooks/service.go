// Package webhooks is payorch's outbound webhooks: the endpoints merchants
// (and finance) register, the deliveries of the outbox's events to them
// and every attempt of those, redelivery, and the delivery worker that
// sends them through an address filter (ssrf.go).
//
// It is built on the domain the way reconcile is: it imports orchestrator
// (its error type and codes, Scope, the events it delivers, and the lock
// the history's partition changes take), never the reverse. The core
// writes the events and their deliveries in its own transactions
// (triggers, migration 00009); this package reads and sends them.
package webhooks

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/payorch/payorch/internal/background"
	"github.com/payorch/payorch/internal/otelx"
)

// Config wires a Service.
type Config struct {
	// Pool is the connection pool on the primary (the one the domain's
	// Service uses: deliveries are claimed and recorded there).
	Pool *pgxpool.Pool
	// Clock returns the current time; defaults to time.Now.
	Clock func() time.Time
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// MeterProvider takes the delivery counters; nil means no metrics.
	MeterProvider metric.MeterProvider
	// AllowPrivate lets webhook endpoints be http and reach private,
	// loopback and link-local addresses (PAYORCH_WEBHOOK_ALLOW_PRIVATE:
	// development and tests).
	AllowPrivate bool
	// Senders is how many deliveries the delivery worker of this instance
	// sends at once; 0 means DefaultWebhookSenders. Fewer senders drain a
	// backlog more slowly and leave more of the machine to payments.
	Senders int
	// Timeout bounds one delivery attempt, connection included; 0 means
	// WebhookTimeout, which is also the most it can be.
	Timeout time.Duration
}

// Service manages webhook endpoints and delivers the events to them.
type Service struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	logger *slog.Logger
	// client sends webhook deliveries (newWebhookClient).
	client       *http.Client
	allowPrivate bool
	senders      int
	timeout      time.Duration
	fast         *fastEndpoints
	tel          *telemetry
}

// New returns a Service on cfg.Pool.
func New(cfg Config) *Service {
	s := &Service{pool: cfg.Pool, now: cfg.Clock, logger: cfg.Logger, allowPrivate: cfg.AllowPrivate,
		senders: cfg.Senders, timeout: cfg.Timeout, fast: newFastEndpoints()}
	if s.senders <= 0 {
		s.senders = DefaultWebhookSenders
	}
	if s.timeout <= 0 || s.timeout > WebhookTimeout {
		s.timeout = WebhookTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.client = newWebhookClient(cfg.AllowPrivate, s.logger)
	var err error
	if s.tel, err = newTelemetry(cfg.MeterProvider); err != nil {
		s.logger.Warn("webhooks: telemetry instruments", "error", err)
	}
	return s
}

// WebhookJob delivers due webhooks every interval. Passes follow each
// other at once while they find work, for up to 30 s (a pass claims for
// 10 s, then waits at most one send timeout for those in flight: well
// within the run's timeout; sends cut short by it are not recorded, and
// go again when their leases end).
func (s *Service) WebhookJob(interval time.Duration) *background.Worker {
	return background.NewWorker("webhooks", interval, 2*WebhookTimeout+time.Minute, s.logger,
		func(ctx context.Context) error {
			for start := time.Now(); time.Since(start) < 30*time.Second; {
				st, err := s.DeliverWebhooks(ctx)
				if err != nil || st.Sent == 0 {
					return err
				}
			}
			return nil
		})
}

// InstrumentationName names the meter of this package.
const InstrumentationName = "github.com/payorch/payorch/orchestrator/webhooks"

// telemetry is the delivery worker's counters. The backlog gauges
// (payorch.webhook.undelivered, …) are the domain's: they read the
// outbox with its other pending gauges.
type telemetry struct {
	deliveries   metric.Int64Counter
	breakerOpens metric.Int64Counter
}

// newTelemetry creates the counters on mp (nil: no-op).
func newTelemetry(mp metric.MeterProvider) (*telemetry, error) {
	t := &telemetry{}
	_, m := otelx.Instruments(InstrumentationName, nil, mp)
	var errs [2]error
	t.deliveries, errs[0] = m.Int64Counter("payorch.webhook.deliveries", metric.WithUnit("{attempt}"),
		metric.WithDescription("Webhook delivery attempts by outcome: delivered (2xx), failed (to be retried), gave_up (retried for 3 days), unrecorded (recorded too late: its lease had been taken over, and the delivery is sent again)."))
	t.breakerOpens, errs[1] = m.Int64Counter("payorch.webhook.endpoint_breaker_opens", metric.WithUnit("{open}"),
		metric.WithDescription("Webhook endpoint breakers opened: an endpoint gave no answer (timeout, no connection) to 5 attempts in a row, or to the probe after a pause; its deliveries wait."))
	return t, errors.Join(errs[:]...)
}

// delivered counts n webhook delivery attempts of an outcome.
func (t *telemetry) delivered(outcome string, n int) {
	t.deliveries.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("outcome", outcome)))
}

// breakerOpened counts n webhook endpoint breakers opened.
func (t *telemetry) breakerOpened(n int) {
	if n > 0 {
		t.breakerOpens.Add(context.Background(), int64(n))
	}
}
