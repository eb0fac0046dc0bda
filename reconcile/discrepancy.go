package reconcile

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/orchestrator"
)

// Discrepancy is one finding of a run: what we expected (our books) against
// what the provider has, with both ids.
type Discrepancy struct {
	ID              int64          `json:"id"`
	Object          string         `json:"object"`
	RunID           int64          `json:"run_id"`
	Category        string         `json:"category"`
	TenantID        *int64         `json:"tenant_id"`
	PaymentID       *string        `json:"payment_id"`
	ProviderRef     *string        `json:"provider_ref"`
	Field           string         `json:"field"`
	Expected        string         `json:"expected"`
	Actual          string         `json:"actual"`
	Currency        string         `json:"currency"`
	DifferenceMinor *int64         `json:"difference_minor"`
	Change          string         `json:"change"`
	Detail          map[string]any `json:"detail"`
	CreatedAt       time.Time      `json:"created_at"`
	ResolvedAt      *time.Time     `json:"resolved_at"`
	ResolvedBy      *string        `json:"resolved_by"`
	ResolutionNote  *string        `json:"resolution_note"`
}

const discrepancyCols = `id, run_id, category, tenant_id, payment_id, provider_ref, field, expected, actual, currency,
	difference_minor, change, detail, created_at, resolved_at, resolved_by, resolution_note`

func scanDiscrepancy(row pgx.CollectableRow) (Discrepancy, error) {
	var d Discrepancy
	err := row.Scan(&d.ID, &d.RunID, &d.Category, &d.TenantID, &d.PaymentID, &d.ProviderRef, &d.Field, &d.Expected,
		&d.Actual, &d.Currency, &d.DifferenceMinor, &d.Change, &d.Detail, &d.CreatedAt, &d.ResolvedAt, &d.ResolvedBy,
		&d.ResolutionNote)
	d.Object = "reconciliation_discrepancy"
	d.CreatedAt = d.CreatedAt.UTC()
	if d.ResolvedAt != nil {
		t := d.ResolvedAt.UTC()
		d.ResolvedAt = &t
	}
	return d, err
}

// DiscrepancyFilter selects discrepancies of one run.
type DiscrepancyFilter struct {
	RunID int64
	// Category filters by category ("" all).
	Category string
	// State is "open", "resolved" or "" (both).
	State string
	// Change is "new", "still_open", "gone" (those of the previous version
	// no longer found) or "".
	Change        string
	Limit         int
	StartingAfter int64
}

// Validate checks the filter. Errors: validation_failed.
func (f *DiscrepancyFilter) Validate() error {
	if f.Category != "" && !knownCategory(f.Category) {
		return orchestrator.ParamError("type", "unknown discrepancy type %q", f.Category)
	}
	switch f.State {
	case "", "open", "resolved":
	default:
		return orchestrator.ParamError("status", "status must be open or resolved")
	}
	switch f.Change {
	case "", "new", "still_open", "gone":
	default:
		return orchestrator.ParamError("change", "change must be new, still_open or gone")
	}
	if f.Limit < 0 || f.Limit > 1000 {
		return orchestrator.ParamError("limit", "limit must be 1 to 1000")
	}
	return nil
}

func knownCategory(c string) bool {
	for _, k := range Categories {
		if k == c {
			return true
		}
	}
	return false
}

// discrepancyQuery returns the SQL and arguments selecting cols (of d) of
// f's discrepancies in id order (after StartingAfter, at most limit when
// > 0), reading f's run on q.
func (r *Reconciler) discrepancyQuery(ctx context.Context, q querier, f DiscrepancyFilter, cols string, limit int) (string, []any, error) {
	run, err := r.getRun(ctx, q, f.RunID)
	if err != nil {
		return "", nil, err
	}
	target := run.ID
	from, where := `reconciliation_discrepancies d`, `d.run_id = $1`
	if f.Change == "gone" {
		if run.Diff.PreviousRunID == nil {
			return `SELECT ` + cols + ` FROM reconciliation_discrepancies d WHERE false`, nil, nil
		}
		target = *run.Diff.PreviousRunID
		from, where = goneFrom(run.ID), `d.run_id = $1 AND d.copies = 1`
	}
	sql := `SELECT ` + cols + ` FROM ` + from + ` WHERE ` + where + `
		AND ($2 = '' OR d.category = $2)
		AND ($3 = '' OR ($3 = 'open') = (d.resolved_at IS NULL))
		AND ($4 = '' OR $4 = 'gone' OR d.change = $4)
		AND d.id > $5
		ORDER BY d.id`
	args := []any{target, f.Category, f.State, f.Change, f.StartingAfter}
	if limit > 0 {
		sql += ` LIMIT $6`
		args = append(args, limit)
	}
	return sql, args, nil
}

// goneFrom is the findings of run $1 (the previous version of runID) and
// of runID, each with the number of copies of its fingerprint: those of
// $1 with one copy are gone. Like carrySQL (carry.go) it sorts the two
// runs' findings by fingerprint rather than looking each of one run's up
// in the other, which the planner, with no statistics for the run ids,
// does by scanning the other run once per finding: quadratic.
func goneFrom(runID int64) string {
	return `(SELECT ` + discrepancyCols + `, count(*) OVER (PARTITION BY fingerprint) AS copies
		FROM reconciliation_discrepancies WHERE run_id = $1 OR run_id = ` + strconv.FormatInt(runID, 10) + `) d`
}

// csvAfterArg is the index of StartingAfter in discrepancyQuery's
// arguments.
const csvAfterArg = 4

const discrepancyColsD = `d.id, d.run_id, d.category, d.tenant_id, d.payment_id, d.provider_ref, d.field, d.expected,
	d.actual, d.currency, d.difference_minor, d.change, d.detail, d.created_at, d.resolved_at, d.resolved_by, d.resolution_note`

// ListDiscrepancies returns a page of a run's discrepancies and whether
// more follow (from the replica when it has caught up). Errors: not_found
// (run), validation_failed.
func (r *Reconciler) ListDiscrepancies(ctx context.Context, f DiscrepancyFilter) ([]Discrepancy, bool, error) {
	if err := f.Validate(); err != nil {
		return nil, false, err
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	var ds []Discrepancy
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		q, args, err := r.discrepancyQuery(ctx, conn, f, discrepancyColsD, f.Limit+1)
		if err != nil {
			return err
		}
		rows, _ := conn.Query(ctx, q, args...)
		if ds, err = pgx.CollectRows(rows, scanDiscrepancy); err != nil {
			return fmt.Errorf("reconcile: list discrepancies: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	more := len(ds) > f.Limit
	if more {
		ds = ds[:f.Limit]
	}
	return ds, more, nil
}

// CSVHeader is the header row of the CSV export. detail is the
// discrepancy's detail as compact JSON: the payout, balance transaction
// or bank line a settlement or bank finding is about lives there, and
// finance needs it to act on the row without the API.
var CSVHeader = []string{"id", "run_id", "category", "tenant_id", "payment_id", "provider_ref", "field", "expected",
	"actual", "currency", "difference_minor", "change", "created_at", "resolved_at", "resolved_by", "resolution_note",
	"detail"}

// csvPage is how many discrepancies one query of the CSV export reads.
const csvPage = 1000

// WriteCSV writes every discrepancy matching f as CSV to w. It reads them
// in pages of csvPage by id, each in a short query whose connection goes
// back to the pool before the page is written, so a client that reads
// slowly (or not at all) holds no database connection. Each page comes
// from the replica when it has replayed every write committed before the
// export began. Errors: not_found (run), validation_failed.
func (r *Reconciler) WriteCSV(ctx context.Context, w io.Writer, f DiscrepancyFilter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f.StartingAfter = 0
	lsn, err := r.reads.Position(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: csv: %w", err)
	}
	var pages *csvPager
	err = r.reads.Read(ctx, lsn, func(conn *pgxpool.Conn) error {
		var err error
		pages, err = r.newCSVPager(ctx, conn, f)
		return err
	})
	if err != nil {
		return err
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for {
		q, args, more := pages.next()
		if !more {
			return nil
		}
		var page []Discrepancy
		err := r.reads.Read(ctx, lsn, func(conn *pgxpool.Conn) error {
			rows, _ := conn.Query(ctx, q, args...)
			var err error
			page, err = pgx.CollectRows(rows, scanDiscrepancy)
			return err
		})
		if err != nil {
			return fmt.Errorf("reconcile: csv: %w", err)
		}
		for _, d := range page {
			if err := cw.Write(csvRecord(d)); err != nil {
				return err
			}
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			return err
		}
		pages.read(page)
	}
}

// csvRecord is d's row of the CSV export, in CSVHeader's order.
func csvRecord(d Discrepancy) []string {
	opt := func(p *string) string {
		if p == nil {
			return ""
		}
		return csvSafe(*p)
	}
	rec := []string{itoa(d.ID), itoa(d.RunID), d.Category, "", opt(d.PaymentID), opt(d.ProviderRef), d.Field,
		csvSafe(d.Expected), csvSafe(d.Actual), d.Currency, "", d.Change, d.CreatedAt.Format(time.RFC3339), "",
		opt(d.ResolvedBy), opt(d.ResolutionNote), ""}
	if d.TenantID != nil {
		rec[3] = itoa(*d.TenantID)
	}
	if d.DifferenceMinor != nil {
		rec[10] = itoa(*d.DifferenceMinor)
	}
	if d.ResolvedAt != nil {
		rec[13] = d.ResolvedAt.Format(time.RFC3339)
	}
	if len(d.Detail) > 0 {
		// A JSON object starts with '{': no formula. Its strings come
		// from the provider or the bank and stay quoted inside it.
		if b, err := json.Marshal(d.Detail); err == nil {
			rec[16] = string(b)
		}
	}
	return rec
}

// csvPager says which query reads each page of a CSV export.
type csvPager struct {
	q    string
	args []any
	done bool
	// gone: the export reads the discrepancies gone since the previous
	// version, whose ids are found once, with one comparison of the two
	// runs (goneFrom), so that each page is an index lookup of csvPage
	// of them rather than another comparison.
	gone bool
	ids  []int64
}

// csvByIDSQL reads the discrepancies whose ids are $1.
const csvByIDSQL = `SELECT ` + discrepancyCols + ` FROM reconciliation_discrepancies WHERE id = ANY($1) ORDER BY id`

// newCSVPager prepares the export of f's discrepancies, reading on q.
func (r *Reconciler) newCSVPager(ctx context.Context, q querier, f DiscrepancyFilter) (*csvPager, error) {
	if f.Change != "gone" {
		sql, args, err := r.discrepancyQuery(ctx, q, f, discrepancyColsD, csvPage)
		return &csvPager{q: sql, args: args}, err
	}
	sql, args, err := r.discrepancyQuery(ctx, q, f, "d.id", 0)
	if err != nil {
		return nil, err
	}
	rows, _ := q.Query(ctx, sql, args...)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("reconcile: csv: %w", err)
	}
	return &csvPager{gone: true, ids: ids}, nil
}

// next returns the query and arguments of the next page; more is false
// when the export is done.
func (p *csvPager) next() (q string, args []any, more bool) {
	if p.gone {
		if len(p.ids) == 0 {
			return "", nil, false
		}
		page := p.ids[:min(csvPage, len(p.ids))]
		p.ids = p.ids[len(page):]
		return csvByIDSQL, []any{page}, true
	}
	return p.q, p.args, !p.done
}

// read moves past page, the page just read.
func (p *csvPager) read(page []Discrepancy) {
	if p.gone {
		return
	}
	if len(page) < csvPage || len(p.args) == 0 {
		p.done = true
		return
	}
	p.args[csvAfterArg] = page[len(page)-1].ID
}

// csvSafe defuses spreadsheet formula injection in free text (a resolution
// note typed by a person, a value from the provider).
func csvSafe(s string) string {
	if s != "" && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@' || s[0] == '\t' || s[0] == '\r') {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return s // a negative amount is a number, not a formula
		}
		return "'" + s
	}
	return s
}

// GetDiscrepancy reads one discrepancy. Errors: not_found.
func (r *Reconciler) GetDiscrepancy(ctx context.Context, id int64) (Discrepancy, error) {
	rows, _ := r.pool.Query(ctx, `SELECT `+discrepancyCols+` FROM reconciliation_discrepancies WHERE id = $1`, id)
	d, err := pgx.CollectExactlyOneRow(rows, scanDiscrepancy)
	if errors.Is(err, pgx.ErrNoRows) {
		return Discrepancy{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no discrepancy %d", id)
	}
	if err != nil {
		return Discrepancy{}, fmt.Errorf("reconcile: get discrepancy: %w", err)
	}
	return d, nil
}

// Resolve marks a discrepancy resolved with a note, recording who and when.
// Errors: validation_failed (empty or long note), not_found, conflict
// (already resolved).
func (r *Reconciler) Resolve(ctx context.Context, id int64, note, by string) (Discrepancy, error) {
	if note == "" || len(note) > 2000 {
		return Discrepancy{}, orchestrator.ParamError("note", "note must be 1 to 2000 characters")
	}
	q := `UPDATE reconciliation_discrepancies SET resolved_at = $2, resolved_by = $3, resolution_note = $4
		WHERE id = $1 AND resolved_at IS NULL
		RETURNING ` + discrepancyCols
	rows, _ := r.pool.Query(ctx, q, id, r.now(), by, note)
	d, err := pgx.CollectExactlyOneRow(rows, scanDiscrepancy)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, gerr := r.GetDiscrepancy(ctx, id); gerr != nil {
			return Discrepancy{}, gerr
		}
		return Discrepancy{}, orchestrator.Errorf(orchestrator.CodeConflict, "discrepancy %d is already resolved", id)
	}
	if err != nil {
		return Discrepancy{}, fmt.Errorf("reconcile: resolve: %w", err)
	}
	return d, nil
}

// DayCount is how many discrepancies of one business day are open.
type DayCount struct {
	// Date is the business date, YYYY-MM-DD.
	Date string `json:"date" db:"date"`
	Open int64  `json:"open" db:"open"`
}

// MaxDiscrepancyDays bounds the days DiscrepanciesPerDay reads.
const MaxDiscrepancyDays = 366

// discrepanciesPerDaySQL counts, for each business date from $1 to $2,
// the unresolved discrepancies of each provider's latest succeeded
// version of that day's run (a re-run carries the resolutions of the
// version before it, so the latest one says what is still open), every
// day present even without a run.
const discrepanciesPerDaySQL = `
	WITH latest AS (
		SELECT DISTINCT ON (provider, business_date) id, business_date
		FROM reconciliation_runs
		WHERE status = 'succeeded' AND business_date BETWEEN $1::date AND $2::date
		ORDER BY provider, business_date, version DESC
	)
	SELECT d.day::date::text AS date, count(x.id) AS open
	FROM generate_series($1::date, $2::date, interval '1 day') AS d (day)
	LEFT JOIN latest l ON l.business_date = d.day::date
	LEFT JOIN reconciliation_discrepancies x ON x.run_id = l.id AND x.resolved_at IS NULL
	GROUP BY d.day
	ORDER BY d.day`

// DiscrepanciesPerDay returns the open discrepancies of each of the last
// days business dates, today's (in the reconciler's time zone) last: for
// each day, those of every provider's latest succeeded run of it (from
// the replica when it has caught up).
// Errors: validation_failed (days not from 1 to MaxDiscrepancyDays).
func (r *Reconciler) DiscrepanciesPerDay(ctx context.Context, days int) ([]DayCount, error) {
	if days < 1 || days > MaxDiscrepancyDays {
		return nil, orchestrator.ParamError("days", "days must be from 1 to %d", MaxDiscrepancyDays)
	}
	today := r.now().In(r.loc)
	from := today.AddDate(0, 0, 1-days)
	var out []DayCount
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		rows, _ := conn.Query(ctx, discrepanciesPerDaySQL, from.Format(time.DateOnly), today.Format(time.DateOnly))
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByName[DayCount])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: discrepancies per day: %w", err)
	}
	return out, nil
}
