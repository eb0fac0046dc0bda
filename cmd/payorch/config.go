package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/readreplica"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// config is everything payorch reads from its environment. Defaults live
// here and only here; flags of each subcommand override single fields.
type config struct {
	// DatabaseURL (DATABASE_URL) is the PostgreSQL primary. Empty in `dev`
	// means: run the embedded cluster under DataDir.
	DatabaseURL string
	// DatabasePooler (PAYORCH_DATABASE_POOLER) says what DATABASE_URL
	// reaches: none, the PostgreSQL server itself, or transaction, a
	// transaction-mode pooler (PgBouncer's pool_mode = transaction), where
	// consecutive transactions of one client may run on different server
	// sessions. With transaction, the pools prepare no named statements
	// (pgx's cache_describe mode: an unnamed statement, parsed again on
	// every execution, in one round trip once its description is cached);
	// payorch keeps no other session state between transactions anyway
	// (locks are transaction-scoped, SET is LOCAL, cursors live inside
	// their transaction). What needs a session, the key cache's LISTEN and
	// migrations' advisory lock, goes over DatabaseDirectURL; without it
	// the key cache is off and `serve` and `migrate` refuse to migrate.
	DatabasePooler string
	// DatabaseDirectURL (DATABASE_DIRECT_URL) is a connection to the
	// primary that bypasses any pooler: the key and routing caches' LISTEN
	// connection and migrations (`serve` on start, `payorch migrate`) use
	// it when set. Empty: they use DATABASE_URL.
	DatabaseDirectURL string
	// DatabaseReadURL (DATABASE_READ_URL) is a streaming replica of the
	// primary (or a pooler in front of one, set up like DATABASE_URL's):
	// reconciliation's pairing and finance's lists read from it once it
	// has replayed every write committed on the primary before the read
	// began, else from the primary (internal/readreplica). It gets a pool
	// of PAYORCH_BACKOFFICE_MAX_CONNS connections. Empty: every read on
	// the primary.
	DatabaseReadURL string
	// ReadReplicaMaxWait (PAYORCH_READ_REPLICA_MAX_WAIT) bounds how long a
	// read waits for DATABASE_READ_URL to catch up (its connection
	// included) before it goes to the primary; 0: only a replica already
	// caught up serves.
	ReadReplicaMaxWait time.Duration
	// RequireSyncStandby (PAYORCH_REQUIRE_SYNC_STANDBY) makes every
	// connection refuse to store an answer unless its commit waits for a
	// synchronous standby (session setting payorch.require_sync_standby,
	// checked by migration 00015's trigger): on a primary replicating
	// asynchronously, as pg_auto_failover's wait_primary does, requests
	// fail with 503 instead of getting answers a failover could take
	// back. Off by default: a single PostgreSQL has no standby. Behind a
	// transaction pooler, which passes no session settings, set it on the
	// role instead (ALTER ROLE … SET payorch.require_sync_standby = on).
	RequireSyncStandby bool
	// Listen (PAYORCH_LISTEN) is the API's address.
	Listen string
	// RateLimit (PAYORCH_RATE_LIMIT) is requests per second per API key,
	// burst twice that; 0 turns it off.
	RateLimit float64
	// ConsoleSignInLimit (PAYORCH_CONSOLE_SIGNIN_LIMIT) is how many failed
	// console sign-ins one client address may make per 5 minutes; 0 turns
	// the limit off.
	ConsoleSignInLimit int
	// AuthFailureLimit (PAYORCH_AUTH_FAILURE_LIMIT) is how many failed API
	// authentications (made-up, revoked or mistyped keys) one client
	// address may make per minute; past it its API requests are answered
	// 429 without reading the database. 0 turns the limit off.
	AuthFailureLimit int
	// PublishableKeyLimit (PAYORCH_PUBLISHABLE_KEY_LIMIT) is how many
	// payment methods one publishable key may create per minute; 0 turns
	// the limit off.
	PublishableKeyLimit int
	// PublishableClientLimit (PAYORCH_PUBLISHABLE_CLIENT_LIMIT) is how
	// many payment methods publishable keys may create per minute from one
	// client address, whatever the key (card testing); 0 turns the limit
	// off.
	PublishableClientLimit int
	// TrustedProxies (PAYORCH_TRUSTED_PROXIES) are the reverse proxies,
	// comma-separated addresses or CIDR ranges, whose X-Forwarded-For names
	// the client; empty means the client is the connection's peer.
	TrustedProxies []netip.Prefix
	// PublicURL (PAYORCH_PUBLIC_URL) is where users reach payorch, an
	// absolute http(s) URL such as https://pay.example.com; https makes the
	// console's cookies Secure whatever the request's scheme. Empty: they
	// are Secure when the request came over TLS (natively, or by a trusted
	// proxy's X-Forwarded-Proto).
	PublicURL string
	// TLSCert and TLSKey (PAYORCH_TLS_CERT, PAYORCH_TLS_KEY) are the PEM
	// files of a certificate (chain) and its private key: set both and
	// `serve` and `dev` serve HTTPS on Listen (the files must load at
	// start-up); set neither for plain HTTP.
	TLSCert string
	TLSKey  string
	// MetricsListen (PAYORCH_METRICS_LISTEN) serves /metrics on its own
	// address, and no longer on the API's; empty: on the API's.
	MetricsListen string
	// LogLevel (PAYORCH_LOG_LEVEL): debug, info, warn or error.
	LogLevel string
	// DataDir (PAYORCH_DATA_DIR) holds `dev`'s cluster and demo keys.
	DataDir string
	// DevPGPort (PAYORCH_DEV_PG_PORT) is the loopback port of `dev`'s cluster.
	DevPGPort int
	// PGBin (PAYORCH_PG_BIN) is the folder of initdb and postgres; empty
	// means search PATH and /usr/lib/postgresql/*/bin.
	PGBin string
	// AutoMigrate (PAYORCH_AUTO_MIGRATE) makes `serve` and `dev` apply
	// migrations on start.
	AutoMigrate bool
	// ShutdownTimeout (PAYORCH_SHUTDOWN_TIMEOUT) bounds graceful shutdown.
	ShutdownTimeout time.Duration
	// DBMaxConns (PAYORCH_DB_MAX_CONNS) caps the connection pool.
	DBMaxConns int
	// BackofficeMaxConns (PAYORCH_BACKOFFICE_MAX_CONNS) caps the second,
	// separate pool of `serve` and `dev` that reconciliation runs, their
	// heartbeats, finance's reads and CSV exports use, so they never take
	// a connection payments need. Half of it (at least 1) is how many runs
	// execute at once; the others queue.
	BackofficeMaxConns int
	// APIKeyCache (PAYORCH_API_KEY_CACHE) makes `serve` and `dev` keep
	// verified API keys in memory while a LISTEN connection hears their
	// revocations (NOTIFY payorch_api_keys), and tenants' active routing
	// while it hears of new versions (NOTIFY payorch_routing); off, every
	// request reads its key, and every authorization its routing, from the
	// database.
	APIKeyCache bool
	// ReplayCache (PAYORCH_REPLAY_CACHE) is how many completed idempotency
	// keys `serve` and `dev` keep in memory to answer replays; 0 turns it
	// off.
	ReplayCache int
	// Environment (PAYORCH_ENVIRONMENT) says what this deployment is:
	// production, development or test. Unset, each command picks (run):
	// development for `dev`, production for every other. In production the
	// fake provider is not offered at all: no connector may use it, and
	// with PAYORCH_CONNECTORS unset it can be neither the default provider
	// nor reached at PAYORCH_FAKE_URL.
	Environment string
	// Connectors (PAYORCH_CONNECTORS, name=adapter separated by commas,
	// each with its PAYORCH_CONNECTOR_<NAME>_… settings: connector.go) are
	// the configured instances of provider adapters, by which payments
	// name their provider. With PAYORCH_CONNECTORS unset they are the
	// older variables': fake (outside production only: activeConnectors)
	// and stripe when STRIPE_SECRET_KEY is set.
	Connectors []connectorConfig
	// ConnectorsListed reports whether PAYORCH_CONNECTORS was set.
	ConnectorsListed bool
	// DevConnectors are the embedded fakes fake_a and fake_b, with their
	// PAYORCH_CONNECTOR_FAKE_A_… settings, that `dev` runs instead of the
	// single fake when PAYORCH_CONNECTORS and PAYORCH_FAKE_URL are unset.
	DevConnectors []connectorConfig
	// MaxAttempts (PAYORCH_MAX_ATTEMPTS) bounds the attempts of one
	// payment across connectors, 1 to 10.
	MaxAttempts int
	// Breaker (PAYORCH_BREAKER_WINDOW, PAYORCH_BREAKER_MIN_CALLS,
	// PAYORCH_BREAKER_ERROR_PERCENT, PAYORCH_BREAKER_COOLDOWN) tunes each
	// connector's health breaker (orchestrator.BreakerConfig).
	Breaker orchestrator.BreakerConfig
	// FakeURL (PAYORCH_FAKE_URL) is a standalone fake provider's base URL
	// for the connector named fake (PAYORCH_CONNECTOR_FAKE_URL wins);
	// empty means run one embedded in this process (outside production).
	FakeURL string
	// FakeToken (PAYORCH_FAKE_TOKEN) is the fake provider's bearer secret:
	// the default of `fakeprovider --admin-token`, and the token of the
	// connector named fake (PAYORCH_CONNECTOR_FAKE_TOKEN wins): the one
	// the standalone fake at its URL was started with (required with a
	// URL), and the embedded fake's token when set (else each start
	// generates one).
	FakeToken string
	// FakeState (PAYORCH_FAKE_STATE) is the file the embedded fake provider
	// of the connector named fake keeps its state in across restarts
	// (PAYORCH_CONNECTOR_FAKE_STATE wins); empty means memory only. `dev`
	// defaults it to DataDir/fake-provider.json, `serve` leaves it empty.
	FakeState string
	// FakeWebhookSecret (PAYORCH_FAKE_WEBHOOK_SECRET) is the secret the
	// fake provider signs its webhooks with: the default of `fakeprovider
	// --webhook-secret`, and the webhook secret of the connector named
	// fake (PAYORCH_CONNECTOR_FAKE_WEBHOOK_SECRET wins).
	FakeWebhookSecret string
	// DefaultProvider (PAYORCH_DEFAULT_PROVIDER) is the connector that
	// serves requests that name none and that no routing rule routes; it
	// must be configured and enabled. Unset: fake with PAYORCH_CONNECTORS
	// unset (fake_a under `dev`), else the first enabled connector listed.
	DefaultProvider string
	// StripeSecretKey (STRIPE_SECRET_KEY) enables the stripe connector when
	// PAYORCH_CONNECTORS is unset, and is the secret key of the connector
	// named stripe (PAYORCH_CONNECTOR_STRIPE_SECRET_KEY wins).
	StripeSecretKey string
	// StripeAPIBase (STRIPE_API_BASE) points the connector named stripe
	// elsewhere (stripe-mock, a proxy); empty means Stripe's API.
	StripeAPIBase string
	// StripeTimeout (STRIPE_TIMEOUT) bounds one request of the connector
	// named stripe to Stripe.
	StripeTimeout time.Duration
	// StripeWebhookSecret (STRIPE_WEBHOOK_SECRET) is the signing secret
	// ("whsec_…") of the Stripe webhook endpoint pointing at
	// POST /webhooks/stripe, for the connector named stripe
	// (PAYORCH_CONNECTOR_STRIPE_WEBHOOK_SECRET wins); unset, its webhooks
	// are refused.
	StripeWebhookSecret string
	// webhookBase is where this process serves (http://host:port), set by
	// serveAPI once it listens: embedded fakes send their webhooks to
	// webhookBase/webhooks/<connector>. Empty: they send none.
	webhookBase string
	// ProviderTimeout (PAYORCH_PROVIDER_TIMEOUT) bounds one provider call.
	ProviderTimeout time.Duration
	// IdempotencyTTL (PAYORCH_IDEMPOTENCY_TTL) is how long keys are kept,
	// at most 72h.
	IdempotencyTTL time.Duration
	// IdempotencyLease (PAYORCH_IDEMPOTENCY_LEASE) is how long an executing
	// request holds its key before a crashed owner's key may be taken over.
	IdempotencyLease time.Duration
	// ResolverInterval (PAYORCH_RESOLVER_INTERVAL) is how often `serve`
	// settles pending payments; 0 turns the in-process resolver off.
	ResolverInterval time.Duration
	// ResolverMinAge (PAYORCH_RESOLVER_MIN_AGE) is how long a payment must
	// have been pending before the resolver touches it.
	ResolverMinAge time.Duration
	// WebhookInterval (PAYORCH_WEBHOOK_INTERVAL) is how often `serve`
	// looks for due webhook deliveries when the last pass found none (a
	// full pass is followed by the next at once); 0 turns the delivery
	// worker off.
	WebhookInterval time.Duration
	// WebhookAllowPrivate (PAYORCH_WEBHOOK_ALLOW_PRIVATE) lets webhook
	// endpoints use http and reach private, loopback and link-local
	// addresses; `dev` allows them unless set to false.
	WebhookAllowPrivate bool
	// HistoryRetentionMonths (PAYORCH_HISTORY_RETENTION_MONTHS) is how many
	// whole months of payment history (payment_events) and of provider
	// webhooks received are kept before the month's partition is dropped;
	// 0 keeps it all.
	HistoryRetentionMonths int
	// EventsRetentionMonths (PAYORCH_EVENTS_RETENTION_MONTHS) is the same
	// for the outbox: events, their webhook deliveries and attempts.
	EventsRetentionMonths int
	// HoldSweepInterval (PAYORCH_HOLD_SWEEP_INTERVAL) is how often the
	// hold sweeper looks for holds to warn of, act on or expire; 0 turns it
	// off.
	HoldSweepInterval time.Duration
	// HoldExpiringLead (PAYORCH_HOLD_EXPIRING_LEAD) is how long before a
	// hold's deadline payment.hold_expiring is sent.
	HoldExpiringLead time.Duration
	// HoldActionLead (PAYORCH_HOLD_ACTION_LEAD) is how long before a hold's
	// deadline its on_expiry action starts; at least twice the sweep
	// interval, so a pass always comes in time.
	HoldActionLead time.Duration
	// AuthenticationTimeout (PAYORCH_AUTHENTICATION_TIMEOUT) is how long a
	// 3-D Secure challenge may stay open before the hold sweeper abandons
	// it (the provider's intent canceled, the payment failed
	// authentication_abandoned): from 1m to 24h.
	AuthenticationTimeout time.Duration
	// WebhookSenders (PAYORCH_WEBHOOK_SENDERS) is how many deliveries the
	// delivery worker sends at once, 1 to 256 (default 32).
	WebhookSenders int
	// WebhookTimeout (PAYORCH_WEBHOOK_TIMEOUT) bounds one delivery
	// attempt, connection included: from 1s to 10s (default 10s). An
	// attempt's delivery is leased for it plus 5s, so a crashed instance's
	// deliveries in flight go again that much later.
	WebhookTimeout time.Duration
	// webhookAllowPrivateSet says PAYORCH_WEBHOOK_ALLOW_PRIVATE was set.
	webhookAllowPrivateSet bool
	// SweepInterval (PAYORCH_KEY_SWEEP_INTERVAL) is how often expired
	// idempotency keys are purged, and reconciliation runs whose instance
	// died are recorded failed; 0 turns both sweepers off.
	SweepInterval time.Duration
	// ReconcileSchedule (PAYORCH_RECONCILE_SCHEDULE) is the cron spec of the
	// daily reconciliation of yesterday; "off" disables it.
	ReconcileSchedule string
	// ReconcileTZ (PAYORCH_RECONCILE_TZ) is the IANA time zone business
	// days are cut in.
	ReconcileTZ string
	// ReconcileGrace (PAYORCH_RECONCILE_GRACE) widens the provider window
	// around midnight.
	ReconcileGrace time.Duration
	// OTLPEndpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
	// OTEL_EXPORTER_OTLP_ENDPOINT) turns span export over OTLP/HTTP on;
	// empty means no span leaves the process. The exporter itself reads
	// the variables (and OTEL_EXPORTER_OTLP_HEADERS, …_TIMEOUT, …).
	OTLPEndpoint string
	// OTLPProtocol (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL): only http/protobuf is built in.
	OTLPProtocol string
	// VaultKeys (PAYORCH_VAULT_KEYS) are the vault's key-encryption keys,
	// "1:<base64 of 32 bytes>,2:<…>": the highest version wraps new cards'
	// data keys, the others unwrap those not yet rotated (`payorch vault
	// rotate`). VaultFingerprintKey (PAYORCH_VAULT_FINGERPRINT_KEY, base64
	// of 32 bytes) keys card fingerprints. Both or neither: without them
	// the vault is off (and production refuses to start if it holds cards).
	// `dev` generates both into DataDir/vault.keys when unset.
	VaultKeys           string
	VaultFingerprintKey string
	// VaultCVCTTL (PAYORCH_VAULT_CVC_TTL) is how long a card's CVC is kept
	// when no authorization used it: 1s to 1h.
	VaultCVCTTL time.Duration
	// DebugListen (PAYORCH_DEBUG_LISTEN) serves Go's profiler
	// (/debug/pprof/) on a separate loopback address; empty (the default)
	// turns it off.
	DebugListen string
}

func defaultConfig() config {
	return config{
		Listen:          "127.0.0.1:8080",
		DatabasePooler:  poolerNone,
		RateLimit:       100,
		LogLevel:        "info",
		DataDir:         ".payorch",
		DevPGPort:       54329,
		AutoMigrate:     true,
		ShutdownTimeout: 30 * time.Second,
		DBMaxConns:      20,
		APIKeyCache:     true,
		ReplayCache:     10_000,

		BackofficeMaxConns: 4,
		ReadReplicaMaxWait: readreplica.DefaultMaxWait,

		ConsoleSignInLimit:     10,
		AuthFailureLimit:       30,
		PublishableKeyLimit:    300,
		PublishableClientLimit: 20,

		DefaultProvider:  "fake",
		ProviderTimeout:  15 * time.Second,
		IdempotencyTTL:   24 * time.Hour,
		IdempotencyLease: 60 * time.Second,
		ResolverInterval: 30 * time.Second,
		ResolverMinAge:   time.Minute,
		SweepInterval:    time.Minute,
		WebhookInterval:  time.Second,
		WebhookSenders:   webhooks.DefaultWebhookSenders,
		WebhookTimeout:   webhooks.WebhookTimeout,

		HoldSweepInterval:     time.Minute,
		HoldExpiringLead:      orchestrator.DefaultHoldExpiringLead,
		HoldActionLead:        orchestrator.DefaultHoldActionLead,
		AuthenticationTimeout: orchestrator.DefaultActionTimeout,

		MaxAttempts: orchestrator.DefaultMaxAttempts,
		Breaker:     orchestrator.DefaultBreaker,

		StripeTimeout:     defaultStripeTimeout,
		ReconcileSchedule: "0 3 * * *",
		ReconcileTZ:       "UTC",
		ReconcileGrace:    2 * time.Hour,

		VaultCVCTTL: vault.DefaultCVCTTL,
	}
}

// envReader reads variables over a config's defaults, collecting every
// malformed value (so that one start names them all).
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (e *envReader) str(name string, dst *string) {
	if v := e.getenv(name); v != "" {
		*dst = v
	}
}

func (e *envReader) num(name string, dst *int) {
	if v := e.getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not an integer", name, v))
			return
		}
		*dst = n
	}
}

func (e *envReader) boolean(name string, dst *bool) {
	if v := e.getenv(name); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not true or false", name, v))
			return
		}
		*dst = b
	}
}

func (e *envReader) dur(name string, dst *time.Duration) {
	if v := e.getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not a duration (e.g. 30s)", name, v))
			return
		}
		*dst = d
	}
}

// loadConfig reads the environment over the defaults and validates.
func loadConfig(getenv func(string) string) (config, error) {
	c := defaultConfig()
	e := &envReader{getenv: getenv}
	c.readDatabase(e)
	c.readHTTP(e)
	c.readJobs(e)
	c.readProviders(e)
	c.readTelemetry(e)
	if err := errors.Join(e.errs...); err != nil {
		return c, err
	}
	var err error
	if c.Connectors, c.ConnectorsListed, err = readConnectors(getenv, c); err != nil {
		return c, err
	}
	if c.DevConnectors, err = readDevConnectors(getenv, c); err != nil {
		return c, err
	}
	if c.ConnectorsListed && getenv("PAYORCH_DEFAULT_PROVIDER") == "" {
		c.DefaultProvider = c.Connectors[0].Name
		if i := slices.IndexFunc(c.Connectors, func(cc connectorConfig) bool { return !cc.Disabled }); i >= 0 {
			c.DefaultProvider = c.Connectors[i].Name
		}
	}
	return c, c.validate()
}

// readDatabase reads where the database is and how payorch uses it.
func (c *config) readDatabase(e *envReader) {
	e.str("DATABASE_URL", &c.DatabaseURL)
	e.str("PAYORCH_DATABASE_POOLER", &c.DatabasePooler)
	e.str("DATABASE_DIRECT_URL", &c.DatabaseDirectURL)
	e.str("DATABASE_READ_URL", &c.DatabaseReadURL)
	e.str("PAYORCH_DATA_DIR", &c.DataDir)
	e.str("PAYORCH_PG_BIN", &c.PGBin)
	e.num("PAYORCH_DEV_PG_PORT", &c.DevPGPort)
	e.num("PAYORCH_DB_MAX_CONNS", &c.DBMaxConns)
	e.num("PAYORCH_BACKOFFICE_MAX_CONNS", &c.BackofficeMaxConns)
	e.boolean("PAYORCH_AUTO_MIGRATE", &c.AutoMigrate)
	e.boolean("PAYORCH_REQUIRE_SYNC_STANDBY", &c.RequireSyncStandby)
	e.dur("PAYORCH_READ_REPLICA_MAX_WAIT", &c.ReadReplicaMaxWait)
	e.num("PAYORCH_HISTORY_RETENTION_MONTHS", &c.HistoryRetentionMonths)
	e.num("PAYORCH_EVENTS_RETENTION_MONTHS", &c.EventsRetentionMonths)
}

// readHTTP reads how the API listens and whom it trusts.
func (c *config) readHTTP(e *envReader) {
	e.str("PAYORCH_LISTEN", &c.Listen)
	if v := e.getenv("PAYORCH_RATE_LIMIT"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("PAYORCH_RATE_LIMIT: %q is not a number", v))
		}
		c.RateLimit = f
	}
	e.num("PAYORCH_CONSOLE_SIGNIN_LIMIT", &c.ConsoleSignInLimit)
	e.num("PAYORCH_AUTH_FAILURE_LIMIT", &c.AuthFailureLimit)
	e.num("PAYORCH_PUBLISHABLE_KEY_LIMIT", &c.PublishableKeyLimit)
	e.num("PAYORCH_PUBLISHABLE_CLIENT_LIMIT", &c.PublishableClientLimit)
	if v := e.getenv("PAYORCH_TRUSTED_PROXIES"); v != "" {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			p, err := netip.ParsePrefix(f)
			if a, aerr := netip.ParseAddr(f); aerr == nil {
				p, err = netip.PrefixFrom(a, a.BitLen()), nil
			}
			if err != nil {
				e.errs = append(e.errs, fmt.Errorf("PAYORCH_TRUSTED_PROXIES: %q is not an address or CIDR range", f))
				continue
			}
			c.TrustedProxies = append(c.TrustedProxies, p.Masked())
		}
	}
	e.boolean("PAYORCH_API_KEY_CACHE", &c.APIKeyCache)
	e.num("PAYORCH_REPLAY_CACHE", &c.ReplayCache)
	e.dur("PAYORCH_SHUTDOWN_TIMEOUT", &c.ShutdownTimeout)
	e.dur("PAYORCH_IDEMPOTENCY_TTL", &c.IdempotencyTTL)
	e.dur("PAYORCH_IDEMPOTENCY_LEASE", &c.IdempotencyLease)
	e.str("PAYORCH_ENVIRONMENT", &c.Environment)
	e.str("PAYORCH_PUBLIC_URL", &c.PublicURL)
	e.str("PAYORCH_TLS_CERT", &c.TLSCert)
	e.str("PAYORCH_TLS_KEY", &c.TLSKey)
}

// readJobs reads the background jobs' settings: intervals, webhook
// delivery, holds and reconciliation.
func (c *config) readJobs(e *envReader) {
	e.dur("PAYORCH_RESOLVER_INTERVAL", &c.ResolverInterval)
	e.dur("PAYORCH_RESOLVER_MIN_AGE", &c.ResolverMinAge)
	e.dur("PAYORCH_KEY_SWEEP_INTERVAL", &c.SweepInterval)
	e.dur("PAYORCH_WEBHOOK_INTERVAL", &c.WebhookInterval)
	e.num("PAYORCH_WEBHOOK_SENDERS", &c.WebhookSenders)
	e.dur("PAYORCH_WEBHOOK_TIMEOUT", &c.WebhookTimeout)
	e.boolean("PAYORCH_WEBHOOK_ALLOW_PRIVATE", &c.WebhookAllowPrivate)
	c.webhookAllowPrivateSet = e.getenv("PAYORCH_WEBHOOK_ALLOW_PRIVATE") != ""
	e.dur("PAYORCH_HOLD_SWEEP_INTERVAL", &c.HoldSweepInterval)
	e.dur("PAYORCH_HOLD_EXPIRING_LEAD", &c.HoldExpiringLead)
	e.dur("PAYORCH_HOLD_ACTION_LEAD", &c.HoldActionLead)
	e.dur("PAYORCH_AUTHENTICATION_TIMEOUT", &c.AuthenticationTimeout)
	e.str("PAYORCH_RECONCILE_SCHEDULE", &c.ReconcileSchedule)
	e.str("PAYORCH_RECONCILE_TZ", &c.ReconcileTZ)
	e.dur("PAYORCH_RECONCILE_GRACE", &c.ReconcileGrace)
}

// readProviders reads the providers' settings and how payments use them:
// timeouts, failover and the breaker.
func (c *config) readProviders(e *envReader) {
	e.dur("PAYORCH_PROVIDER_TIMEOUT", &c.ProviderTimeout)
	e.str("PAYORCH_FAKE_URL", &c.FakeURL)
	e.str("PAYORCH_FAKE_TOKEN", &c.FakeToken)
	e.str("PAYORCH_FAKE_STATE", &c.FakeState)
	e.str("PAYORCH_FAKE_WEBHOOK_SECRET", &c.FakeWebhookSecret)
	e.str("PAYORCH_DEFAULT_PROVIDER", &c.DefaultProvider)
	e.str("STRIPE_SECRET_KEY", &c.StripeSecretKey)
	e.str("STRIPE_API_BASE", &c.StripeAPIBase)
	e.dur("STRIPE_TIMEOUT", &c.StripeTimeout)
	e.str("STRIPE_WEBHOOK_SECRET", &c.StripeWebhookSecret)
	e.num("PAYORCH_MAX_ATTEMPTS", &c.MaxAttempts)
	e.dur("PAYORCH_BREAKER_WINDOW", &c.Breaker.Window)
	e.num("PAYORCH_BREAKER_MIN_CALLS", &c.Breaker.MinCalls)
	e.num("PAYORCH_BREAKER_ERROR_PERCENT", &c.Breaker.ErrorPercent)
	e.dur("PAYORCH_BREAKER_COOLDOWN", &c.Breaker.Cooldown)
	e.str("PAYORCH_VAULT_KEYS", &c.VaultKeys)
	e.str("PAYORCH_VAULT_FINGERPRINT_KEY", &c.VaultFingerprintKey)
	e.dur("PAYORCH_VAULT_CVC_TTL", &c.VaultCVCTTL)
}

// readTelemetry reads logging, metrics, tracing and debugging.
func (c *config) readTelemetry(e *envReader) {
	e.str("PAYORCH_LOG_LEVEL", &c.LogLevel)
	e.str("PAYORCH_DEBUG_LISTEN", &c.DebugListen)
	e.str("PAYORCH_METRICS_LISTEN", &c.MetricsListen)
	e.str("OTEL_EXPORTER_OTLP_ENDPOINT", &c.OTLPEndpoint)
	e.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &c.OTLPEndpoint)
	e.str("OTEL_EXPORTER_OTLP_PROTOCOL", &c.OTLPProtocol)
	e.str("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", &c.OTLPProtocol)
}

// validate names the first bad field.
func (c config) validate() error {
	for _, check := range []func() error{c.validateServer, c.validateJobs, c.validateDatabase, c.validateFake,
		c.validateConnectors, c.validateListeners, c.validateVault} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateServer checks the API's, the database's and the keys' limits.
func (c config) validateServer() error {
	switch {
	case c.Listen == "":
		return errors.New("PAYORCH_LISTEN: must not be empty")
	case c.RateLimit < 0:
		return errors.New("PAYORCH_RATE_LIMIT: must be 0 (off) or positive")
	case c.ConsoleSignInLimit < 0:
		return errors.New("PAYORCH_CONSOLE_SIGNIN_LIMIT: must be 0 (off) or positive")
	case c.AuthFailureLimit < 0:
		return errors.New("PAYORCH_AUTH_FAILURE_LIMIT: must be 0 (off) or positive")
	case c.PublishableKeyLimit < 0:
		return errors.New("PAYORCH_PUBLISHABLE_KEY_LIMIT: must be 0 (off) or positive")
	case c.PublishableClientLimit < 0:
		return errors.New("PAYORCH_PUBLISHABLE_CLIENT_LIMIT: must be 0 (off) or positive")
	case c.DevPGPort <= 0 || c.DevPGPort > 65535:
		return errors.New("PAYORCH_DEV_PG_PORT: must be a port number")
	case c.ReplayCache < 0 || c.ReplayCache > 1_000_000:
		return errors.New("PAYORCH_REPLAY_CACHE: must be from 0 (off) to 1000000 entries")
	case c.DatabasePooler != poolerNone && c.DatabasePooler != poolerTransaction:
		return fmt.Errorf("PAYORCH_DATABASE_POOLER: %q is not none or transaction", c.DatabasePooler)
	case c.RequireSyncStandby && c.DatabasePooler == poolerTransaction:
		return errors.New("PAYORCH_REQUIRE_SYNC_STANDBY: a transaction pooler passes no session settings; " +
			"set it on payorch's role instead (ALTER ROLE … SET payorch.require_sync_standby = on) and leave this unset")
	case c.DBMaxConns < 2:
		return errors.New("PAYORCH_DB_MAX_CONNS: must be at least 2")
	case c.BackofficeMaxConns < 2 || c.BackofficeMaxConns > 1000:
		return errors.New("PAYORCH_BACKOFFICE_MAX_CONNS: must be from 2 to 1000 (a run and a connection for heartbeats and reads)")
	case c.ReadReplicaMaxWait < 0 || c.ReadReplicaMaxWait > time.Minute:
		return errors.New("PAYORCH_READ_REPLICA_MAX_WAIT: must be from 0 (only a replica already caught up serves) to 1m")
	case c.ShutdownTimeout <= 0:
		return errors.New("PAYORCH_SHUTDOWN_TIMEOUT: must be positive")
	case c.DataDir == "":
		return errors.New("PAYORCH_DATA_DIR: must not be empty")
	case c.ProviderTimeout <= 0:
		return errors.New("PAYORCH_PROVIDER_TIMEOUT: must be positive")
	case c.IdempotencyTTL <= 0 || c.IdempotencyTTL > 72*time.Hour:
		return errors.New("PAYORCH_IDEMPOTENCY_TTL: must be positive and at most 72h")
	case c.IdempotencyLease < 2*c.ProviderTimeout:
		return errors.New("PAYORCH_IDEMPOTENCY_LEASE: must be at least twice PAYORCH_PROVIDER_TIMEOUT, so a live request never loses its key")
	}
	return nil
}

// validateJobs checks the background jobs', the providers' and the
// breaker's limits.
func (c config) validateJobs() error {
	switch {
	case c.WebhookInterval < 0:
		return errors.New("PAYORCH_WEBHOOK_INTERVAL: must not be negative (0 turns delivery off)")
	case c.WebhookSenders < 1 || c.WebhookSenders > 256:
		return errors.New("PAYORCH_WEBHOOK_SENDERS: must be from 1 to 256")
	case c.WebhookTimeout < time.Second || c.WebhookTimeout > webhooks.WebhookTimeout:
		return fmt.Errorf("PAYORCH_WEBHOOK_TIMEOUT: must be from 1s to %s", webhooks.WebhookTimeout)
	case c.HistoryRetentionMonths < 0 || c.HistoryRetentionMonths > 1200:
		return errors.New("PAYORCH_HISTORY_RETENTION_MONTHS: must be from 0 (keep everything) to 1200")
	case c.EventsRetentionMonths < 0 || c.EventsRetentionMonths > 1200:
		return errors.New("PAYORCH_EVENTS_RETENTION_MONTHS: must be from 0 (keep everything) to 1200")
	case c.HoldSweepInterval < 0:
		return errors.New("PAYORCH_HOLD_SWEEP_INTERVAL: must not be negative (0 turns the hold sweeper off)")
	case c.HoldExpiringLead <= 0 || c.HoldExpiringLead > 30*24*time.Hour:
		return errors.New("PAYORCH_HOLD_EXPIRING_LEAD: must be positive and at most 720h")
	case c.HoldActionLead <= 0 || c.HoldActionLead < 2*c.HoldSweepInterval:
		return errors.New("PAYORCH_HOLD_ACTION_LEAD: must be positive and at least twice PAYORCH_HOLD_SWEEP_INTERVAL, so a pass starts the on_expiry action before the deadline")
	case c.AuthenticationTimeout < time.Minute || c.AuthenticationTimeout > 24*time.Hour:
		return errors.New("PAYORCH_AUTHENTICATION_TIMEOUT: must be from 1m to 24h")
	case c.ResolverInterval < 0 || c.SweepInterval < 0 || c.ResolverMinAge < 0:
		return errors.New("PAYORCH_RESOLVER_INTERVAL, PAYORCH_RESOLVER_MIN_AGE, PAYORCH_KEY_SWEEP_INTERVAL: must not be negative")
	case c.StripeTimeout <= 0:
		return errors.New("STRIPE_TIMEOUT: must be positive")
	case c.MaxAttempts < 1 || c.MaxAttempts > 10:
		return errors.New("PAYORCH_MAX_ATTEMPTS: must be from 1 (no failover) to 10")
	case c.Breaker.Window < time.Second || c.Breaker.Window > 24*time.Hour:
		return errors.New("PAYORCH_BREAKER_WINDOW: must be from 1s to 24h")
	case c.Breaker.MinCalls < 1 || c.Breaker.MinCalls > 1_000_000:
		return errors.New("PAYORCH_BREAKER_MIN_CALLS: must be from 1 to 1000000 calls")
	case c.Breaker.ErrorPercent < 1 || c.Breaker.ErrorPercent > 100:
		return errors.New("PAYORCH_BREAKER_ERROR_PERCENT: must be from 1 to 100")
	case c.Breaker.Cooldown < time.Second || c.Breaker.Cooldown > 24*time.Hour:
		return errors.New("PAYORCH_BREAKER_COOLDOWN: must be from 1s to 24h")
	}
	return nil
}

// validateDatabase checks the read replica's URL and reconciliation's
// time settings.
func (c config) validateDatabase() error {
	if c.DatabaseReadURL != "" {
		if _, err := pgx.ParseConfig(c.DatabaseReadURL); err != nil {
			return fmt.Errorf("DATABASE_READ_URL: %w", err)
		}
	}
	if _, err := time.LoadLocation(c.ReconcileTZ); err != nil {
		return fmt.Errorf("PAYORCH_RECONCILE_TZ: %q is not an IANA time zone", c.ReconcileTZ)
	}
	if c.ReconcileGrace < 0 || c.ReconcileGrace > 12*time.Hour {
		return errors.New("PAYORCH_RECONCILE_GRACE: must be between 0 and 12h")
	}
	return nil
}

// validateListeners checks the addresses payorch listens on and speaks
// to: the debug and metrics listeners, the public URL, TLS, logs and
// OTLP.
func (c config) validateListeners() error {
	if c.DebugListen != "" {
		host, _, err := net.SplitHostPort(c.DebugListen)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("PAYORCH_DEBUG_LISTEN: %q must be a loopback address such as 127.0.0.1:6060 (the profiler is not for the network)", c.DebugListen)
		}
	}
	if c.PublicURL != "" {
		if _, err := c.publicURL(); err != nil {
			return err
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("PAYORCH_TLS_CERT, PAYORCH_TLS_KEY: set both (a certificate and its key) or neither")
	}
	if c.MetricsListen != "" {
		if _, port, err := net.SplitHostPort(c.MetricsListen); err != nil || port == "" {
			return fmt.Errorf("PAYORCH_METRICS_LISTEN: %q is not an address such as 127.0.0.1:9090", c.MetricsListen)
		}
		if c.MetricsListen == c.Listen {
			return fmt.Errorf("PAYORCH_METRICS_LISTEN: %q is the API's address; metrics need an address of their own", c.MetricsListen)
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.OTLPProtocol != "" && c.OTLPProtocol != "http/protobuf" {
		return fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (payorch exports http/protobuf)", c.OTLPProtocol)
	}
	return nil
}

// What DATABASE_URL reaches (PAYORCH_DATABASE_POOLER).
const (
	poolerNone        = "none"
	poolerTransaction = "transaction"
)

// migrationURL is the URL migrations run over: DATABASE_DIRECT_URL, else
// DATABASE_URL, unless that is a transaction pooler, where the migrations'
// session advisory lock would be taken on one server session and released
// on another (an error then).
func (c config) migrationURL() (string, error) {
	switch {
	case c.DatabaseDirectURL != "":
		return c.DatabaseDirectURL, nil
	case c.DatabasePooler == poolerTransaction:
		return "", errors.New("PAYORCH_DATABASE_POOLER=transaction: migrations hold a session lock that a transaction pooler cannot keep; " +
			"set DATABASE_DIRECT_URL to the primary itself, or PAYORCH_AUTO_MIGRATE=false (serve --no-migrate) and migrate with DATABASE_URL naming the primary")
	}
	return c.DatabaseURL, nil
}

// listenURL is the URL of the key cache's LISTEN connection:
// DATABASE_DIRECT_URL, else DATABASE_URL unless that is a transaction
// pooler (LISTEN needs its session): "" then, and the cache stays off.
func (c config) listenURL() string {
	switch {
	case c.DatabaseDirectURL != "":
		return c.DatabaseDirectURL
	case c.DatabasePooler == poolerTransaction:
		return ""
	}
	return c.DatabaseURL
}

// publicURL parses PublicURL: an absolute http or https URL with a host,
// no user info, query or fragment.
func (c config) publicURL() (*url.URL, error) {
	u, err := url.Parse(c.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("PAYORCH_PUBLIC_URL: %q is not an absolute http(s) URL such as https://pay.example.com", c.PublicURL)
	}
	return u, nil
}

// insecureConsoleCookies reports whether, in production, nothing would
// ever make the console's cookies Secure: plain HTTP (no PAYORCH_TLS_CERT),
// no trusted proxy whose X-Forwarded-Proto could say https, and no https
// PAYORCH_PUBLIC_URL. A browser then sends the session cookie over any
// plain-HTTP connection to the host, where anyone on the path can read it.
func (c config) insecureConsoleCookies() bool {
	if c.Environment != envProduction || c.TLSCert != "" || len(c.TrustedProxies) > 0 {
		return false
	}
	u, err := c.publicURL()
	return c.PublicURL == "" || err != nil || u.Scheme != "https"
}

// insecureCookiesWarning is what serve logs when insecureConsoleCookies.
const insecureCookiesWarning = "console cookies will not be Secure: serving plain HTTP in production with no TLS certificate " +
	"(PAYORCH_TLS_CERT), no trusted proxy (PAYORCH_TRUSTED_PROXIES) and no https PAYORCH_PUBLIC_URL, so browsers " +
	"send the console session cookie over plain HTTP; set PAYORCH_PUBLIC_URL=https://… if a TLS proxy is in front, " +
	"or one of the others"

// Deployment environments (PAYORCH_ENVIRONMENT).
const (
	envProduction  = "production"
	envDevelopment = "development"
	envTest        = "test"
)

// commandEnvironment is the environment cmd runs in when
// PAYORCH_ENVIRONMENT is unset: development for `dev`, which is nothing
// else, and production for the rest, so that a real deployment never runs
// on the fake by accident.
func commandEnvironment(cmd string) string {
	if cmd == "dev" {
		return envDevelopment
	}
	return envProduction
}

// validateFake checks the environment and the fake provider's settings.
// The fake moves no money: in production it is refused outright (the
// checks need Environment resolved, as run does before any command).
func (c config) validateFake() error {
	switch c.Environment {
	case "", envProduction, envDevelopment, envTest:
	default:
		return fmt.Errorf("PAYORCH_ENVIRONMENT: %q is not production, development or test", c.Environment)
	}
	if strings.ContainsAny(c.FakeToken, " \t\r\n") {
		return errors.New("PAYORCH_FAKE_TOKEN: must not contain white space")
	}
	if c.Environment != envProduction {
		return nil
	}
	for _, cc := range c.Connectors {
		switch {
		case cc.Adapter != adapterFake:
		case !cc.implicit:
			return fmt.Errorf("PAYORCH_CONNECTORS: connector %s uses the fake adapter, a provider for development and tests, and PAYORCH_ENVIRONMENT is production "+
				"(the default of every command but dev): remove it, or set PAYORCH_ENVIRONMENT=development or test if this deployment is not production", cc.Name)
		case c.DefaultProvider == cc.Name:
			return errors.New("PAYORCH_DEFAULT_PROVIDER is fake, a provider for development and tests, and PAYORCH_ENVIRONMENT is production " +
				"(the default of every command but dev): set PAYORCH_DEFAULT_PROVIDER=stripe with STRIPE_SECRET_KEY, " +
				"or PAYORCH_ENVIRONMENT=development or test if this deployment is not production")
		case cc.URL != "":
			return fmt.Errorf("%s is set and PAYORCH_ENVIRONMENT is production: the fake provider is for development and tests; "+
				"unset %[1]s, or set PAYORCH_ENVIRONMENT=development or test", cc.varOf(settingURL))
		}
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("PAYORCH_LOG_LEVEL: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(c config) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	return slog.New(payorchLogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}
