package orchestrator_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
)

// hotPathClasses name the statements of a new authorization in
// pg_stat_statements, first match wins: the four the service sends
// (top level) and what its triggers and foreign keys run inside them.
var hotPathClasses = []struct {
	name     string
	toplevel bool
	match    *regexp.Regexp
}{
	{"claim", true, regexp.MustCompile(`^WITH ins AS \( INSERT INTO idempotency_keys`)},
	{"create", true, regexp.MustCompile(`^WITH p AS \( INSERT INTO payments`)},
	{"reference", true, regexp.MustCompile(`^UPDATE payments SET provider_ref`)},
	{"settle", true, regexp.MustCompile(`^WITH p AS \( UPDATE payments SET status`)},
	{"other", true, regexp.MustCompile(``)},
	{"outbox_event", false, regexp.MustCompile(`INSERT INTO events`)},
	{"outbox_sequence", false, regexp.MustCompile(`max\(sequence\)`)},
	{"fk_check", false, regexp.MustCompile(`FROM ONLY "public"\.`)},
	{"nested_other", false, regexp.MustCompile(``)},
}

// BenchmarkHotPathStatements says where PostgreSQL's time goes on a new
// authorization: the Service authorizes b.N new payments as
// BenchmarkAuthorize's one_statement variant does (16 at a time, the
// fake provider over loopback HTTP), on a durable cluster that keeps
// statement statistics (pgtest.DurableStatsURL: pg_stat_statements with
// track = all, so the statements of triggers and of foreign key checks
// are counted too, and track_functions = all). Per authorization it
// reports, in µs of execution (wall time inside the executor, so it
// grows when the CPUs are shared): each statement the service sends,
// triggers included (claim_us, create_us, reference_us, settle_us), the
// outbox trigger alone (outbox_trigger_us), the foreign key checks
// (fk_check_us), planning (plan_us); and WAL bytes, index entries written
// (an upper bound: a partial index is counted as if every row matched
// it) and writing transactions. With -v it logs the table of every
// statement and of every table written.
func BenchmarkHotPathStatements(b *testing.B) {
	url := pgtest.DurableStatsURL(b)
	ctx := context.Background()
	withAdmin(b, url, func(admin *pgxpool.Pool) {
		if _, err := admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			b.Fatalf("pg_stat_statements (DurableStatsURL loads it): %v", err)
		}
	})
	w := newBenchWorld(b, url)
	w.chunk(b, true, 2*benchClients) // the plans of a new pool, cached once
	withAdmin(b, url, func(admin *pgxpool.Pool) {
		if _, err := admin.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset(), pg_stat_reset_shared('wal')`); err != nil {
			b.Fatal(err)
		}
	})
	xid0, _ := w.counters(b)
	b.ResetTimer()
	w.chunk(b, true, b.N)
	b.StopTimer()
	xid1, _ := w.counters(b)

	withAdmin(b, url, func(admin *pgxpool.Pool) {
		// Per authorization: the payments inserted since the reset (b.N
		// and the chunk's warm-up).
		var n float64
		if err := admin.QueryRow(ctx, `SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'payments'`).Scan(&n); err != nil || n == 0 {
			b.Fatalf("payments inserted: %v %v", n, err)
		}
		b.ReportMetric(float64(xid1-xid0)/n, "write_xacts/op")
		reportStatements(b, admin, n)
		reportTables(b, admin, n)
		var outbox, walBytes float64
		if err := admin.QueryRow(ctx, `SELECT coalesce((SELECT total_time FROM pg_stat_user_functions WHERE funcname = 'payments_outbox'), 0),
			(SELECT wal_bytes FROM pg_stat_wal)`).Scan(&outbox, &walBytes); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(1000*outbox/n, "outbox_trigger_us/op")
		b.ReportMetric(walBytes/n, "wal_bytes/op")
	})
}

// withAdmin runs f with a pool on the database at url, closed before it
// returns (chunk waits until no other session is connected).
func withAdmin(b *testing.B, url string, f func(*pgxpool.Pool)) {
	b.Helper()
	admin, err := pgxpool.New(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	f(admin)
}

// statementRow is a row of pg_stat_statements.
type statementRow struct {
	Toplevel bool    `db:"toplevel"`
	Calls    float64 `db:"calls"`
	ExecMS   float64 `db:"exec_ms"`
	PlanMS   float64 `db:"plan_ms"`
	Rows     float64 `db:"rows"`
	WALBytes float64 `db:"wal_bytes"`
	Query    string  `db:"query"`
}

// reportStatements reports the execution time of each class of
// statement per authorization (n of them), and logs every statement.
func reportStatements(b *testing.B, admin *pgxpool.Pool, n float64) {
	b.Helper()
	rows, _ := admin.Query(context.Background(), `
		SELECT toplevel, calls::float8 AS calls, total_exec_time AS exec_ms, total_plan_time AS plan_ms,
			rows::float8 AS rows, wal_bytes::float8 AS wal_bytes, regexp_replace(query, '\s+', ' ', 'g') AS query
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY toplevel DESC, total_exec_time DESC`)
	stmts, err := pgx.CollectRows(rows, pgx.RowToStructByName[statementRow])
	if err != nil {
		b.Fatal(err)
	}
	var top, plan float64
	for _, s := range stmts {
		plan += s.PlanMS
		if s.Toplevel {
			top += s.ExecMS
		}
	}
	us := map[string]float64{}
	var log strings.Builder
	fmt.Fprintf(&log, "per authorize (%.0f): level, calls, mean µs, µs, %% of top-level, plan µs, rows, WAL bytes, statement\n", n)
	for _, s := range stmts {
		for _, c := range hotPathClasses {
			if c.toplevel == s.Toplevel && c.match.MatchString(strings.TrimSpace(s.Query)) {
				us[c.name] += 1000 * s.ExecMS / n
				break
			}
		}
		if s.Calls < n/4 {
			continue // the benchmark's own queries, a new pool's first reads
		}
		level := "top"
		if !s.Toplevel {
			level = "nested"
		}
		q := s.Query
		if len(q) > 90 {
			q = q[:90] + "…"
		}
		fmt.Fprintf(&log, "%-6s %5.2f %8.1f %8.1f %5.1f%% %6.1f %5.2f %6.0f  %s\n", level, s.Calls/n, 1000*s.ExecMS/s.Calls,
			1000*s.ExecMS/n, 100*s.ExecMS/top, 1000*s.PlanMS/n, s.Rows/n, s.WALBytes/n, q)
	}
	logTable(b, log.String())
	for _, c := range hotPathClasses {
		if c.name != "other" && c.name != "nested_other" {
			b.ReportMetric(us[c.name], c.name+"_us/op")
		}
	}
	b.ReportMetric(1000*top/n, "statements_us/op")
	b.ReportMetric(1000*plan/n, "plan_us/op")
}

// reportTables reports the index entries written per authorization (n
// of them), and logs the rows written to each table.
func reportTables(b *testing.B, admin *pgxpool.Pool, n float64) {
	b.Helper()
	type tableRow struct {
		Name     string  `db:"relname"`
		Inserted float64 `db:"ins"`
		Updated  float64 `db:"upd"`
		HOT      float64 `db:"hot"`
		Indexes  float64 `db:"indexes"`
	}
	rows, _ := admin.Query(context.Background(), `
		SELECT relname, n_tup_ins::float8 AS ins, n_tup_upd::float8 AS upd, n_tup_hot_upd::float8 AS hot,
			(SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid)::float8 AS indexes
		FROM pg_stat_user_tables s WHERE n_tup_ins + n_tup_upd > 0 ORDER BY relname`)
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByName[tableRow])
	if err != nil {
		b.Fatal(err)
	}
	var entries float64
	var log strings.Builder
	fmt.Fprintf(&log, "per authorize: table, inserted, updated, of which HOT, indexes, index entries written\n")
	for _, t := range tables {
		e := (t.Inserted + t.Updated - t.HOT) * t.Indexes
		entries += e
		fmt.Fprintf(&log, "%-28s %5.2f %5.2f %5.2f %3.0f %6.2f\n", t.Name, t.Inserted/n, t.Updated/n, t.HOT/n, t.Indexes, e/n)
	}
	logTable(b, log.String())
	b.ReportMetric(entries/n, "index_entries/op")
}

// logTable logs a table of the run that b.N was sized for, not of the
// short runs by which testing sizes it.
func logTable(b *testing.B, table string) {
	b.Helper()
	if b.N >= 100 {
		b.Log(table)
	}
}
