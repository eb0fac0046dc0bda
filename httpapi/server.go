// Package httpapi is payorch's HTTP interface: an Echo v4 server with
// request ids, an OpenTelemetry span and metrics per request, structured
// request logs, panic recovery, body limits, JSON content-type checks, API
// key authentication and roles, per-key rate limits, and one error handler
// that writes every error as application/problem+json with the codes of
// orchestrator; and the web console under /console/, whose sign-in form
// limits failed attempts per client address.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/reconcile"
)

// Config wires a Server.
type Config struct {
	Service *orchestrator.Service
	// Reconciler serves the finance API.
	Reconciler *reconcile.Reconciler
	// Webhooks serves the webhook endpoints and the events' deliveries.
	Webhooks *webhooks.Service
	// Vault serves the payment methods API and the card form; nil (no
	// vault configured) makes them answer 503 service_unavailable.
	Vault *vault.Vault
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// RateLimit is the sustained requests per second allowed per API key,
	// with a burst of twice that; 0 turns rate limiting off.
	RateLimit float64
	// ConsoleSignInLimit is how many failed console sign-ins one client
	// address (an IPv4 address, an IPv6 /64) may make per
	// ConsoleSignInWindow; past it the sign-in form answers 429 with
	// Retry-After, whatever the key. The allowance refills evenly over the
	// window. 0 means 10; negative turns the limit off. Per instance.
	ConsoleSignInLimit int
	// ConsoleSignInWindow defaults to 5 minutes.
	ConsoleSignInWindow time.Duration
	// AuthFailureLimit is how many failed API authentications (a Bearer
	// key shaped like an API key but unknown, revoked or with a wrong
	// secret) one client address (an IPv4 address, an IPv6 /64) may make
	// per AuthFailureWindow; past it every /v1 request from that address is
	// answered 429 rate_limited with Retry-After, without reading the
	// database, whatever the key. The allowance refills evenly over the
	// window. 0 means 30; negative turns the limit off. Per instance.
	AuthFailureLimit int
	// AuthFailureWindow defaults to 1 minute.
	AuthFailureWindow time.Duration
	// PublishableKeyLimit is how many payment methods one publishable key
	// may create per minute (a bucket of that many that refills evenly
	// over the minute); past it 429 rate_limited with Retry-After. 0 means
	// 300; negative turns the limit off. Per instance.
	PublishableKeyLimit int
	// PublishableClientLimit is how many payment methods publishable keys
	// may create per minute from one client address (an IPv4 address, an
	// IPv6 /64), whatever the key: card testers try many numbers from few
	// addresses. 0 means 20; negative turns the limit off. Per instance.
	PublishableClientLimit int
	// AllowHTTPLoopbackOrigins lets a tenant's browser origins be http://
	// on a loopback host (localhost, 127.0.0.0/8, [::1]): for development
	// and tests, never in production. Otherwise only https origins.
	AllowHTTPLoopbackOrigins bool
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the
	// client (the console's sign-in limit and the API's limit on failed
	// authentications count per client address) and
	// whose X-Forwarded-Proto says whether the client came over HTTPS (the
	// console's cookies are then Secure). Empty means no header is
	// believed: the client is the connection's peer, and the scheme is the
	// connection's.
	TrustedProxies []netip.Prefix
	// PublicURL is where users reach the server (the console is under
	// PublicURL/console/); an https URL makes every console cookie Secure,
	// however the request reached this process. nil: cookies are Secure
	// when the request came over TLS, natively or through a trusted proxy.
	PublicURL *url.URL
	// TLSConfig, when set, makes Serve serve HTTPS with it (it must hold a
	// certificate); console cookies are then always Secure. nil: plain
	// HTTP, e.g. behind a TLS-terminating proxy.
	TLSConfig *tls.Config
	// ShutdownTimeout bounds how long in-flight requests may take to finish
	// on shutdown. Defaults to 30s.
	ShutdownTimeout time.Duration
	// Clock defaults to time.Now.
	Clock func() time.Time
	// ExecutionTimeout bounds one execution of a keyed request (it goes on
	// when the client disconnects); keep it under the idempotency lease.
	// Defaults to 45s.
	ExecutionTimeout time.Duration
	// TracerProvider makes one server span per request, continuing the
	// caller's W3C trace context; nil means no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider takes the HTTP and idempotency metrics; nil means none.
	MeterProvider metric.MeterProvider
	// MetricsHandler, when set, is served without authentication at
	// GET /metrics (the Prometheus exposition of MeterProvider).
	MetricsHandler http.Handler
}

// MaxBodyBytes is the largest request body accepted, 64 KiB (SPEC:
// Errors); one byte more is 413 body_too_large.
const MaxBodyBytes = 64 << 10

// Server is payorch's HTTP API.
type Server struct {
	echo    *echo.Echo
	svc     *orchestrator.Service
	rec     *reconcile.Reconciler
	hooks   *webhooks.Service
	vault   *vault.Vault
	logger  *slog.Logger
	limiter *rateLimiter
	cfg     Config
	now     func() time.Time
	tel     *telemetry
	console *console

	// signInLimiter counts failed console sign-ins per client address;
	// nil when the limit is off.
	signInLimiter *rateLimiter
	// authFailures counts failed API authentications per client address;
	// nil when the limit is off.
	authFailures *rateLimiter
	// ppkKeys and ppkClients throttle the payment methods publishable
	// keys create, per key and per client address; nil when off.
	ppkKeys, ppkClients *rateLimiter
	// secureCookies makes every console cookie Secure: the public URL is
	// https, or Serve serves TLS itself.
	secureCookies bool

	// Work started by requests that outlives them (reconciliation runs);
	// Serve cancels and waits for it on shutdown.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// New builds the server and its routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.ExecutionTimeout == 0 {
		cfg.ExecutionTimeout = 45 * time.Second
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Logger.SetOutput(io.Discard)
	s := &Server{
		echo:   e,
		svc:    cfg.Service,
		rec:    cfg.Reconciler,
		hooks:  cfg.Webhooks,
		vault:  cfg.Vault,
		logger: cfg.Logger,
		cfg:    cfg,
		now:    cfg.Clock,
	}
	var err error
	if s.tel, err = newTelemetry(cfg.TracerProvider, cfg.MeterProvider); err != nil {
		s.logger.Warn("httpapi: telemetry instruments", "error", err)
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	if cfg.RateLimit > 0 {
		s.limiter = newRateLimiter(cfg.RateLimit, int(2*cfg.RateLimit), cfg.Clock)
	}
	s.signInLimiter = newSignInLimiter(cfg)
	s.authFailures = newAuthFailureLimiter(cfg)
	s.ppkKeys = newPublishableLimiter(cfg.PublishableKeyLimit, defaultPublishableKeyLimit, cfg.Clock)
	s.ppkClients = newPublishableLimiter(cfg.PublishableClientLimit, defaultPublishableClientLimit, cfg.Clock)
	s.secureCookies = cfg.TLSConfig != nil || (cfg.PublicURL != nil && cfg.PublicURL.Scheme == "https")
	e.IPExtractor = clientIP(cfg.TrustedProxies)
	e.SchemeExtractor = clientScheme(cfg.TrustedProxies)
	e.HTTPErrorHandler = s.handleError
	e.Use(
		s.requestID,
		s.instrument,
		s.accessLog,
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			DisableErrorHandler: true,
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				s.logger.ErrorContext(c.Request().Context(), "panic", "error", err, "stack", string(stack))
				return err
			},
		}),
		// In bytes: Echo reads "64K" as 64,000. Provider webhooks and bank
		// statements have their own limits (receiveWebhook,
		// createBankStatement).
		middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: strconv.Itoa(MaxBodyBytes),
			Skipper: func(c echo.Context) bool { return isProviderWebhook(c) || isStatementUpload(c) }}),
		s.consoleOr(requireJSON), // the web console under /console/, or the API's JSON check
		checkParams,              // the API's; the console's router runs its own
	)
	s.routes()
	return s
}

func (s *Server) routes() {
	e := s.echo
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.yaml", s.openAPI)
	if s.cfg.MetricsHandler != nil {
		e.GET("/metrics", echo.WrapHandler(s.cfg.MetricsHandler))
	}

	// Providers' webhooks: signed, not keyed (inbound.go).
	e.POST(webhookPrefix+":connector", s.receiveWebhook)
	// Browsers' CORS preflight carries no key (publishable.go); the card
	// form carries its publishable key in its URL (cardform.go).
	e.OPTIONS(routePaymentMethods, s.preflightPaymentMethods)
	e.GET(routeCardForm, s.cardForm)

	v1 := e.Group("/v1", s.authenticate, s.rateLimit)
	v1.GET("/me", s.getMe)
	v1.GET("/tenants", s.listTenants, requireRole(orchestrator.RoleAdmin))
	v1.GET("/api_keys", s.listAPIKeys, requireRole(orchestrator.RoleAdmin))
	v1.GET("/tenants/:id/routing", s.getRouting, requireRole(orchestrator.RoleAdmin))
	v1.PUT("/tenants/:id/routing", s.putRouting, requireRole(orchestrator.RoleAdmin))
	v1.GET("/tenants/:id/routing/versions", s.listRoutingVersions, requireRole(orchestrator.RoleAdmin))
	v1.GET("/connectors", s.listConnectors, requireRole(orchestrator.RoleAdmin, orchestrator.RoleSupport))
	v1.GET("/tenants/:id/browser_origins", s.getBrowserOrigins, requireRole(orchestrator.RoleAdmin))
	v1.PUT("/tenants/:id/browser_origins", s.putBrowserOrigins, requireRole(orchestrator.RoleAdmin))

	merchant := requireRole(orchestrator.RoleMerchant)
	readers := requireRole(orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance)
	v1.POST("/payments", s.createPayment, merchant)
	v1.POST("/payments/:id/capture", s.capturePayment, merchant)
	v1.POST("/payments/:id/cancel", s.cancelPayment, merchant)
	v1.POST("/payments/:id/refunds", s.refundPayment, merchant)
	v1.POST("/payments/:id/extend", s.extendPayment, merchant)
	v1.POST("/payments/:id/confirm", s.confirmPayment, merchant)
	v1.POST("/payments/:id/increment", s.incrementPayment, merchant)
	v1.GET("/payments", s.listPayments, readers)
	v1.GET("/payments/:id", s.getPayment, readers)
	v1.GET("/payments/:id/events", s.paymentEvents, readers)
	v1.GET("/payments/:id/attempts", s.paymentAttempts, readers)
	v1.GET("/payments/:id/operations", s.paymentOperations, readers)
	// Payment methods: support reads them as it reads payments; a
	// publishable key may only create (authenticate, browserGate).
	methodReaders := requireRole(orchestrator.RoleMerchant, orchestrator.RoleSupport)
	v1.POST("/payment_methods", s.createPaymentMethod,
		requireRole(orchestrator.RoleMerchant, orchestrator.RolePublishable), s.requireVault, s.browserGate)
	v1.GET("/payment_methods", s.listPaymentMethods, methodReaders, s.requireVault)
	v1.GET("/payment_methods/:id", s.getPaymentMethod, methodReaders, s.requireVault)
	v1.DELETE("/payment_methods/:id", s.deletePaymentMethod, merchant, s.requireVault)
	v1.GET("/events", s.listEvents, readers)
	v1.GET("/events/:id", s.getEvent, readers)
	// Deliveries: a merchant's own, support every merchant's, finance and
	// admin the staff events' (webhooks: deliveriesVisible). Redelivery
	// is the owner's only: support reads (webhooks.Service.RedeliverEvent).
	deliveryReaders := requireRole(orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance,
		orchestrator.RoleAdmin)
	redeliverers := requireRole(orchestrator.RoleMerchant, orchestrator.RoleFinance, orchestrator.RoleAdmin)
	v1.GET("/events/:id/deliveries", s.eventDeliveries, deliveryReaders)
	v1.POST("/events/:id/redeliver", s.redeliverEvent, redeliverers)
	// Merchants' endpoints, and finance's (admin's too, as reconciliation
	// allows both): the staff endpoints, for the reconciliation events.
	endpointOwners := requireRole(orchestrator.RoleMerchant, orchestrator.RoleFinance, orchestrator.RoleAdmin)
	v1.POST("/webhook_endpoints", s.createWebhookEndpoint, endpointOwners)
	v1.GET("/webhook_endpoints", s.listWebhookEndpoints, endpointOwners)
	v1.GET("/webhook_endpoints/:id", s.getWebhookEndpoint, endpointOwners)
	v1.POST("/webhook_endpoints/:id", s.updateWebhookEndpoint, endpointOwners)
	v1.DELETE("/webhook_endpoints/:id", s.deleteWebhookEndpoint, endpointOwners)
	v1.POST("/webhook_endpoints/:id/rotate_secret", s.rotateWebhookSecret, endpointOwners)

	if s.rec != nil {
		s.financeRoutes(v1)
	}
}

// financeRoutes are the routes of reconciliation: its runs and
// discrepancies, bank statements (finance, admin), the connectors' fee
// schedules and bank accounts (admin; finance reads the accounts).
func (s *Server) financeRoutes(v1 *echo.Group) {
	finance := requireRole(orchestrator.RoleFinance, orchestrator.RoleAdmin)
	v1.POST("/reconciliation/runs", s.startRun, finance)
	v1.GET("/reconciliation/runs", s.listRuns, finance)
	v1.GET("/reconciliation/runs/:id", s.getRun, finance)
	v1.GET("/reconciliation/runs/:id/discrepancies", s.listDiscrepancies, finance)
	v1.POST("/reconciliation/discrepancies/:id/resolve", s.resolveDiscrepancy, finance)
	v1.GET("/reconciliation/summary", s.getSummary, finance)
	v1.GET("/reconciliation/payouts/:connector/:payout_id", s.getPayout, finance)
	admin := requireRole(orchestrator.RoleAdmin)
	v1.GET("/connectors/:name/fees", s.getFeeSchedule, admin)
	v1.PUT("/connectors/:name/fees", s.putFeeSchedule, admin)
	v1.GET("/connectors/:name/fees/versions", s.listFeeScheduleVersions, admin)
	v1.POST("/bank_statements", s.createBankStatement, finance)
	v1.GET("/bank_statements", s.listBankStatements, finance)
	v1.GET("/bank_statements/:id", s.getBankStatement, finance)
	v1.GET("/connectors/:name/bank_account", s.getBankAccount, finance)
	v1.PUT("/connectors/:name/bank_account", s.putBankAccount, admin)
}

// clientIP is how c.RealIP() finds the client: the connection's peer, or,
// when it is one of trusted, the nearest untrusted address of
// X-Forwarded-For.
func clientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	return echo.ExtractIPFromXFFHeader(trustOnly(trusted)...)
}

// clientScheme is how c.Scheme() finds whether the client came over
// HTTPS: the connection's TLS, or, when the peer is one of trusted, the
// proxy's X-Forwarded-Proto (its last value: the one the nearest proxy
// set; without it, X-Forwarded-Ssl: on and the like). Echo's default would
// believe any loopback or private peer.
func clientScheme(trusted []netip.Prefix) echo.SchemeExtractor {
	if len(trusted) == 0 {
		return echo.ExtractSchemeDirect()
	}
	return echo.ExtractSchemeFromHeaders(trustOnly(trusted)...)
}

// trustOnly are Echo's trust options for exactly the ranges trusted: no
// loopback, link-local or private range is trusted by default.
func trustOnly(trusted []netip.Prefix) []echo.TrustOption {
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		p = p.Masked()
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return opts
}

// background runs fn outside the request that started it; Serve cancels
// its context on shutdown and waits for it.
func (s *Server) background(fn func(ctx context.Context)) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn(s.bgCtx)
	}()
}

// Close cancels background work and waits for it (for servers not run
// with Serve, e.g. in tests).
func (s *Server) Close() {
	s.bgCancel()
	s.bg.Wait()
}

// Handler returns the server as an http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Echo exposes the router, for tests that mount extra routes behind the
// same middleware.
func (s *Server) Echo() *echo.Echo { return s.echo }

// Serve serves on l (HTTPS when Config.TLSConfig is set, else HTTP) until
// ctx is done, then shuts down gracefully: it stops accepting, lets
// in-flight requests finish (up to ShutdownTimeout) and returns.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	if s.cfg.TLSConfig != nil {
		hs.TLSConfig = s.cfg.TLSConfig.Clone()
		go func() { errc <- hs.ServeTLS(l, "", "") }()
	} else {
		go func() { errc <- hs.Serve(l) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.logger.Info("http server shutting down", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	s.bgCancel()
	s.bg.Wait()
	if err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
