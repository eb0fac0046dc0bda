package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A re-run of (provider, date) is compared with the previous version of
// the day by fingerprint. Nothing here joins one run's findings to the
// other's: when the planner has no statistics for the two run ids (they
// are newer than the table's last ANALYZE, which is the rule for a re-run
// of a big history table, and always so for the run still in its
// transaction) it estimates one row for each run and plans such a join as
// a nested loop that scans one run's findings once per finding of the
// other: quadratic (15,000 findings took minutes). Instead both runs'
// findings are read in one scan and sorted by fingerprint, so the two
// copies of a finding are neighbours; every plan for that (an index or
// sequential scan, then a sort) is O(n log n) whatever the estimates.

// previousRunSQL finds the latest succeeded earlier version of the run's
// (provider, date).
const previousRunSQL = `
	SELECT id FROM reconciliation_runs
	WHERE provider = $1 AND business_date = $2::date AND version < $3 AND status = 'succeeded'
	ORDER BY version DESC LIMIT 1`

// countFindingsSQL counts the findings of run $1.
const countFindingsSQL = `SELECT count(*) FROM reconciliation_discrepancies WHERE run_id = $1`

// carrySQL compares the findings of run $1 with those of the previous
// version $2 of its day: a finding of $1 that $2 had too is still_open
// and takes the resolution it had there, the others are new; it returns
// how many are new and still open, and how many of $2's are gone (not
// found by $1).
//
// both_runs reads the two runs' findings once and sorts them by fingerprint
// (and run, $2's first): a fingerprint is unique within a run, so it has
// two copies when both runs found it, and lag() hands $1's copy the
// resolution of $2's. The UPDATE then touches the rows of $1 whose change
// or resolution is not yet what judged says (next to none, as the finding
// writer stored them as previousFindings said) by primary key: one index
// lookup per row (the join has no run id for the planner to misjudge), or
// a hash join, never a scan of a run per row.
const carrySQL = `
	WITH both_runs AS (
		SELECT id, run_id, change, resolved_at, resolved_by, resolution_note,
			count(*) OVER (PARTITION BY fingerprint) AS copies,
			lag(resolved_at) OVER w AS prev_resolved_at,
			lag(resolved_by) OVER w AS prev_resolved_by,
			lag(resolution_note) OVER w AS prev_resolution_note
		FROM reconciliation_discrepancies
		WHERE run_id = $1 OR run_id = $2
		WINDOW w AS (PARTITION BY fingerprint ORDER BY run_id = $1)
	), judged AS (
		SELECT id, run_id, copies, change, resolved_at, resolved_by, resolution_note,
			CASE WHEN copies = 2 THEN 'still_open' ELSE 'new' END AS want_change,
			prev_resolved_at, prev_resolved_by, prev_resolution_note
		FROM both_runs
	), carried AS (
		UPDATE reconciliation_discrepancies d SET change = j.want_change, resolved_at = j.prev_resolved_at,
			resolved_by = j.prev_resolved_by, resolution_note = j.prev_resolution_note
		FROM judged j
		WHERE j.run_id = $1 AND d.id = j.id
			AND (j.change, j.resolved_at, j.resolved_by, j.resolution_note)
				IS DISTINCT FROM (j.want_change, j.prev_resolved_at, j.prev_resolved_by, j.prev_resolution_note)
	)
	SELECT count(*) FILTER (WHERE run_id = $1 AND copies = 1),
		count(*) FILTER (WHERE run_id = $1 AND copies = 2),
		count(*) FILTER (WHERE run_id = $2 AND copies = 1)
	FROM judged`

// resolution is how a finding of the previous version was resolved (all
// nil while it is open).
type resolution struct {
	At       *time.Time
	By, Note *string
}

// previousFindingsSQL reads the fingerprints and resolutions of run $1's
// findings: one run of one table, a linear read whatever the plan.
const previousFindingsSQL = `
	SELECT fingerprint, resolved_at, resolved_by, resolution_note FROM reconciliation_discrepancies WHERE run_id = $1`

// previousFindings reads the findings of the previous version of the
// run's day by fingerprint (nil when there is none), for the finding
// writer to store each finding of the run already new or still open, with
// the resolution it had: updating every still open finding afterwards
// (rows written earlier in the same transaction, so each update also
// re-checks its foreign key) was most of a re-run's extra cost. carrySQL
// still decides at the end, with next to nothing left to update: it
// catches a resolution made, or a version that succeeded, meanwhile.
func previousFindings(ctx context.Context, tx pgx.Tx, run Run) (map[string]resolution, error) {
	var prev int64
	err := tx.QueryRow(ctx, previousRunSQL, run.Provider, run.BusinessDate, run.Version).Scan(&prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the previous version: %w", err)
	}
	out := map[string]resolution{}
	var (
		fp  string
		res resolution
	)
	rows, _ := tx.Query(ctx, previousFindingsSQL, prev)
	_, err = pgx.ForEachRow(rows, []any{&fp, &res.At, &res.By, &res.Note}, func() error {
		out[fp] = res
		res = resolution{} // fresh pointers for the next row: the map keeps these
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the previous version's findings: %w", err)
	}
	return out, nil
}

// carryOver compares the run with the previous version of (provider,
// date): discrepancies seen before are still_open (and keep their
// resolution), the rest are new, and those no longer found are gone.
func carryOver(ctx context.Context, tx pgx.Tx, run Run) (Diff, error) {
	var diff Diff
	var prev int64
	err := tx.QueryRow(ctx, previousRunSQL, run.Provider, run.BusinessDate, run.Version).Scan(&prev)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, countFindingsSQL, run.ID).Scan(&diff.New)
		return diff, err
	}
	if err != nil {
		return diff, err
	}
	diff.PreviousRunID = &prev
	err = tx.QueryRow(ctx, carrySQL, run.ID, prev).Scan(&diff.New, &diff.StillOpen, &diff.Gone)
	return diff, err
}
