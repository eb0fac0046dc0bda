package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// Categories of discrepancy (SPEC: Reconciliation).
const (
	MissingAtProvider     = "missing_at_provider"
	MissingLocally        = "missing_locally"
	AmountMismatch        = "amount_mismatch"
	CurrencyMismatch      = "currency_mismatch"
	StatusMismatch        = "status_mismatch"
	DuplicateAtProvider   = "duplicate_at_provider"
	StuckPending          = "stuck_pending"
	HoldExpiredUncaptured = "hold_expired_uncaptured"
	// InvalidProviderRow is a row of the provider's record that cannot be
	// compared (text that is not UTF-8 or holds a NUL byte, a negative
	// amount, a currency that is no code, an impossible time): it is
	// reported, with its reference made printable and the reason, instead
	// of failing the day.
	InvalidProviderRow = "invalid_provider_row"
)

// Categories lists every category, in the order reports show them.
var Categories = []string{MissingAtProvider, MissingLocally, AmountMismatch, CurrencyMismatch, StatusMismatch,
	DuplicateAtProvider, StuckPending, HoldExpiredUncaptured, InvalidProviderRow}

// local is a payment as the matcher sees it.
type local struct {
	TenantID                   int64
	ID, Status, Currency       string
	Amount, Captured, Refunded int64
	Ref                        *string
	CaptureBefore              *time.Time
	CreatedAt, UpdatedAt       time.Time
}

// remote is one row of the provider's record.
type remote struct {
	Ref, PaymentID, Status, Currency string
	Amount, Captured, Refunded       int64
	CreatedAt, UpdatedAt             time.Time
}

// finding is one discrepancy before it is stored.
type finding struct {
	Category, Field, Expected, Actual, Currency string
	TenantID                                    *int64
	PaymentID, Ref                              *string
	Difference                                  *int64
	Detail                                      map[string]any
	// subject, when set, names what the finding is about in its
	// fingerprint instead of the payment id or reference.
	subject string
}

func (f finding) fingerprint() string {
	subject := f.subject
	switch {
	case subject != "":
	case f.PaymentID != nil:
		subject = *f.PaymentID
	case f.Ref != nil:
		subject = "ref:" + *f.Ref
	}
	return f.Category + ":" + subject + ":" + f.Field
}

// result is what a run found.
type result struct {
	LocalCount, ProviderCount, MatchedCount, DiscrepancyCount int64
}

// pairBatch is how many pairs one FETCH reads from the pairing cursor;
// the findings they yield are stored between two FETCHes.
const pairBatch = 5000

// match loads the provider's record into staging, matches it to payments
// in SQL, pages the pairs through a cursor and the rules, and stores the
// findings and the run's outcome.
//
// All of it happens on one connection of the back-office pool, and the run
// never waits for a second connection while it holds one: runs cannot
// deadlock the pool however many start at once. The findings commit in one
// transaction with the run's success, so a failed run leaves none.
func (r *Reconciler) match(ctx context.Context, run Run) (result, error) {
	prov := r.providers[run.Provider]
	if prov == nil {
		return result{}, fmt.Errorf("provider %q is not configured", run.Provider)
	}
	grace := time.Duration(run.GraceSeconds) * time.Second
	from, to := run.WindowStart, run.WindowEnd
	gfrom, gto := from.Add(-grace), to.Add(grace)

	phases := map[string]time.Duration{}
	mark := time.Now()
	phase := func(name string) {
		now := time.Now()
		phases[name] = now.Sub(mark)
		mark = now
	}
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return result{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()
	staged, err := r.stage(ctx, conn.Conn(), prov, run.ID, from, to, gfrom, gto)
	if err != nil {
		return result{}, err
	}
	phase("stage")
	// Match by the provider's reference, then by our payment id in its
	// metadata for rows whose reference we never saw.
	if _, err := conn.Exec(ctx, `
		UPDATE reconciliation_provider_rows s SET matched_tenant_id = p.tenant_id, matched_payment_id = p.id
		FROM payments p
		WHERE s.run_id = $1 AND p.provider_ref = s.ref AND p.provider = $2`, run.ID, run.Provider); err != nil {
		return result{}, fmt.Errorf("match by reference: %w", err)
	}
	if _, err := conn.Exec(ctx, `
		UPDATE reconciliation_provider_rows s SET matched_tenant_id = p.tenant_id, matched_payment_id = p.id
		FROM payments p
		WHERE s.run_id = $1 AND s.matched_payment_id IS NULL AND s.payment_id <> '' AND p.id = s.payment_id
			AND p.provider = $2`, run.ID, run.Provider); err != nil {
		return result{}, fmt.Errorf("match by payment id: %w", err)
	}
	phase("match")

	st := newStats(from, to)
	st.providerCount += staged.invalidInWindow
	var res result
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		w := newFindingWriter(r, tx, run.ID)
		for _, f := range staged.invalid {
			if err := w.add(ctx, f); err != nil {
				return err
			}
		}
		if err := r.pair(ctx, tx, run, gfrom, gto, st, w); err != nil {
			return err
		}
		if err := w.flush(ctx); err != nil {
			return err
		}
		phase("pair_and_judge")

		res = result{LocalCount: st.localCount, ProviderCount: st.providerCount, MatchedCount: st.matched, DiscrepancyCount: w.total}
		diff, err := carryOver(ctx, tx, run)
		if err != nil {
			return fmt.Errorf("finish run: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE reconciliation_runs SET status = 'succeeded', finished_at = $2, lease_until = NULL,
				local_count = $3, provider_count = $4, matched_count = $5, discrepancy_count = $6,
				totals = $7, category_counts = $8, diff = $9
			WHERE id = $1`, run.ID, r.now(), res.LocalCount, res.ProviderCount, res.MatchedCount, res.DiscrepancyCount,
			st.totals, w.byCategory, diff)
		if err != nil {
			return fmt.Errorf("finish run: %w", err)
		}
		_, err = tx.Exec(ctx, `DELETE FROM reconciliation_provider_rows WHERE run_id = $1`, run.ID)
		return err
	})
	if err != nil {
		return result{}, err
	}
	phase("finish")
	attrs := []any{"run_id", run.ID}
	for _, name := range []string{"stage", "match", "pair_and_judge", "finish"} {
		attrs = append(attrs, name+"_s", phases[name].Seconds())
	}
	r.logger.InfoContext(ctx, "reconciliation phases", attrs...)
	return res, nil
}

// pairQuery pairs each payment of the window (or matched by a provider
// row) with the provider rows matched to it, and leaves unmatched provider
// rows alone, ordered so that the rows of one payment (or of one unmatched
// reference) come together.
const pairQuery = `
	WITH s AS (
		SELECT * FROM reconciliation_provider_rows WHERE run_id = $1
	), l AS (
		SELECT tenant_id, id, status, currency, amount_minor, captured_minor, refunded_minor, provider_ref,
			capture_before, created_at, updated_at
		FROM payments
		WHERE provider = $2 AND ((created_at >= $3 AND created_at < $4) OR (updated_at >= $3 AND updated_at < $4))
		UNION
		SELECT p.tenant_id, p.id, p.status, p.currency, p.amount_minor, p.captured_minor, p.refunded_minor,
			p.provider_ref, p.capture_before, p.created_at, p.updated_at
		FROM payments p JOIN s ON p.tenant_id = s.matched_tenant_id AND p.id = s.matched_payment_id
	)
	SELECT l.tenant_id, l.id, l.status, l.currency, l.amount_minor, l.captured_minor, l.refunded_minor,
		l.provider_ref, l.capture_before, l.created_at, l.updated_at,
		s.ref, s.payment_id, s.status, s.currency, s.amount_minor, s.captured_minor, s.refunded_minor,
		s.created_at, s.updated_at
	FROM l FULL JOIN s ON s.matched_tenant_id = l.tenant_id AND s.matched_payment_id = l.id
	ORDER BY coalesce(l.tenant_id, -1), coalesce(l.id, s.ref), s.updated_at, s.seq`

// pair reads the pairs through a server-side cursor in tx, pairBatch at a
// time, judges them and hands the findings to w, which stores them on the
// same connection between two FETCHes.
func (r *Reconciler) pair(ctx context.Context, tx pgx.Tx, run Run, gfrom, gto time.Time, st *stats, w *findingWriter) error {
	// The cursor is read to its end: plan for all rows, not the first.
	if _, err := tx.Exec(ctx, `SET LOCAL cursor_tuple_fraction = 1`); err != nil {
		return fmt.Errorf("pair: %w", err)
	}
	if _, err := tx.Exec(ctx, `DECLARE pairs NO SCROLL CURSOR FOR `+pairQuery, run.ID, run.Provider, gfrom, gto); err != nil {
		return fmt.Errorf("pair: %w", err)
	}
	var (
		cur   *local
		group []remote
		batch = make([]pairRow, 0, pairBatch)
	)
	judged := func() error {
		if cur == nil && len(group) == 0 {
			return nil
		}
		for _, f := range r.judge(cur, group, st.from, st.to) {
			if err := w.add(ctx, f); err != nil {
				return err
			}
		}
		st.count(cur, group)
		return nil
	}
	for {
		batch = batch[:0]
		rows, _ := tx.Query(ctx, `FETCH `+strconv.Itoa(pairBatch)+` FROM pairs`)
		for rows.Next() {
			p, err := scanPair(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("scan pair: %w", err)
			}
			batch = append(batch, p)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("pair: %w", err)
		}
		for _, p := range batch {
			// Rows of one payment arrive together; unmatched provider
			// rows arrive alone, grouped by reference.
			same := false
			switch {
			case p.l != nil && cur != nil:
				same = p.l.TenantID == cur.TenantID && p.l.ID == cur.ID
			case p.l == nil && cur == nil && p.r != nil && len(group) > 0:
				same = p.r.Ref == group[0].Ref
			}
			if !same {
				if err := judged(); err != nil {
					return err
				}
				cur, group = p.l, nil
			}
			if p.r != nil {
				group = append(group, *p.r)
			}
		}
		if len(batch) < pairBatch {
			break
		}
	}
	if err := judged(); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `CLOSE pairs`)
	return err
}

// pairRow is one row of pairQuery: a payment, a provider row, or both.
type pairRow struct {
	l *local
	r *remote
}

func scanPair(rows pgx.Rows) (pairRow, error) {
	var (
		l                         local
		lTenant                   *int64
		lID, lStatus, lCur        *string
		lAmt, lCap, lRefd         *int64
		lCreated, lUpdated        *time.Time
		sRef, sPay, sStatus, sCur *string
		sAmt, sCap, sRefd         *int64
		sCreated, sUpdated        *time.Time
	)
	if err := rows.Scan(&lTenant, &lID, &lStatus, &lCur, &lAmt, &lCap, &lRefd, &l.Ref, &l.CaptureBefore, &lCreated, &lUpdated,
		&sRef, &sPay, &sStatus, &sCur, &sAmt, &sCap, &sRefd, &sCreated, &sUpdated); err != nil {
		return pairRow{}, err
	}
	var p pairRow
	if lID != nil {
		l.TenantID, l.ID, l.Status, l.Currency = *lTenant, *lID, *lStatus, *lCur
		l.Amount, l.Captured, l.Refunded = *lAmt, *lCap, *lRefd
		l.CreatedAt, l.UpdatedAt = *lCreated, *lUpdated
		p.l = &l
	}
	if sRef != nil {
		p.r = &remote{Ref: *sRef, PaymentID: *sPay, Status: *sStatus, Currency: *sCur, Amount: *sAmt,
			Captured: *sCap, Refunded: *sRefd, CreatedAt: *sCreated, UpdatedAt: *sUpdated}
	}
	return p, nil
}

// inWindow reports whether t is in [from, to).
func inWindow(t, from, to time.Time) bool { return !t.Before(from) && t.Before(to) }

// expectedStatus maps our payment state to the provider's.
var expectedStatus = map[orchestrator.Status]providers.Status{
	orchestrator.StatusAuthorized:        providers.StatusAuthorized,
	orchestrator.StatusFailed:            providers.StatusDeclined,
	orchestrator.StatusCaptured:          providers.StatusCaptured,
	orchestrator.StatusCanceled:          providers.StatusCanceled,
	orchestrator.StatusExpired:           providers.StatusExpired,
	orchestrator.StatusPartiallyRefunded: providers.StatusPartiallyRefunded,
	orchestrator.StatusRefunded:          providers.StatusRefunded,
}

// judge applies the rules to one payment and the provider rows matched to
// it (or to unmatched provider rows of one reference). Items that belong to
// the neighbouring days (seen only in the grace margins) are not judged.
func (r *Reconciler) judge(l *local, rows []remote, from, to time.Time) []finding {
	var out []finding
	now := r.now()
	if l == nil {
		for i, rm := range rows {
			if i > 0 || !(inWindow(rm.CreatedAt, from, to) || inWindow(rm.UpdatedAt, from, to)) {
				continue
			}
			ref := rm.Ref
			f := finding{Category: MissingLocally, Ref: &ref, Actual: string(rm.Status), Currency: rm.Currency,
				Detail: map[string]any{"provider_amount_minor": rm.Amount, "provider_payment_id": rm.PaymentID}}
			if len(rows) > 1 {
				f.Detail["copies"] = len(rows)
			}
			out = append(out, f)
		}
		return out
	}
	core := inWindow(l.CreatedAt, from, to) || inWindow(l.UpdatedAt, from, to)
	for _, rm := range rows {
		core = core || inWindow(rm.CreatedAt, from, to) || inWindow(rm.UpdatedAt, from, to)
	}
	if !core {
		return nil
	}
	tenant, id := l.TenantID, l.ID
	base := func(category, field, expected, actual string) finding {
		f := finding{Category: category, Field: field, Expected: expected, Actual: actual, TenantID: &tenant,
			PaymentID: &id, Currency: l.Currency, Detail: map[string]any{}}
		if l.Ref != nil {
			ref := *l.Ref
			f.Ref = &ref
		}
		return f
	}

	if orchestrator.Status(l.Status) == orchestrator.StatusPending {
		if now.Sub(l.CreatedAt) >= r.stuckAfter {
			actual := "absent"
			if len(rows) > 0 {
				actual = string(rows[len(rows)-1].Status)
			}
			f := base(StuckPending, "status", "pending", actual)
			f.Detail["pending_since"] = l.CreatedAt.UTC()
			out = append(out, f)
		}
		return out
	}
	if len(rows) == 0 {
		if l.Ref != nil {
			out = append(out, base(MissingAtProvider, "", l.Status, "absent"))
		}
		if f, ok := r.lapsed(l, nil, base); ok {
			out = append(out, f)
		}
		return out
	}

	refs := map[string]bool{}
	for _, rm := range rows {
		refs[rm.Ref] = true
	}
	if len(rows) > 1 {
		list := make([]string, 0, len(refs))
		for ref := range refs {
			list = append(list, ref)
		}
		f := base(DuplicateAtProvider, "", "1", itoa(int64(len(rows))))
		f.Detail["provider_refs"] = list
		out = append(out, f)
	}
	rm := rows[len(rows)-1] // the latest state
	if rm.Currency != l.Currency {
		out = append(out, base(CurrencyMismatch, "currency", l.Currency, rm.Currency))
	}
	for _, a := range []struct {
		field          string
		ours, provider int64
	}{{"authorized", l.Amount, rm.Amount}, {"captured", l.Captured, rm.Captured}, {"refunded", l.Refunded, rm.Refunded}} {
		if a.ours == a.provider {
			continue
		}
		f := base(AmountMismatch, a.field, itoa(a.ours), itoa(a.provider))
		d := a.provider - a.ours
		f.Difference = &d
		f.Detail["direction"] = map[bool]string{true: "over", false: "under"}[d > 0]
		out = append(out, f)
	}
	if f, ok := r.lapsed(l, &rm, base); ok {
		out = append(out, f)
	} else if want := expectedStatus[orchestrator.Status(l.Status)]; want != providers.Status(rm.Status) {
		out = append(out, base(StatusMismatch, "status", string(want), rm.Status))
	}
	return out
}

// lapsed reports a hold that expired uncaptured: we still hold it as
// authorized past its capture_before, or the provider says it expired.
func (r *Reconciler) lapsed(l *local, rm *remote, base func(category, field, expected, actual string) finding) (finding, bool) {
	if orchestrator.Status(l.Status) != orchestrator.StatusAuthorized {
		return finding{}, false
	}
	providerExpired := rm != nil && rm.Status == string(providers.StatusExpired)
	ourExpired := l.CaptureBefore != nil && !r.now().Before(*l.CaptureBefore)
	if !providerExpired && !ourExpired {
		return finding{}, false
	}
	actual := "expired"
	if rm != nil {
		actual = rm.Status
	}
	f := base(HoldExpiredUncaptured, "status", "captured or canceled before capture_before", actual)
	if l.CaptureBefore != nil {
		f.Detail["capture_before"] = l.CaptureBefore.UTC()
	}
	return f, true
}

// stats accumulates counts and per-currency totals of the core window.
type stats struct {
	from, to                           time.Time
	localCount, providerCount, matched int64
	totals                             map[string]map[string]*Totals
}

func newStats(from, to time.Time) *stats {
	return &stats{from: from, to: to, totals: map[string]map[string]*Totals{"local": {}, "provider": {}}}
}

func (s *stats) add(side, currency string, amount, captured, refunded int64) {
	t := s.totals[side][currency]
	if t == nil {
		t = &Totals{}
		s.totals[side][currency] = t
	}
	t.Count++
	t.Authorized += amount
	t.Captured += captured
	t.Refunded += refunded
}

func (s *stats) count(l *local, rows []remote) {
	if l != nil && (inWindow(l.CreatedAt, s.from, s.to) || inWindow(l.UpdatedAt, s.from, s.to)) {
		s.localCount++
		s.add("local", l.Currency, l.Amount, l.Captured, l.Refunded)
		if len(rows) > 0 {
			s.matched++
		}
	}
	for _, rm := range rows {
		if inWindow(rm.CreatedAt, s.from, s.to) || inWindow(rm.UpdatedAt, s.from, s.to) {
			s.providerCount++
			s.add("provider", rm.Currency, rm.Amount, rm.Captured, rm.Refunded)
		}
	}
}

// findingWriter stores findings in batches with COPY, in the run's
// transaction.
type findingWriter struct {
	r          *Reconciler
	tx         pgx.Tx
	runID      int64
	batch      [][]any
	total      int64
	byCategory map[string]int64
	seen       map[string]bool
}

func newFindingWriter(r *Reconciler, tx pgx.Tx, runID int64) *findingWriter {
	return &findingWriter{r: r, tx: tx, runID: runID, byCategory: map[string]int64{}, seen: map[string]bool{}}
}

const findingBatch = 5000

func (w *findingWriter) add(ctx context.Context, f finding) error {
	fp := f.fingerprint()
	if w.seen[fp] {
		return nil // one finding per fingerprint (a reference copied many times)
	}
	w.seen[fp] = true
	if f.Detail == nil {
		f.Detail = map[string]any{}
	}
	w.batch = append(w.batch, []any{w.runID, f.Category, fp, f.TenantID, f.PaymentID, f.Ref, f.Field, f.Expected,
		f.Actual, f.Currency, f.Difference, f.Detail, w.r.now()})
	w.total++
	w.byCategory[f.Category]++
	if len(w.batch) >= findingBatch {
		return w.flush(ctx)
	}
	return nil
}

func (w *findingWriter) flush(ctx context.Context) error {
	if len(w.batch) == 0 {
		return nil
	}
	_, err := w.tx.CopyFrom(ctx, pgx.Identifier{"reconciliation_discrepancies"},
		[]string{"run_id", "category", "fingerprint", "tenant_id", "payment_id", "provider_ref", "field", "expected",
			"actual", "currency", "difference_minor", "detail", "created_at"}, pgx.CopyFromRows(w.batch))
	w.batch = w.batch[:0]
	if err != nil {
		return fmt.Errorf("store discrepancies: %w", err)
	}
	return nil
}

// carryOver compares the run with the previous version of (provider,
// date): discrepancies seen before are still_open (and keep their
// resolution), the rest are new, and those no longer found are gone.
func carryOver(ctx context.Context, tx pgx.Tx, run Run) (Diff, error) {
	var diff Diff
	var prev int64
	err := tx.QueryRow(ctx, `SELECT id FROM reconciliation_runs
		WHERE provider = $1 AND business_date = $2::date AND version < $3 AND status = 'succeeded'
		ORDER BY version DESC LIMIT 1`, run.Provider, run.BusinessDate, run.Version).Scan(&prev)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, `SELECT count(*) FROM reconciliation_discrepancies WHERE run_id = $1`, run.ID).Scan(&diff.New)
		return diff, err
	}
	if err != nil {
		return diff, err
	}
	diff.PreviousRunID = &prev
	tag, err := tx.Exec(ctx, `
		UPDATE reconciliation_discrepancies d SET change = 'still_open',
			resolved_at = p.resolved_at, resolved_by = p.resolved_by, resolution_note = p.resolution_note
		FROM reconciliation_discrepancies p
		WHERE d.run_id = $1 AND p.run_id = $2 AND p.fingerprint = d.fingerprint`, run.ID, prev)
	if err != nil {
		return diff, err
	}
	diff.StillOpen = tag.RowsAffected()
	err = tx.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM reconciliation_discrepancies WHERE run_id = $1 AND change = 'new'),
		       (SELECT count(*) FROM reconciliation_discrepancies p WHERE p.run_id = $2
		          AND NOT EXISTS (SELECT 1 FROM reconciliation_discrepancies d WHERE d.run_id = $1 AND d.fingerprint = p.fingerprint))`,
		run.ID, prev).Scan(&diff.New, &diff.Gone)
	return diff, err
}
