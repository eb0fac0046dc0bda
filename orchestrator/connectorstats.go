package orchestrator

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Connector statistics: how each connector answered the attempts sent to
// it over a window of time, in total and per bucket of the window, read
// from payment_attempts (its index on (connector, started_at)). The
// console charts them for admins and support.

// MaxStatsBuckets bounds the buckets one ConnectorStats call may ask for.
const MaxStatsBuckets = 1000

// AttemptStats counts the attempts that started on one connector in
// [Start, End). Rates are for display only (they are not money).
type AttemptStats struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Attempts counts every attempt, whatever its outcome (or none yet).
	Attempts   int64 `json:"attempts"`
	Authorized int64 `json:"authorized"`
	Declined   int64 `json:"declined"`
	// Errors counts the attempts whose last call did not execute or whose
	// outcome is unknown: the connector's failures, not the card's.
	Errors int64 `json:"errors"`
	// AuthorizationRate is Authorized / (Authorized + Declined), nil when
	// no attempt was answered either way.
	AuthorizationRate *float64 `json:"authorization_rate"`
	// ErrorShare is Errors / Attempts, nil without attempts.
	ErrorShare *float64 `json:"error_share"`
	// P50MS and P95MS are the median and 95th percentile of the attempts'
	// last call latency (continuous percentiles), nil when no attempt has
	// one.
	P50MS *float64 `json:"p50_ms"`
	P95MS *float64 `json:"p95_ms"`
}

// ConnectorStats is one connector's attempts over a window: in total and
// bucket by bucket, oldest first.
type ConnectorStats struct {
	Connector string         `json:"connector"`
	Total     AttemptStats   `json:"total"`
	Buckets   []AttemptStats `json:"buckets"`
}

// connectorStatsSQL counts the attempts started in [@since, @until) on
// each of @connectors, per connector (bucket NULL) and per bucket of
// @bucket_micros microseconds from @since (0 to @buckets - 1, each one
// present even without attempts).
const connectorStatsSQL = `
	WITH a AS (
		SELECT connector, outcome, latency_ms,
			(extract(epoch FROM started_at - @since::timestamptz) * 1000000)::bigint / @bucket_micros::bigint AS bucket
		FROM payment_attempts
		WHERE connector = ANY (@connectors::text[]) AND started_at >= @since AND started_at < @until
	)
	SELECT c.connector, b.bucket,
		count(a.connector) AS attempts,
		count(*) FILTER (WHERE a.outcome = 'authorized') AS authorized,
		count(*) FILTER (WHERE a.outcome = 'declined') AS declined,
		count(*) FILTER (WHERE a.outcome IN ('not_executed', 'unknown')) AS errors,
		percentile_cont(0.5) WITHIN GROUP (ORDER BY a.latency_ms) AS p50_ms,
		percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms
	FROM unnest(@connectors::text[]) AS c (connector)
	CROSS JOIN generate_series(0::bigint, @buckets::bigint - 1) AS b (bucket)
	LEFT JOIN a ON a.connector = c.connector AND a.bucket = b.bucket
	GROUP BY GROUPING SETS ((c.connector), (c.connector, b.bucket))
	ORDER BY c.connector, b.bucket NULLS FIRST`

// attemptStatsRow is a row of connectorStatsSQL.
type attemptStatsRow struct {
	Connector  string   `db:"connector"`
	Bucket     *int64   `db:"bucket"`
	Attempts   int64    `db:"attempts"`
	Authorized int64    `db:"authorized"`
	Declined   int64    `db:"declined"`
	Errors     int64    `db:"errors"`
	P50MS      *float64 `db:"p50_ms"`
	P95MS      *float64 `db:"p95_ms"`
}

// ConnectorStats returns, for every configured connector (sorted by name,
// with or without attempts), the attempts that started in [since, now):
// in total, and per bucket of the given width from since (the last one
// may reach past now). Errors: validation_failed (since not before now, a
// bucket not positive, or more than MaxStatsBuckets buckets).
func (s *Service) ConnectorStats(ctx context.Context, since time.Time, bucket time.Duration) ([]ConnectorStats, error) {
	until := s.now()
	if !since.Before(until) {
		return nil, ParamError("since", "since must be before now")
	}
	if bucket < time.Microsecond {
		return nil, ParamError("bucket", "the bucket must be at least a microsecond")
	}
	n := (until.Sub(since) + bucket - 1) / bucket
	if n > MaxStatsBuckets {
		return nil, ParamError("bucket", "at most %d buckets", MaxStatsBuckets)
	}
	names := s.connectorNames()
	rows, _ := s.pool.Query(ctx, connectorStatsSQL, NamedArgs{"since": since, "until": until,
		"bucket_micros": bucket.Microseconds(), "buckets": int64(n), "connectors": names})
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[attemptStatsRow])
	if err != nil {
		return nil, internalf("connector stats: %w", err)
	}
	out := make([]ConnectorStats, len(names))
	at := make(map[string]*ConnectorStats, len(names))
	for i, name := range names {
		out[i] = ConnectorStats{Connector: name, Total: AttemptStats{Start: since, End: until},
			Buckets: make([]AttemptStats, n)}
		for j := range out[i].Buckets {
			start := since.Add(time.Duration(j) * bucket)
			out[i].Buckets[j] = AttemptStats{Start: start, End: start.Add(bucket)}
		}
		at[name] = &out[i]
	}
	for _, r := range got {
		cs := at[r.Connector]
		if cs == nil {
			continue
		}
		if r.Bucket == nil {
			cs.Total = r.stats(since, until)
			continue
		}
		if *r.Bucket >= 0 && *r.Bucket < int64(n) {
			b := &cs.Buckets[*r.Bucket]
			*b = r.stats(b.Start, b.End)
		}
	}
	return out, nil
}

// stats is the row's counts over [start, end), with its rates.
func (r attemptStatsRow) stats(start, end time.Time) AttemptStats {
	a := AttemptStats{Start: start, End: end, Attempts: r.Attempts, Authorized: r.Authorized, Declined: r.Declined,
		Errors: r.Errors, P50MS: r.P50MS, P95MS: r.P95MS}
	if answered := r.Authorized + r.Declined; answered > 0 {
		rate := float64(r.Authorized) / float64(answered)
		a.AuthorizationRate = &rate
	}
	if r.Attempts > 0 {
		share := float64(r.Errors) / float64(r.Attempts)
		a.ErrorShare = &share
	}
	return a
}

// AuthRatePoint is how auth_rate decisions saw one connector over a
// bucket of time: among the first attempts routed by auth_rate that had
// it as a candidate, the mean score they saw and how many went first to
// it. Display only.
type AuthRatePoint struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Decisions is how many auth_rate decisions had the connector as a
	// candidate; Chosen how many of them put it first.
	Decisions int64 `json:"decisions"`
	Chosen    int64 `json:"chosen"`
	// ScoreBP is the mean of the rates the decisions saw (basis points),
	// nil when none had a rate for it.
	ScoreBP *float64 `json:"score_bp"`
}

// authRateHistorySQL reads the auth_rate decisions stored with the first
// attempts started in [@since, @until) (payment_attempts.routing), per
// candidate connector and bucket of @bucket_micros from @since.
const authRateHistorySQL = `
	SELECT s.value->>'connector' AS connector,
		(extract(epoch FROM a.started_at - @since::timestamptz) * 1000000)::bigint / @bucket_micros::bigint AS bucket,
		count(*) AS decisions,
		count(*) FILTER (WHERE a.connector = s.value->>'connector') AS chosen,
		avg((s.value->>'rate_bp')::double precision) AS score_bp
	FROM payment_attempts a
	CROSS JOIN LATERAL jsonb_array_elements(a.routing->'scores') AS s (value)
	WHERE a.connector = ANY (@connectors::text[]) AND a.started_at >= @since AND a.started_at < @until
		AND a.attempt = 1 AND a.routing->>'strategy' = 'auth_rate'
	GROUP BY 1, 2`

// authRateHistoryRow is a row of authRateHistorySQL.
type authRateHistoryRow struct {
	Connector string   `db:"connector"`
	Bucket    int64    `db:"bucket"`
	Decisions int64    `db:"decisions"`
	Chosen    int64    `db:"chosen"`
	ScoreBP   *float64 `db:"score_bp"`
}

// AuthRateHistory returns, for every configured connector by name, its
// auth_rate points over [since, now) in buckets of the given width from
// since, every bucket present. Errors: validation_failed (as
// ConnectorStats).
func (s *Service) AuthRateHistory(ctx context.Context, since time.Time, bucket time.Duration) (map[string][]AuthRatePoint, error) {
	until := s.now()
	if !since.Before(until) || bucket < time.Microsecond || (until.Sub(since)+bucket-1)/bucket > MaxStatsBuckets {
		return nil, ParamError("since", "since must be before now, in at most %d buckets", MaxStatsBuckets)
	}
	n := int((until.Sub(since) + bucket - 1) / bucket)
	names := s.connectorNames()
	rows, _ := s.pool.Query(ctx, authRateHistorySQL, NamedArgs{"since": since, "until": until,
		"bucket_micros": bucket.Microseconds(), "connectors": names})
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[authRateHistoryRow])
	if err != nil {
		return nil, internalf("auth_rate history: %w", err)
	}
	out := make(map[string][]AuthRatePoint, len(names))
	for _, name := range names {
		pts := make([]AuthRatePoint, n)
		for j := range pts {
			pts[j].Start = since.Add(time.Duration(j) * bucket)
			pts[j].End = pts[j].Start.Add(bucket)
		}
		out[name] = pts
	}
	for _, r := range got {
		if pts, ok := out[r.Connector]; ok && r.Bucket >= 0 && r.Bucket < int64(n) {
			p := &pts[r.Bucket]
			p.Decisions, p.Chosen, p.ScoreBP = r.Decisions, r.Chosen, r.ScoreBP
		}
	}
	return out, nil
}
