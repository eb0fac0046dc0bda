// Package reconcile is finance's view of the truth: a daily job per
// provider that reads the provider's record of a business day (widened by a
// grace window around midnight), matches it against the payments table, and
// records a versioned run with counts, amount totals and one discrepancy per
// finding. A re-run of the same (provider, date) is a new version that says
// what changed against the previous one. The schedule (robfig/cron) fires on
// every instance; the runs table lets exactly one of them run each day.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payorch/payorch/internal/readreplica"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// Config wires a Reconciler.
type Config struct {
	// Pool is the back-office pool: runs, heartbeats, finance's reads and
	// CSV exports take their connections from it. Give it a pool of its own
	// (cmd/payorch: PAYORCH_BACKOFFICE_MAX_CONNS), never the pool payments
	// use, so back-office work cannot starve merchants.
	Pool *pgxpool.Pool
	// Replica, when set, is a pool on a streaming replica of Pool's
	// primary (cmd/payorch: DATABASE_READ_URL, as many connections as
	// Pool). Runs read their pairs from it, and finance's lists (runs, a
	// run, its discrepancies and their CSV, discrepancies per day) are
	// served by it, each only once it has replayed every write committed
	// on the primary before the read began (internal/readreplica), else
	// by Pool. Writes, and the reads that decide a write, stay on Pool.
	Replica *pgxpool.Pool
	// ReplicaMaxWait bounds how long a read waits for Replica to catch up
	// before it goes to Pool; 0 means readreplica.DefaultMaxWait, negative
	// no wait (only a replica already caught up serves).
	ReplicaMaxWait time.Duration
	Providers      map[string]providers.Provider
	// MaxRuns caps the runs this Reconciler executes at once; the others
	// wait their turn in order (status running, lease kept alive). 0 means
	// half of Pool's connections, at least 1, so that heartbeats and
	// finance's reads always find a connection besides the runs'.
	MaxRuns int
	// RunTimeout bounds the work of one run once it has its turn (time
	// spent waiting for it does not count). 0 means DefaultRunTimeout.
	RunTimeout time.Duration
	// Location is the time zone business days are cut in. Defaults to UTC.
	Location *time.Location
	// Grace widens the window read from the provider on both sides, so an
	// item stamped a little differently on each side of midnight is
	// compared, not reported missing. Defaults to 2h.
	Grace time.Duration
	// StuckAfter is how long a payment may stay pending before it is a
	// stuck_pending discrepancy. Defaults to 1h.
	StuckAfter time.Duration
	Clock      func() time.Time
	Logger     *slog.Logger
	// TracerProvider makes one span per run executed (SQL and provider
	// calls below it); nil means no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider takes the run duration histogram and the gauges of
	// each provider's latest succeeded run (open discrepancies by
	// category, when it finished), read from the database when collected.
	// Nil means no metrics.
	MeterProvider metric.MeterProvider
}

// Reconciler runs reconciliations and answers finance's questions about
// them.
type Reconciler struct {
	pool       *pgxpool.Pool
	providers  map[string]providers.Provider
	loc        *time.Location
	grace      time.Duration
	stuckAfter time.Duration
	now        func() time.Time
	logger     *slog.Logger
	tel        *telemetry
	runTimeout time.Duration
	// turns holds one token per run executing; a run waits for a free
	// one (channel senders are served in order).
	turns  chan struct{}
	leases *leases
	// reads sends finance's reads and the pairing to Replica when it has
	// caught up, else to pool.
	reads *readreplica.Router
}

// DefaultRunTimeout bounds one run's work when Config.RunTimeout is 0.
const DefaultRunTimeout = 30 * time.Minute

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	r := &Reconciler{pool: cfg.Pool, providers: cfg.Providers, loc: cfg.Location, grace: cfg.Grace,
		stuckAfter: cfg.StuckAfter, now: cfg.Clock, logger: cfg.Logger, runTimeout: cfg.RunTimeout}
	maxRuns := cfg.MaxRuns
	if maxRuns <= 0 {
		maxRuns = 1
		if r.pool != nil {
			maxRuns = max(1, int(r.pool.Config().MaxConns)/2)
		}
	}
	r.turns = make(chan struct{}, maxRuns)
	r.leases = &leases{r: r, ids: map[int64]struct{}{}}
	if r.runTimeout <= 0 {
		r.runTimeout = DefaultRunTimeout
	}
	if r.loc == nil {
		r.loc = time.UTC
	}
	if r.grace == 0 {
		r.grace = 2 * time.Hour
	}
	if r.stuckAfter == 0 {
		r.stuckAfter = time.Hour
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.logger == nil {
		r.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r.reads = readreplica.New(readreplica.Config{Primary: cfg.Pool, Replica: cfg.Replica, MaxWait: cfg.ReplicaMaxWait,
		Logger: r.logger, MeterProvider: cfg.MeterProvider})
	var err error
	if r.tel, err = newTelemetry(r, cfg.TracerProvider, cfg.MeterProvider); err != nil {
		r.logger.Warn("reconcile: telemetry instruments", "error", err)
	}
	return r
}

// Triggers of a run.
const (
	TriggerSchedule = "schedule"
	TriggerAPI      = "api"
	TriggerCLI      = "cli"
)

// Run is one version of the reconciliation of (provider, business date).
type Run struct {
	ID               int64                         `json:"id"`
	Object           string                        `json:"object"`
	Provider         string                        `json:"provider"`
	BusinessDate     string                        `json:"business_date"`
	Version          int                           `json:"version"`
	Trigger          string                        `json:"trigger"`
	Status           string                        `json:"status"`
	TimeZone         string                        `json:"time_zone"`
	WindowStart      time.Time                     `json:"window_start"`
	WindowEnd        time.Time                     `json:"window_end"`
	GraceSeconds     int                           `json:"grace_seconds"`
	RequestedBy      string                        `json:"requested_by"`
	StartedAt        time.Time                     `json:"started_at"`
	FinishedAt       *time.Time                    `json:"finished_at"`
	LocalCount       int64                         `json:"local_count"`
	ProviderCount    int64                         `json:"provider_count"`
	MatchedCount     int64                         `json:"matched_count"`
	DiscrepancyCount int64                         `json:"discrepancy_count"`
	Totals           map[string]map[string]*Totals `json:"totals"`
	// Settlement is the day's money at the provider by currency; nil when
	// the provider reports none (settle.go).
	Settlement     map[string]*Settlement `json:"settlement"`
	CategoryCounts map[string]int64       `json:"category_counts"`
	Diff           Diff                   `json:"diff"`
	Error          *string                `json:"error"`
	// Bank is what the run found of the connector's payouts in the bank
	// (bank.go); null when the connector has no bank account.
	Bank       *BankSummary `json:"bank"`
	leaseUntil *time.Time
}

// Totals are the amounts of one side of a run in one currency, in minor
// units.
type Totals struct {
	Count      int64 `json:"count"`
	Authorized int64 `json:"authorized_minor"`
	Captured   int64 `json:"captured_minor"`
	Refunded   int64 `json:"refunded_minor"`
}

// Diff says what changed against the previous version of the run.
type Diff struct {
	PreviousRunID *int64 `json:"previous_run_id"`
	New           int64  `json:"new"`
	StillOpen     int64  `json:"still_open"`
	Gone          int64  `json:"gone"`
}

const runCols = `id, provider, business_date::text, version, trigger, status, time_zone, window_start, window_end,
	grace_seconds, requested_by, started_at, finished_at, local_count, provider_count, matched_count,
	discrepancy_count, totals, category_counts, diff, error, lease_until, settlement, bank`

func scanRun(row pgx.CollectableRow) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.Provider, &r.BusinessDate, &r.Version, &r.Trigger, &r.Status, &r.TimeZone,
		&r.WindowStart, &r.WindowEnd, &r.GraceSeconds, &r.RequestedBy, &r.StartedAt, &r.FinishedAt, &r.LocalCount,
		&r.ProviderCount, &r.MatchedCount, &r.DiscrepancyCount, &r.Totals, &r.CategoryCounts, &r.Diff, &r.Error, &r.leaseUntil,
		&r.Settlement, &r.Bank)
	r.normalize()
	return r, err
}

// normalize completes a Run as read: its object name, times in UTC, maps
// never nil.
func (r *Run) normalize() {
	r.Object = "reconciliation_run"
	r.WindowStart, r.WindowEnd, r.StartedAt = r.WindowStart.UTC(), r.WindowEnd.UTC(), r.StartedAt.UTC()
	if r.FinishedAt != nil {
		t := r.FinishedAt.UTC()
		r.FinishedAt = &t
	}
	if r.Totals == nil {
		r.Totals = map[string]map[string]*Totals{}
	}
	if r.CategoryCounts == nil {
		r.CategoryCounts = map[string]int64{}
	}
}

// The data of a reconciliation.run.… event is the Run as GET
// /v1/reconciliation/runs/{id} answers it once the run finished, decoded
// from the event's stored object and encoded by Run itself, like every
// event's data (orchestrator/eventdata.go).
func init() {
	orchestrator.RegisterEventRenderer("reconciliation_run", func(stored []byte) (any, error) {
		var r Run
		if err := json.Unmarshal(stored, &r); err != nil {
			return nil, err
		}
		r.normalize()
		return r, nil
	})
}

// ErrAlreadyScheduled is returned by Begin for a scheduled run of a day
// that another instance (or an earlier firing) already started.
var ErrAlreadyScheduled = errors.New("reconcile: the scheduled run of this day already exists")

// Business dates are days from minDate to maxDate: anything else is a
// typing error, and years before 1 do not even exist for PostgreSQL.
var (
	minDate = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDate = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// ParseDate parses a business date (YYYY-MM-DD) from 2000-01-01 to
// 9999-12-31. Errors: validation_failed (param date).
func ParseDate(s string) (time.Time, error) {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil || d.Before(minDate) || d.After(maxDate) {
		return time.Time{}, orchestrator.ParamError("date", "date must be a day from %s to %s, as YYYY-MM-DD",
			minDate.Format(time.DateOnly), maxDate.Format(time.DateOnly))
	}
	return d, nil
}

// Yesterday is the business date before now in the reconciler's zone.
func (r *Reconciler) Yesterday() time.Time {
	y, m, d := r.now().In(r.loc).AddDate(0, 0, -1).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// CheckRun refuses what Begin would refuse of (provider, date) before
// anything is recorded, so that a request can be refused before its
// idempotency key is claimed. Errors: validation_failed (unknown provider,
// date in the future).
func (r *Reconciler) CheckRun(provider string, date time.Time) error {
	if _, ok := r.providers[provider]; !ok {
		return orchestrator.ParamError("provider", "provider %q is not configured", provider)
	}
	y, m, d := date.Date()
	if start := time.Date(y, m, d, 0, 0, 0, 0, r.loc); !start.Before(r.now()) {
		return orchestrator.ParamError("date", "%s has not begun yet in %s", date.Format(time.DateOnly), r.loc)
	}
	return nil
}

// Begin records a new version of the run of (provider, date) as running
// and returns it; Execute does the work. Errors: validation_failed (see
// CheckRun), ErrAlreadyScheduled (trigger schedule).
func (r *Reconciler) Begin(ctx context.Context, provider string, date time.Time, trigger, requestedBy string) (Run, error) {
	if err := r.CheckRun(provider, date); err != nil {
		return Run{}, err
	}
	y, m, d := date.Date()
	start := time.Date(y, m, d, 0, 0, 0, 0, r.loc)
	end := start.AddDate(0, 0, 1)
	now := r.now()
	var run Run
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		// Versions of one (provider, date) are numbered under a lock.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
			"reconcile:"+provider+":"+date.Format(time.DateOnly)); err != nil {
			return err
		}
		q := `INSERT INTO reconciliation_runs (provider, business_date, version, trigger, time_zone, window_start,
				window_end, grace_seconds, requested_by, started_at, lease_until)
			SELECT $1, $2::date, coalesce(max(version), 0) + 1, $3, $4, $5, $6, $7, $8, $9, $10
			FROM reconciliation_runs WHERE provider = $1 AND business_date = $2::date
			ON CONFLICT DO NOTHING
			RETURNING ` + runCols
		rows, _ := tx.Query(ctx, q, provider, date.Format(time.DateOnly), trigger, r.loc.String(), start, end,
			int(r.grace/time.Second), requestedBy, now, now.Add(leaseFor))
		var err error
		run, err = pgx.CollectExactlyOneRow(rows, scanRun)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrAlreadyScheduled
		}
		return err
	})
	if errors.Is(err, ErrAlreadyScheduled) {
		return Run{}, err
	}
	if err != nil {
		return Run{}, fmt.Errorf("reconcile: begin: %w", err)
	}
	return run, nil
}

// Reconcile begins and executes a run in the caller's goroutine and
// returns it finished (succeeded or failed).
func (r *Reconciler) Reconcile(ctx context.Context, provider string, date time.Time, trigger, requestedBy string) (Run, error) {
	run, err := r.Begin(ctx, provider, date, trigger, requestedBy)
	if err != nil {
		return Run{}, err
	}
	return r.Execute(ctx, run)
}

// Execute does a begun run and records its outcome; a failure is recorded
// on the run (status failed, with a reason fit for finance's eyes; the
// detail goes to the log with the run id) as well as returned. The run
// first waits for its turn (MaxRuns execute at once), keeping its lease
// alive meanwhile, so a queued run is never reported abandoned; then it
// works, in a span of its own, within RunTimeout.
func (r *Reconciler) Execute(ctx context.Context, run Run) (Run, error) {
	logger := r.logger.With("run_id", run.ID, "provider", run.Provider, "business_date", run.BusinessDate, "version", run.Version)
	defer r.leases.hold(run.ID)()
	select {
	case r.turns <- struct{}{}:
	case <-ctx.Done():
		return r.fail(ctx, logger, run, fmt.Errorf("waiting for a turn: %w", context.Cause(ctx)))
	}
	defer func() { <-r.turns }()

	wctx, cancel := context.WithTimeout(ctx, r.runTimeout)
	defer cancel()
	wctx, span := r.tel.startRunSpan(wctx, run)
	start := time.Now()
	res, err := r.match(wctx, run)
	defer func() { r.tel.endRun(wctx, span, run, res, err, time.Since(start)) }()
	defer r.tel.forgetLastRuns()
	if err != nil {
		if wctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(wctx))
		}
		return r.fail(ctx, logger, run, err)
	}
	logger.InfoContext(ctx, "reconciliation finished", "duration", time.Since(start), "local", res.LocalCount,
		"provider", res.ProviderCount, "discrepancies", res.DiscrepancyCount)
	return r.getRun(ctx, r.pool, run.ID) // on the primary: the replica may not have the finish yet
}

// read runs fn on a connection that sees every write committed before
// the call: the replica's when it has caught up, else the primary's
// (readreplica.Router.Read).
func (r *Reconciler) read(ctx context.Context, fn func(conn *pgxpool.Conn) error) error {
	lsn, err := r.reads.Position(ctx)
	if err != nil {
		return err
	}
	return r.reads.Read(ctx, lsn, fn)
}

// failTimeout bounds recording a failed run.
const failTimeout = 30 * time.Second

// fail logs why run failed, records it as failed with a client-safe reason
// and drops its staged provider rows and money.
func (r *Reconciler) fail(ctx context.Context, logger *slog.Logger, run Run, cause error) (Run, error) {
	reason := failureReason(run.ID, cause)
	logger.ErrorContext(ctx, "reconciliation failed", "error", cause, "reason", reason)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failTimeout)
	defer cancel()
	// Only a running run fails: a commit that succeeded but whose answer
	// was lost leaves the run succeeded. The status change writes the
	// run's reconciliation.run.failed event (migration 00009's trigger).
	_, uerr := r.pool.Exec(fctx, `UPDATE reconciliation_runs SET status = 'failed', error = $2,
		finished_at = $3, lease_until = NULL WHERE id = $1 AND status = 'running'`, run.ID, reason, r.now())
	if uerr != nil {
		logger.ErrorContext(ctx, "recording a failed reconciliation", "error", uerr)
	}
	_, _ = r.pool.Exec(fctx, `DELETE FROM reconciliation_provider_rows WHERE run_id = $1`, run.ID)
	_, _ = r.pool.Exec(fctx, clearMoneySQL, run.ID)
	return Run{}, errors.Join(cause, uerr)
}

// failureReason says why a run failed in words fit for finance: the
// class of the failure, never the driver's text (SQL, SQLSTATE, host or
// user names), which goes to the log with the run id instead.
func failureReason(runID int64, err error) string {
	var pe *providers.Error
	var pg *pgconn.PgError
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out; re-run it"
	case errors.Is(err, context.Canceled):
		return "canceled: the instance running it stopped; re-run it"
	case errors.As(err, &pe):
		return "the provider's record could not be read (" + pe.Kind.String() + ")"
	case errors.As(err, &pg):
		switch {
		case pg.Code == "57014": // query_canceled: a statement timeout
			return "timed out; re-run it"
		case strings.HasPrefix(pg.Code, "08"), strings.HasPrefix(pg.Code, "53"), strings.HasPrefix(pg.Code, "57"),
			strings.HasPrefix(pg.Code, "58"):
			// connection exception, insufficient resources, operator
			// intervention (shutdown), system error
			return "database unavailable; re-run it"
		}
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return "database unavailable; re-run it"
	}
	return "internal error; see the logs for run " + itoa(runID)
}

// GetRun reads one run (from the replica when it has caught up). A run
// whose executor died (its lease ran out) reads as failed. Errors:
// not_found.
func (r *Reconciler) GetRun(ctx context.Context, id int64) (Run, error) {
	var run Run
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		var err error
		run, err = r.getRun(ctx, conn, id)
		return err
	})
	return run, err
}

// querier runs queries: a pool, or a connection of one.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// getRun reads one run on q (see GetRun).
func (r *Reconciler) getRun(ctx context.Context, q querier, id int64) (Run, error) {
	rows, _ := q.Query(ctx, `SELECT `+runCols+` FROM reconciliation_runs WHERE id = $1`, id)
	run, err := pgx.CollectExactlyOneRow(rows, scanRun)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no reconciliation run %d", id)
	}
	if err != nil {
		return Run{}, fmt.Errorf("reconcile: get run: %w", err)
	}
	return r.abandoned(run), nil
}

// abandonedReason is the error of a run whose executor died.
const abandonedReason = "abandoned: the instance running it stopped; re-run it"

func (r *Reconciler) abandoned(run Run) Run {
	if run.Status == "running" && run.leaseUntil != nil && run.leaseUntil.Before(r.now()) {
		run.Status = "failed"
		msg := abandonedReason
		run.Error = &msg
	}
	return run
}

// failAbandonedSQL records as failed every running run whose lease ran out
// (its executor died without a word), and drops their staged provider
// rows and money. The status change writes each one's reconciliation.run.failed
// event (migration 00009's trigger), so finance hears of a run that died
// as of one that failed. A run that was only slow to beat, and finishes
// afterwards, cannot overwrite this: finishRunSQL moves only a running run.
const failAbandonedSQL = `
	WITH failed AS (
		UPDATE reconciliation_runs SET status = 'failed', error = $2, finished_at = $1, lease_until = NULL
		WHERE status = 'running' AND lease_until < $1
		RETURNING id
	), cleared AS (
		DELETE FROM reconciliation_provider_rows WHERE run_id IN (SELECT id FROM failed)
	), cleared_money AS (
		DELETE FROM reconciliation_money_rows WHERE run_id IN (SELECT id FROM failed)
	)
	SELECT count(*) FROM failed`

// FailAbandoned records every run whose executor died as failed (and
// announces it), returning how many. serve calls it on every sweep;
// several instances may at once (the UPDATE takes each run once).
func (r *Reconciler) FailAbandoned(ctx context.Context) (int64, error) {
	var n int64
	if err := r.pool.QueryRow(ctx, failAbandonedSQL, r.now(), abandonedReason).Scan(&n); err != nil {
		return 0, fmt.Errorf("reconcile: fail abandoned runs: %w", err)
	}
	return n, nil
}

// RunFilter selects runs, newest first.
type RunFilter struct {
	Provider string
	Date     string
	Limit    int
	// StartingAfter is the id of the last run of the previous page.
	StartingAfter int64
}

// ListRuns lists runs and whether more follow (from the replica when it
// has caught up).
func (r *Reconciler) ListRuns(ctx context.Context, f RunFilter) ([]Run, bool, error) {
	if f.Limit <= 0 || f.Limit > 100 {
		f.Limit = 20
	}
	q := `SELECT ` + runCols + ` FROM reconciliation_runs
		WHERE ($1 = '' OR provider = $1) AND ($2 = '' OR business_date = $2::date) AND ($3::bigint = 0 OR id < $3)
		ORDER BY id DESC LIMIT $4`
	var runs []Run
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		rows, _ := conn.Query(ctx, q, f.Provider, f.Date, f.StartingAfter, f.Limit+1)
		var err error
		runs, err = pgx.CollectRows(rows, scanRun)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("reconcile: list runs: %w", err)
	}
	more := len(runs) > f.Limit
	if more {
		runs = runs[:f.Limit]
	}
	for i := range runs {
		runs[i] = r.abandoned(runs[i])
	}
	return runs, more, nil
}

// itoa is for fingerprints and CSV.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
