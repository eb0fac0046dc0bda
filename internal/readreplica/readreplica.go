// Package readreplica sends reads to a streaming replica without ever
// showing them the past: a read is served by the replica only once the
// replica has replayed the primary's write-ahead log up to where it stood
// when the read began, else by the primary.
//
// That is read-your-writes for everyone, which is stronger than keeping
// each client's reads after its own writes on the primary, and simpler
// (nothing to remember per client, nothing shared between instances):
// every write committed before a read starts, by anyone, is visible to it,
// wherever it runs. The price is one cheap query on the primary per read
// (pg_current_wal_insert_lsn), and, when the replica lags, a bounded wait
// before the read goes to the primary anyway.
//
// A replica that is down, unreachable, not in recovery (promoted, or a
// primary named by mistake) or too far behind is never an error: the read
// goes to the primary, and the fallback is logged and counted
// (payorch.read_replica.reads, by served_by and reason).
package readreplica

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/payorch/payorch/internal/otelx"
)

// InstrumentationName names the meter of this package.
const InstrumentationName = "github.com/payorch/payorch/internal/readreplica"

// DefaultMaxWait is how long a read waits for the replica to catch up
// when Config.MaxWait is 0.
const DefaultMaxWait = 2 * time.Second

// LSN is a position in the primary's write-ahead log, in bytes (a pg_lsn
// as a number).
type LSN int64

// Config wires a Router.
type Config struct {
	// Primary is the pool on the primary every write goes to; reads fall
	// back to it.
	Primary *pgxpool.Pool
	// Replica is a pool on a streaming replica of Primary; nil means every
	// read goes to Primary, with no extra query.
	Replica *pgxpool.Pool
	// MaxWait bounds how long a read waits for Replica to replay up to
	// its position, connection included; past it the read goes to
	// Primary. 0 means DefaultMaxWait; negative means do not wait (the
	// replica serves only reads it has already caught up with).
	MaxWait       time.Duration
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
}

// Router hands out connections for reads that must see every write
// committed before them.
type Router struct {
	primary, replica *pgxpool.Pool
	maxWait          time.Duration
	logger           *slog.Logger
	reads            metric.Int64Counter
}

// New returns a Router.
func New(cfg Config) *Router {
	r := &Router{primary: cfg.Primary, replica: cfg.Replica, maxWait: cfg.MaxWait, logger: cfg.Logger}
	switch {
	case r.maxWait == 0:
		r.maxWait = DefaultMaxWait
	case r.maxWait < 0:
		r.maxWait = 0
	}
	if r.logger == nil {
		r.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	_, m := otelx.Instruments(InstrumentationName, nil, cfg.MeterProvider)
	var err error
	r.reads, err = m.Int64Counter("payorch.read_replica.reads", metric.WithUnit("{read}"),
		metric.WithDescription("Reads routed with DATABASE_READ_URL set, by served_by (replica, primary) and reason: "+
			"caught_up (the replica had replayed every write committed before the read), lagging (it had not within "+
			"PAYORCH_READ_REPLICA_MAX_WAIT), unavailable (no connection), not_standby (it is not in recovery), "+
			"failed (the read failed on the replica and was done again on the primary)."))
	if err != nil {
		r.logger.Warn("read replica: telemetry instruments", "error", err)
	}
	return r
}

// Reasons a read is served where it is (the counter's reason).
const (
	reasonCaughtUp    = "caught_up"
	reasonLagging     = "lagging"
	reasonUnavailable = "unavailable"
	reasonNotStandby  = "not_standby"
	reasonFailed      = "failed"
)

// HasReplica reports whether reads may go to a replica at all.
func (r *Router) HasReplica() bool { return r.replica != nil }

// positionSQL reads the primary's WAL insert position: every transaction
// committed before it ran (by anyone) ends at or before it. The insert
// position, not the write position of pg_current_wal_lsn: a commit made
// with synchronous_commit off (payorch's claims, or a database that turns
// it off) is inserted before it is written, and a read waiting only for
// the written WAL could miss it. When the position is the start of a page
// it points past the page's header (24 bytes, 40 at a segment's start),
// where no record ends: the header is taken off, so a replica that has
// replayed the last record (and no more) counts as caught up.
const positionSQL = `
	SELECT (CASE
		WHEN (p.lsn - '0/0') % pg_size_bytes(current_setting('wal_segment_size')) = 40 THEN p.lsn - 40
		WHEN (p.lsn - '0/0') % current_setting('wal_block_size')::numeric = 24 THEN p.lsn - 24
		ELSE p.lsn END - '0/0')::bigint
	FROM (SELECT pg_current_wal_insert_lsn() AS lsn) p`

// replaySQL reads how far a replica has replayed the WAL; NULL when the
// server is not in recovery.
const replaySQL = `SELECT (pg_last_wal_replay_lsn() - '0/0')::bigint`

// Querier runs a query: the primary pool, or a connection or transaction
// of it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Position reads the primary's WAL position on q (a connection the caller
// holds, so as not to take a second one of the same pool).
func Position(ctx context.Context, q Querier) (LSN, error) {
	var lsn LSN
	if err := q.QueryRow(ctx, positionSQL).Scan(&lsn); err != nil {
		return 0, err
	}
	return lsn, nil
}

// Position is the primary's WAL position now, read on a connection of the
// primary pool that goes back to it at once; 0 with no replica, without a
// query.
func (r *Router) Position(ctx context.Context) (LSN, error) {
	if r.replica == nil {
		return 0, nil
	}
	return Position(ctx, r.primary)
}

// pollEvery is the first pause between two looks at the replica's replay
// position; it doubles up to pollMax.
const (
	pollEvery = 2 * time.Millisecond
	pollMax   = 50 * time.Millisecond
)

// ReplicaAt returns a connection of the replica once it has replayed the
// WAL up to lsn, waiting up to MaxWait for it, or nil (the read goes to
// the primary; why is counted and logged). A connection it returns is
// counted as a replica read.
func (r *Router) ReplicaAt(ctx context.Context, lsn LSN) *pgxpool.Conn {
	if r.replica == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, r.maxWait)
	defer cancel()
	conn, err := r.replica.Acquire(wctx)
	if err != nil {
		r.fallback(ctx, reasonUnavailable, lsn, 0, err)
		return nil
	}
	pause := pollEvery
	for {
		var replayed *int64
		if err := conn.QueryRow(wctx, replaySQL).Scan(&replayed); err != nil {
			conn.Release()
			reason := reasonUnavailable
			if wctx.Err() != nil && ctx.Err() == nil {
				reason = reasonLagging // the wait ran out during the look
			}
			r.fallback(ctx, reason, lsn, 0, err)
			return nil
		}
		switch {
		case replayed == nil:
			conn.Release()
			r.fallback(ctx, reasonNotStandby, lsn, 0, nil)
			return nil
		case LSN(*replayed) >= lsn:
			r.count(ctx, "replica", reasonCaughtUp)
			return conn
		}
		select {
		case <-wctx.Done():
			conn.Release()
			r.fallback(ctx, reasonLagging, lsn, LSN(*replayed), nil)
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, pollMax)
	}
}

// Acquire returns a connection for a read that must see every write
// committed before lsn (from Position): the replica's once it has
// replayed up to lsn, else the primary's. onReplica says which.
func (r *Router) Acquire(ctx context.Context, lsn LSN) (conn *pgxpool.Conn, onReplica bool, err error) {
	if c := r.ReplicaAt(ctx, lsn); c != nil {
		return c, true, nil
	}
	conn, err = r.primary.Acquire(ctx)
	return conn, false, err
}

// Read runs fn on a connection of Acquire(ctx, lsn) and gives it back.
// When fn fails on the replica because of the replica (its connection
// broke, or the server refused the statement: a shutdown, a query
// cancelled by a conflict with recovery), the failure is counted and
// logged and fn runs again on the primary; an error of fn's own (a row
// not found) is returned as it is. fn must only read.
func (r *Router) Read(ctx context.Context, lsn LSN, fn func(conn *pgxpool.Conn) error) error {
	conn, onReplica, err := r.Acquire(ctx, lsn)
	if err != nil {
		return err
	}
	err = fn(conn)
	broken := conn.Conn().IsClosed()
	conn.Release()
	var pgErr *pgconn.PgError
	if err == nil || !onReplica || ctx.Err() != nil || (!broken && !errors.As(err, &pgErr)) {
		return err
	}
	r.Failed(ctx, err)
	conn, err = r.primary.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return fn(conn)
}

// Failed records that a read which had a replica connection failed there
// and is done again on the primary.
func (r *Router) Failed(ctx context.Context, err error) {
	r.fallback(ctx, reasonFailed, 0, 0, err)
}

// fallback counts and logs a read sent to the primary for reason.
func (r *Router) fallback(ctx context.Context, reason string, want, replayed LSN, err error) {
	r.count(ctx, "primary", reason)
	attrs := []any{"reason", reason}
	if want > 0 {
		attrs = append(attrs, "wanted_lsn", int64(want))
	}
	if replayed > 0 {
		attrs = append(attrs, "replayed_lsn", int64(replayed), "lag_bytes", int64(want-replayed))
	}
	if err != nil {
		attrs = append(attrs, "error", err)
	}
	r.logger.WarnContext(ctx, "read replica: read served by the primary", attrs...)
}

func (r *Router) count(ctx context.Context, servedBy, reason string) {
	if r.reads != nil {
		r.reads.Add(ctx, 1, metric.WithAttributes(attribute.String("served_by", servedBy), attribute.String("reason", reason)))
	}
}
