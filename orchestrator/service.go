// Package orchestrator is payorch's domain: tenants and API keys, payments
// and their state machine, the idempotency protocol, the application error
// type and its codes, and Service, the pgx-backed type that does it all on
// PostgreSQL, the system of record.
//
// orchestrator never imports Echo, stripe-go or cron; the HTTP layer
// (httpapi) and the reconciliation job (reconcile) call into it.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/providers"
)

// Config wires a Service.
type Config struct {
	// Pool is the connection pool on the primary.
	Pool *pgxpool.Pool
	// ListenConfig configures the key cache's LISTEN connection
	// (StartKeyCache): a direct connection to the primary, for when Pool
	// goes through a transaction pooler, where LISTEN does not work. Nil
	// means one configured like Pool's connections.
	ListenConfig *pgx.ConnConfig
	// SchemaVersions returns the database's schema version and the newest
	// one the binary embeds (migrations.Migrator.Versions); Ready checks
	// they are equal. Nil skips that check.
	SchemaVersions func(ctx context.Context) (current, target int64, err error)
	// Clock returns the current time; defaults to time.Now.
	Clock func() time.Time
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Providers by name; DefaultProvider is used when a request names none.
	Providers       map[string]providers.Provider
	DefaultProvider string
	// Connectors holds the options of connectors by name (connector.go);
	// a connector without an entry has the zero options.
	Connectors map[string]ConnectorOptions
	// MaxAttempts bounds the attempts of one payment across connectors;
	// 0 means DefaultMaxAttempts.
	MaxAttempts int
	// Breaker tunes the connectors' health breakers (breaker.go).
	Breaker BreakerConfig
	// AuthRate tunes how the auth_rate strategy measures the connectors
	// (authrate.go).
	AuthRate AuthRateConfig
	// HoldExpiringLead is how long before a hold's deadline the sweeper
	// sends payment.hold_expiring; 0 means DefaultHoldExpiringLead.
	HoldExpiringLead time.Duration
	// HoldActionLead is how long before a hold's deadline the sweeper
	// starts its on_expiry action; 0 means DefaultHoldActionLead.
	HoldActionLead time.Duration
	// ActionTimeout is how long an authentication challenge may stay open
	// before the hold sweeper abandons it; 0 means DefaultActionTimeout.
	ActionTimeout time.Duration
	// AllowHTTPLoopbackReturnURLs lets a payment's return_url be http://
	// on a loopback host (outside production).
	AllowHTTPLoopbackReturnURLs bool
	// ProviderTimeout bounds one provider call. Defaults to 15s.
	ProviderTimeout time.Duration
	// Lease is how long a request holds an idempotency key before another
	// may take it over; longer than any provider call. Defaults to 60s.
	Lease time.Duration
	// KeyTTL is how long an idempotency key is kept (SPEC: default 24h, at
	// most 72h).
	KeyTTL time.Duration
	// TracerProvider makes the span of each provider call; nil means no
	// spans (the OpenTelemetry no-op).
	TracerProvider trace.TracerProvider
	// ReplayCache is how many completed idempotency keys each instance
	// keeps in memory to answer replays without reading the database
	// (replaycache.go); 0 turns it off.
	ReplayCache int
	// MeterProvider takes the Service's metrics: provider call durations,
	// lease takeovers, purged keys and the pending gauges (computed from
	// the database when collected). Nil means no metrics.
	MeterProvider metric.MeterProvider
	// Vault holds the cards of payment methods payorch tokenized ("vpm_…",
	// package orchestrator/vault); nil when no vault keys are configured:
	// then no payment can name a vaulted method.
	Vault CardVault
}

// Service is the pgx-backed implementation of payorch's domain.
type Service struct {
	pool             *pgxpool.Pool
	schemaVersions   func(context.Context) (current, target int64, err error)
	now              func() time.Time
	logger           *slog.Logger
	providers        map[string]providers.Provider
	defaultProvider  string
	connectors       map[string]ConnectorOptions
	maxAttempts      int
	breakers         map[string]*breaker
	authRates        *authRates
	holdExpiringLead time.Duration
	holdActionLead   time.Duration
	actionTimeout    time.Duration
	loopbackReturn   bool
	providerTimeout  time.Duration
	lease            time.Duration
	keyTTL           time.Duration
	tel              *telemetry
	vault            CardVault
	// replays holds completed keys for replays; nil when off.
	replays *replayCache

	// keys caches valid API keys, and routes tenants' active routing,
	// while StartKeyCache's listener runs.
	keys   *keyCache
	routes *routingCache
	// unknownKeys remembers ids that authenticated nobody, listener or
	// not.
	unknownKeys   *unknownKeys
	keyListenerMu sync.Mutex
	keyListenerOn bool
	// listenConfig is Config.ListenConfig.
	listenConfig *pgx.ConnConfig
	// keyListenerDial opens the cache's listener connection; nil means
	// keyListenerConn (tests stand in for it).
	keyListenerDial func(context.Context) (*pgx.Conn, error)
	// keyMaterial makes a new key's id, secret and hash; nil means
	// newKeyMaterial (tests choose the id).
	keyMaterial func() (id, secret string, hash []byte)
}

// NewService returns a Service on cfg.Pool.
func NewService(cfg Config) *Service {
	s := &Service{pool: cfg.Pool, now: cfg.Clock, logger: cfg.Logger, providers: cfg.Providers,
		defaultProvider: cfg.DefaultProvider, providerTimeout: cfg.ProviderTimeout, lease: cfg.Lease, keyTTL: cfg.KeyTTL,
		keys: newKeyCache(keyCacheMaxEntries, keyCacheMaxAge), replays: newReplayCache(cfg.ReplayCache),
		routes:      newRoutingCache(routingCacheMaxEntries, routingCacheMaxAge),
		unknownKeys: newUnknownKeys(unknownKeyMaxEntries, unknownKeyMaxAge)}
	s.schemaVersions, s.listenConfig, s.vault = cfg.SchemaVersions, cfg.ListenConfig, cfg.Vault
	s.connectors, s.maxAttempts = cfg.Connectors, cfg.MaxAttempts
	if s.maxAttempts <= 0 {
		s.maxAttempts = DefaultMaxAttempts
	}
	s.holdExpiringLead, s.holdActionLead = cfg.HoldExpiringLead, cfg.HoldActionLead
	s.actionTimeout, s.loopbackReturn = cfg.ActionTimeout, cfg.AllowHTTPLoopbackReturnURLs
	if s.actionTimeout <= 0 {
		s.actionTimeout = DefaultActionTimeout
	}
	if s.holdExpiringLead <= 0 {
		s.holdExpiringLead = DefaultHoldExpiringLead
	}
	if s.holdActionLead <= 0 {
		s.holdActionLead = DefaultHoldActionLead
	}
	s.authRates = newAuthRates(cfg.AuthRate)
	s.breakers = make(map[string]*breaker, len(s.providers))
	for name := range s.providers {
		s.breakers[name] = newBreaker(cfg.Breaker.withDefaults())
	}
	if s.providerTimeout == 0 {
		s.providerTimeout = 15 * time.Second
	}
	if s.lease == 0 {
		s.lease = 60 * time.Second
	}
	if s.keyTTL == 0 {
		s.keyTTL = DefaultKeyTTL
	}
	if s.keyTTL > MaxKeyTTL {
		s.keyTTL = MaxKeyTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var err error
	if s.tel, err = newTelemetry(s, cfg.TracerProvider, cfg.MeterProvider); err != nil {
		s.logger.Warn("orchestrator: telemetry instruments", "error", err)
	}
	return s
}

// Idempotency key lifetimes (SPEC: Idempotency protocol).
const (
	DefaultKeyTTL = 24 * time.Hour
	MaxKeyTTL     = 72 * time.Hour
)

// PostgreSQL error codes translated at the storage edge.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
	pgCheckViolation      = "23514"
	// pgLockNotAvailable: lock_timeout ran out (history partitions).
	pgLockNotAvailable = "55P03"
	// pgNoSyncStandby is raised by migration 00015's trigger: an answer
	// was about to be stored on a primary without a synchronous standby
	// while payorch.require_sync_standby is on.
	pgNoSyncStandby = "PO001"
)

// AsUnavailable returns the 503 a client gets for err when err says the
// database may not be written to safely right now (pgNoSyncStandby): the
// request stored nothing, and its retry with the same key is answered
// once the primary replicates synchronously again. Nil for any other
// error.
func AsUnavailable(err error) *Error {
	if code, _ := constraintOf(err); code == pgNoSyncStandby {
		return &Error{Code: CodeUnavailable, RetryAfter: time.Second, Err: err,
			Message: "the database has no synchronous standby, so an answer given now could be lost in a failover; retry with the same key"}
	}
	return nil
}

// constraintOf returns the SQLSTATE and constraint name of a PostgreSQL
// error, or "" for any other error.
func constraintOf(err error) (code, constraint string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.ConstraintName
	}
	return "", ""
}

// querier runs a query: the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// isNoRows reports whether err is pgx's "no rows" error.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// NamedArgs are the named arguments of a statement, which names them
// @name: the statement's text says what each value is, and a value binds
// to its name, not to a position. A name the statement uses but the map
// lacks, or a name it does not use, is an error. Unlike pgx.NamedArgs, which rewrites @name to $n at every call
// (lexing the whole text: a tenth of the Go CPU of an authorization, by
// BenchmarkAuthorize), the rewriting is done once per statement text, by
// pgx's own rewriting, and cached. Exported for the packages built on
// the domain (orchestrator/webhooks), whose statements run as often.
type NamedArgs map[string]any

// namedStatement is a statement text rewritten to $n placeholders, and
// the name of each.
type namedStatement struct {
	sql   string
	names []string
}

// namedStatements caches namedStatement by statement text.
var namedStatements sync.Map

// RewriteQuery implements pgx.QueryRewriter.
func (na NamedArgs) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, _ []any) (string, []any, error) {
	st, err := na.statement(ctx, conn, sql)
	if err != nil {
		return "", nil, err
	}
	if len(st.names) != len(na) {
		for name := range na {
			if !slices.Contains(st.names, name) {
				return "", nil, fmt.Errorf("named argument %s is not used by the statement", name)
			}
		}
	}
	args := make([]any, len(st.names))
	for i, name := range st.names {
		v, ok := na[name]
		if !ok {
			return "", nil, fmt.Errorf("the statement's named argument %s is missing", name)
		}
		args[i] = v
	}
	return st.sql, args, nil
}

// statement returns sql rewritten, from the cache or by pgx.NamedArgs,
// each argument standing for its own name.
func (na NamedArgs) statement(ctx context.Context, conn *pgx.Conn, sql string) (*namedStatement, error) {
	if st, ok := namedStatements.Load(sql); ok {
		return st.(*namedStatement), nil
	}
	probe := make(pgx.NamedArgs, len(na))
	for name := range na {
		probe[name] = name
	}
	rewritten, names, err := probe.RewriteQuery(ctx, conn, sql, nil)
	if err != nil {
		return nil, err
	}
	st := &namedStatement{sql: rewritten, names: make([]string, len(names))}
	for i, n := range names {
		name, ok := n.(string)
		if !ok {
			return nil, fmt.Errorf("argument $%d of the statement is not among the named arguments given", i+1)
		}
		st.names[i] = name
	}
	namedStatements.Store(sql, st)
	return st, nil
}

// inTx runs fn in a transaction on the pool and commits it, unless fn
// fails: then it rolls back and returns fn's error. A refusal (a business
// refusal decided in the transaction) is not a failure: what fn wrote is
// committed and the refusal returned.
func (s *Service) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed
	err = fn(tx)
	var r refusal
	if err != nil && !errors.As(err, &r) {
		return err
	}
	if cerr := tx.Commit(ctx); cerr != nil {
		return cerr
	}
	return err
}
