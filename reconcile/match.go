package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/readreplica"
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
	DuplicateAtProvider, StuckPending, HoldExpiredUncaptured, InvalidProviderRow, PartMismatch, FeeMismatch,
	PayoutUnexplained, PayoutItemUnknown, NotPaidOut, PayoutMissingInBank, PayoutAmountMismatch, BankCreditUnmatched}

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
	// Parts are the hold's increments and captures when the provider
	// reports them (nil when it reports totals only: parts.go).
	Parts []part
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

// pairBatch is how many pairs one FETCH reads from the pairing cursor
// (fetchPairsSQL says the same number); the findings they yield are stored
// between two FETCHes.
const pairBatch = 5000

// The phases of a run, in order, as the "reconciliation phases" log line
// (and the reconciliation benchmark) names them.
const (
	phaseStage        = "stage"          // the provider's record into staging (stage)
	phaseMatch        = "match"          // staged rows linked to our payments (link)
	phasePairAndJudge = "pair_and_judge" // pairs paged through the rules (judgeDay)
	phaseFinish       = "finish"         // the run's outcome stored (finish)
)

var phases = []string{phaseStage, phaseMatch, phasePairAndJudge, phaseFinish}

// window is the day a run judges, [from, to), and the margins around it,
// [gfrom, gto), that are read so that an item near midnight is seen by
// both days' runs and judged by the one it belongs to.
type window struct {
	from, to, gfrom, gto time.Time
}

func runWindow(run Run) window {
	grace := time.Duration(run.GraceSeconds) * time.Second
	return window{from: run.WindowStart, to: run.WindowEnd,
		gfrom: run.WindowStart.Add(-grace), gto: run.WindowEnd.Add(grace)}
}

// match reconciles one run in four phases: stage loads the provider's
// record into staging, link matches it to our payments in SQL, judgeDay
// pages the pairs through a cursor and the rules and stores the findings,
// and finish stores the run's outcome.
//
// Everything it writes goes over one connection of the back-office pool,
// and the run never waits for a second connection of that pool while it
// holds one: runs cannot deadlock the pool however many start at once.
// The findings commit in one transaction with the run's success, so a
// failed run leaves none.
//
// With a replica (Config.Replica), the pairing's heavy read, the day's
// payments, runs on a replica connection once the replica has replayed
// the WAL up to where the primary stood after link committed (so it has
// every payment a staged row was linked to), merged with the staged rows
// read on the primary (mergedPairs: the staging table is unlogged, so a
// replica never has it); the findings are still written in the run's
// transaction on the primary. The run then holds a connection of
// each pool, always taken in that order, primary first: nothing ever
// holds a replica connection while it waits for a primary one, so the two
// pools cannot deadlock each other either. A replica that has not caught
// up within ReplicaMaxWait, or is down, leaves the pairing on the primary;
// one that fails during the pairing makes the run judge the day again on
// the primary from the start (its findings so far are rolled back).
func (r *Reconciler) match(ctx context.Context, run Run) (result, error) {
	prov := r.providers[run.Provider]
	if prov == nil {
		return result{}, fmt.Errorf("provider %q is not configured", run.Provider)
	}
	win := runWindow(run)
	clock := newPhaseClock()
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return result{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()
	staged, err := r.stage(ctx, conn.Conn(), prov, run.ID, win.from, win.to, win.gfrom, win.gto)
	if err != nil {
		return result{}, err
	}
	stop := clock.part(partSettleStage)
	if staged.money, err = r.stageSettlement(ctx, conn.Conn(), prov, run); err != nil {
		return result{}, err
	}
	stop()
	stop = clock.part(partBankRead)
	if staged.bank, err = r.readBankDay(ctx, conn.Conn(), run); err != nil {
		return result{}, err
	}
	stop()
	clock.done(phaseStage)
	if err := link(ctx, conn.Conn(), run); err != nil {
		return result{}, err
	}
	clock.done(phaseMatch)
	pairsOn := "primary"
	res, err := r.judgeOnReplica(ctx, conn, run, win, staged, clock)
	switch {
	case err == nil && res != nil:
		pairsOn = "replica"
	case err == nil || isReplicaFault(err) && ctx.Err() == nil:
		if err != nil {
			r.reads.Failed(ctx, err)
		}
		res, err = r.judgeAndFinish(ctx, conn, func(tx pgx.Tx) pairSource { return newSQLPairs(tx, run, win) }, run, win, staged, clock)
	}
	if err != nil {
		return result{}, err
	}
	r.logger.InfoContext(ctx, "reconciliation phases", append(clock.attrs(run.ID), "pairs_on", pairsOn)...)
	return *res, nil
}

// judgeOnReplica judges the day with its pairs read from a replica that
// has replayed everything committed on conn so far; nil (and no error)
// when no replica is configured or it is not ready within ReplicaMaxWait,
// so the day is judged on the primary instead.
func (r *Reconciler) judgeOnReplica(ctx context.Context, conn *pgxpool.Conn, run Run, win window, staged staged,
	clock *phaseClock) (*result, error) {
	if !r.reads.HasReplica() {
		return nil, nil
	}
	// Read on the connection held: never a second one of its pool.
	lsn, err := readreplica.Position(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("read the primary's WAL position: %w", err)
	}
	rconn := r.reads.ReplicaAt(ctx, lsn)
	if rconn == nil {
		return nil, nil
	}
	defer rconn.Release()
	rtx, err := rconn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, replicaFault{fmt.Errorf("begin on the replica: %w", err)}
	}
	defer func() { _ = rtx.Rollback(context.WithoutCancel(ctx)) }() // read only: nothing to commit
	return r.judgeAndFinish(ctx, conn, func(tx pgx.Tx) pairSource { return newMergedPairs(tx, rtx, run, win) }, run, win, staged, clock)
}

// judgeAndFinish judges the day and stores its findings and outcome in
// one transaction on conn; pairs makes the source of its pairs in that
// transaction.
func (r *Reconciler) judgeAndFinish(ctx context.Context, conn *pgxpool.Conn, pairs func(tx pgx.Tx) pairSource, run Run,
	win window, staged staged, clock *phaseClock) (*result, error) {
	var res result
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		prev, err := previousFindings(ctx, tx, run)
		if err != nil {
			return err
		}
		w := newFindingWriter(r, tx, run.ID, prev)
		st, err := r.judgeDay(ctx, tx, pairs(tx), run, staged, w, clock)
		if err != nil {
			return err
		}
		clock.done(phasePairAndJudge)
		res, err = r.finish(ctx, tx, run, st, w)
		return err
	})
	if err != nil {
		return nil, err
	}
	clock.done(phaseFinish)
	return &res, nil
}

// replicaFault is an error of the pairing on a replica: the day is judged
// again on the primary.
type replicaFault struct{ err error }

func (f replicaFault) Error() string { return "on the read replica: " + f.err.Error() }
func (f replicaFault) Unwrap() error { return f.err }

func isReplicaFault(err error) bool {
	var f replicaFault
	return errors.As(err, &f)
}

// The parts of phases timed on their own, for the log line: settlement's
// share of stage and pair_and_judge, and the bank step's.
const (
	partSettleStage = "settle_stage" // the provider's money into staging (stage)
	partBankRead    = "bank_read"    // the payouts of the bank step read (stage)
	partSettleJudge = "settle_judge" // settlement's rules and sums (pair_and_judge)
	partBankJudge   = "bank_judge"   // the bank step's matching (pair_and_judge)
)

var parts = []string{partSettleStage, partBankRead, partSettleJudge, partBankJudge}

// phaseClock times the phases of a run, and some parts of them, for its
// log line.
type phaseClock struct {
	mark  time.Time
	took  map[string]time.Duration
	parts map[string]time.Duration
}

func newPhaseClock() *phaseClock {
	return &phaseClock{mark: time.Now(), took: map[string]time.Duration{}, parts: map[string]time.Duration{}}
}

// part starts timing the part name of the current phase; the function it
// returns ends it (a part timed again, as when the day is judged again
// on the primary, keeps its last time).
func (c *phaseClock) part(name string) func() {
	start := time.Now()
	return func() { c.parts[name] = time.Since(start) }
}

// done ends the phase name: it took the time since the previous one ended.
func (c *phaseClock) done(name string) {
	now := time.Now()
	c.took[name] = now.Sub(c.mark)
	c.mark = now
}

// attrs are the log attributes of the run's phases: run_id, then
// <phase>_s in seconds for each phase in order, then <part>_s for each
// part timed.
func (c *phaseClock) attrs(runID int64) []any {
	attrs := []any{"run_id", runID}
	for _, name := range phases {
		attrs = append(attrs, name+"_s", c.took[name].Seconds())
	}
	for _, name := range parts {
		if d, ok := c.parts[name]; ok {
			attrs = append(attrs, name+"_s", d.Seconds())
		}
	}
	return attrs
}

// linkByRefSQL matches staged provider rows to our payments by the
// provider's reference.
const linkByRefSQL = `
	UPDATE reconciliation_provider_rows s SET matched_tenant_id = p.tenant_id, matched_payment_id = p.id
	FROM payments p
	WHERE s.run_id = $1 AND p.provider_ref = s.ref AND p.provider = $2`

// linkByPaymentIDSQL matches the staged rows still unmatched by our
// payment id in the provider's metadata: holds whose reference we never
// saw (an answer lost before we stored it).
const linkByPaymentIDSQL = `
	UPDATE reconciliation_provider_rows s SET matched_tenant_id = p.tenant_id, matched_payment_id = p.id
	FROM payments p
	WHERE s.run_id = $1 AND s.matched_payment_id IS NULL AND s.payment_id <> '' AND p.id = s.payment_id
		AND p.provider = $2`

// link matches the run's staged provider rows to our payments: by the
// provider's reference, then by our payment id for the rest, then to the
// earlier attempts of payments now held elsewhere (attempts.go). The
// staged money is linked apart (linkMoney).
func link(ctx context.Context, conn *pgx.Conn, run Run) error {
	if _, err := conn.Exec(ctx, linkByRefSQL, run.ID, run.Provider); err != nil {
		return fmt.Errorf("match by reference: %w", err)
	}
	if _, err := conn.Exec(ctx, linkByPaymentIDSQL, run.ID, run.Provider); err != nil {
		return fmt.Errorf("match by payment id: %w", err)
	}
	if _, err := conn.Exec(ctx, linkByAttemptSQL, run.ID, run.Provider); err != nil {
		return fmt.Errorf("match by earlier attempt: %w", err)
	}
	return nil
}

// judgeDay judges the day in tx: the provider rows stage set aside as
// invalid, then every pair of judgePairs (read from pairs), the rows of
// earlier attempts, and the day's webhooks about objects we do not know
// (webhook.go), then the provider's money (settle.go). It returns the
// day's counts, totals and settlement once every finding is stored.
func (r *Reconciler) judgeDay(ctx context.Context, tx pgx.Tx, pairs pairSource, run Run, staged staged,
	w *findingWriter, clock *phaseClock) (*stats, error) {
	win := runWindow(run)
	st := newStats(win.from, win.to)
	st.providerCount += staged.invalidInWindow
	for _, f := range staged.invalid {
		if err := w.add(ctx, f); err != nil {
			return nil, err
		}
	}
	if err := r.judgePairs(ctx, pairs, st, w); err != nil {
		return nil, err
	}
	if err := judgeAbandoned(ctx, tx, run, st, w); err != nil {
		return nil, err
	}
	if err := judgeUnknownWebhooks(ctx, tx, run, win, w); err != nil {
		return nil, err
	}
	stop := clock.part(partSettleJudge)
	if err := r.judgeSettlement(ctx, tx, run, staged.money, st, w); err != nil {
		return nil, err
	}
	stop()
	stop = clock.part(partBankJudge)
	if err := r.judgeBank(ctx, tx, run, staged.bank, w); err != nil {
		return nil, err
	}
	stop()
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// finishRunSQL marks the run succeeded with its counts, totals and diff;
// the status change writes the run's reconciliation.run.completed event
// and its deliveries in the same transaction (migration 00009's trigger).
const finishRunSQL = `
	UPDATE reconciliation_runs SET status = 'succeeded', finished_at = $2, lease_until = NULL,
		local_count = $3, provider_count = $4, matched_count = $5, discrepancy_count = $6,
		totals = $7, category_counts = $8, diff = $9, settlement = $10
	WHERE id = $1 AND status = 'running'`

// errRunAbandoned: the run was recorded failed (abandoned) while it worked.
var errRunAbandoned = errors.New("the run was recorded abandoned while it worked (its lease ran out)")

// clearStagingSQL deletes the run's staged provider rows.
const clearStagingSQL = `DELETE FROM reconciliation_provider_rows WHERE run_id = $1`

// finish stores the run's outcome in tx: its diff against the previous
// version of the day (carryOver), its counts, totals and settlement, and
// its success; its staged rows and money go.
func (r *Reconciler) finish(ctx context.Context, tx pgx.Tx, run Run, st *stats, w *findingWriter) (result, error) {
	res := result{LocalCount: st.localCount, ProviderCount: st.providerCount, MatchedCount: st.matched, DiscrepancyCount: w.total}
	diff, err := carryOver(ctx, tx, run)
	if err != nil {
		return result{}, fmt.Errorf("finish run: %w", err)
	}
	var settlement any // NULL: the provider reports no money
	if st.settlement != nil {
		settlement = st.settlement
	}
	tag, err := tx.Exec(ctx, finishRunSQL, run.ID, r.now(), res.LocalCount, res.ProviderCount, res.MatchedCount,
		res.DiscrepancyCount, st.totals, w.byCategory, diff, settlement)
	if err != nil {
		return result{}, fmt.Errorf("finish run: %w", err)
	}
	if tag.RowsAffected() != 1 {
		// Its lease ran out meanwhile and FailAbandoned recorded it failed
		// (and dropped its staged rows): what it found is not kept.
		return result{}, errRunAbandoned
	}
	if _, err := tx.Exec(ctx, clearStagingSQL, run.ID); err != nil {
		return result{}, err
	}
	if _, err := tx.Exec(ctx, clearMoneySQL, run.ID); err != nil {
		return result{}, err
	}
	return res, nil
}

// declarePairsSQL opens the pairing cursor. It pairs each payment of the
// window (or matched by a provider row) with the provider rows matched to
// it, and leaves unmatched provider rows alone, ordered so that the rows of
// one payment (or of one unmatched reference) come together. $1 is the
// run, $2 the provider, [$3, $4) the window with its margins.
const declarePairsSQL = `
	DECLARE pairs NO SCROLL CURSOR FOR
	WITH s AS (
		SELECT * FROM reconciliation_provider_rows WHERE run_id = $1 AND abandoned_attempt IS NULL
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
		s.created_at, s.updated_at, s.parts
	FROM l FULL JOIN s ON s.matched_tenant_id = l.tenant_id AND s.matched_payment_id = l.id
	ORDER BY coalesce(l.tenant_id, -1), coalesce(l.id, s.ref), s.updated_at, s.seq`

// The other statements of the pairing cursor. The cursor is read to its
// end, so it is planned for all rows, not the first; fetchPairsSQL reads
// pairBatch rows.
const (
	planPairsSQL  = `SET LOCAL cursor_tuple_fraction = 1`
	fetchPairsSQL = `FETCH 5000 FROM pairs`
	closePairsSQL = `CLOSE pairs`
)

// pairSource yields the day's pairs, the rows of one payment (or of one
// unmatched reference) together, in batches of up to pairBatch.
type pairSource interface {
	open(ctx context.Context) error
	// next appends the next pairs to batch; more is false after the last.
	next(ctx context.Context, batch []pairRow) (_ []pairRow, more bool, err error)
	// ourParts reads the increments and captures of the payments of keys
	// (parts.go), from where the payments were read.
	ourParts(ctx context.Context, keys []paymentKey) (map[paymentKey][]ourPart, error)
	close(ctx context.Context) error
}

// sqlPairs pairs in one query, the pairing cursor of declarePairsSQL, in
// the run's transaction on the primary.
type sqlPairs struct {
	tx  pgx.Tx
	run Run
	win window
}

func newSQLPairs(tx pgx.Tx, run Run, win window) *sqlPairs {
	return &sqlPairs{tx: tx, run: run, win: win}
}

func (p *sqlPairs) open(ctx context.Context) error {
	if _, err := p.tx.Exec(ctx, planPairsSQL); err != nil {
		return fmt.Errorf("pair: %w", err)
	}
	if _, err := p.tx.Exec(ctx, declarePairsSQL, p.run.ID, p.run.Provider, p.win.gfrom, p.win.gto); err != nil {
		return fmt.Errorf("pair: %w", err)
	}
	return nil
}

func (p *sqlPairs) next(ctx context.Context, batch []pairRow) ([]pairRow, bool, error) {
	batch, err := fetchPairs(ctx, p.tx, batch)
	return batch, len(batch) == pairBatch, err
}

func (p *sqlPairs) ourParts(ctx context.Context, keys []paymentKey) (map[paymentKey][]ourPart, error) {
	return readOurParts(ctx, p.tx, keys)
}

func (p *sqlPairs) close(ctx context.Context) error {
	_, err := p.tx.Exec(ctx, closePairsSQL)
	return err
}

// judgePairs reads the pairs from src, pairBatch at a time, gathers them
// by payment (or unmatched reference), judges each group and hands the
// findings to w, which stores them in the run's transaction between two
// batches. Our increments and captures of the batch's payments whose
// provider rows report parts are read once per batch, before any of its
// groups is judged (a group is judged only once a later pair shows it
// complete, so every batch it spans has been looked up).
func (r *Reconciler) judgePairs(ctx context.Context, src pairSource, st *stats, w *findingWriter) error {
	if err := src.open(ctx); err != nil {
		return err
	}
	var (
		g     pairGroup
		batch = make([]pairRow, 0, pairBatch)
		ours  = partsLookup{}
		more  bool
		err   error
	)
	for {
		if batch, more, err = src.next(ctx, batch[:0]); err != nil {
			return err
		}
		if err := ours.need(ctx, batch, src.ourParts); err != nil {
			return err
		}
		for _, p := range batch {
			if !g.continues(p) {
				if err := r.judgeGroup(ctx, g, ours.take(g.l), st, w); err != nil {
					return err
				}
				g = pairGroup{l: p.l}
			}
			if p.r != nil {
				g.rows = append(g.rows, *p.r)
			}
		}
		if !more {
			break
		}
	}
	if err := r.judgeGroup(ctx, g, ours.take(g.l), st, w); err != nil {
		return err
	}
	return src.close(ctx)
}

// fetchPairs appends the next pairBatch pairs of the cursor to batch.
func fetchPairs(ctx context.Context, tx pgx.Tx, batch []pairRow) ([]pairRow, error) {
	rows, _ := tx.Query(ctx, fetchPairsSQL)
	defer rows.Close()
	for rows.Next() {
		p, err := scanPair(rows)
		if err != nil {
			return batch, fmt.Errorf("scan pair: %w", err)
		}
		batch = append(batch, p)
	}
	if err := rows.Err(); err != nil {
		return batch, fmt.Errorf("pair: %w", err)
	}
	return batch, nil
}

// pairGroup is one payment and the provider rows matched to it, or
// provider rows of one reference matched to no payment (l nil).
type pairGroup struct {
	l    *local
	rows []remote
}

// continues reports whether p belongs to g. Rows of one payment arrive
// together; unmatched provider rows arrive alone, grouped by reference.
func (g pairGroup) continues(p pairRow) bool {
	switch {
	case p.l != nil && g.l != nil:
		return p.l.TenantID == g.l.TenantID && p.l.ID == g.l.ID
	case p.l == nil && g.l == nil && p.r != nil && len(g.rows) > 0:
		return p.r.Ref == g.rows[0].Ref
	}
	return false
}

// judgeGroup judges g (ops: our increments and captures of its payment,
// when its provider rows report parts), hands its findings to w and
// counts it in st.
func (r *Reconciler) judgeGroup(ctx context.Context, g pairGroup, ops []ourPart, st *stats, w *findingWriter) error {
	if g.l == nil && len(g.rows) == 0 {
		return nil
	}
	for _, f := range r.judge(g.l, g.rows, ops, st.from, st.to) {
		if err := w.add(ctx, f); err != nil {
			return err
		}
	}
	st.count(g.l, g.rows)
	return nil
}

// pairRow is one row of the pairing cursor: a payment, a provider row, or
// both.
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
		sParts                    []part
	)
	if err := rows.Scan(&lTenant, &lID, &lStatus, &lCur, &lAmt, &lCap, &lRefd, &l.Ref, &l.CaptureBefore, &lCreated, &lUpdated,
		&sRef, &sPay, &sStatus, &sCur, &sAmt, &sCap, &sRefd, &sCreated, &sUpdated, &sParts); err != nil {
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
			Captured: *sCap, Refunded: *sRefd, CreatedAt: *sCreated, UpdatedAt: *sUpdated, Parts: sParts}
	}
	return p, nil
}

// inWindow reports whether t is in [from, to).
func inWindow(t, from, to time.Time) bool { return !t.Before(from) && t.Before(to) }

// expectedStatus maps our payment state to the provider's. A payment
// waiting for its shopper's authentication expects the provider's
// challenge still open: an authorized (or failed) hold at the provider is
// status_mismatch, not settled here. The hold sweeper settles such a
// payment by lookup within minutes, so by the time a day is reconciled it
// is a payment the sweeper could not settle, which finance should see;
// reconciliation reports, it never changes payments.
var expectedStatus = map[orchestrator.Status]providers.Status{
	orchestrator.StatusRequiresAction:    providers.StatusRequiresAction,
	orchestrator.StatusAuthorized:        providers.StatusAuthorized,
	orchestrator.StatusFailed:            providers.StatusDeclined,
	orchestrator.StatusCaptured:          providers.StatusCaptured,
	orchestrator.StatusCanceled:          providers.StatusCanceled,
	orchestrator.StatusExpired:           providers.StatusExpired,
	orchestrator.StatusPartiallyRefunded: providers.StatusPartiallyRefunded,
	orchestrator.StatusRefunded:          providers.StatusRefunded,
}

// judge applies the rules to one payment and the provider rows matched to
// it (or to unmatched provider rows of one reference); ops are our
// increments and captures of the payment when its rows report parts.
// Items that belong to the neighbouring days (seen only in the grace
// margins) are not judged.
func (r *Reconciler) judge(l *local, rows []remote, ops []ourPart, from, to time.Time) []finding {
	switch {
	case l == nil:
		return judgeUnmatched(rows, from, to)
	case !belongs(l, rows, from, to):
		return nil
	case orchestrator.Status(l.Status) == orchestrator.StatusPending:
		return r.judgePending(l, rows)
	case len(rows) == 0:
		return r.judgeAbsent(l)
	default:
		return r.judgeMatched(l, rows, ops)
	}
}

// belongs reports whether a payment or one of its provider rows was
// created or changed in [from, to): the day judges it.
func belongs(l *local, rows []remote, from, to time.Time) bool {
	if inWindow(l.CreatedAt, from, to) || inWindow(l.UpdatedAt, from, to) {
		return true
	}
	for _, rm := range rows {
		if inWindow(rm.CreatedAt, from, to) || inWindow(rm.UpdatedAt, from, to) {
			return true
		}
	}
	return false
}

// judgeUnmatched reports provider rows of one reference that match none
// of our payments as missing_locally, once, with the number of copies.
func judgeUnmatched(rows []remote, from, to time.Time) []finding {
	if len(rows) == 0 {
		return nil
	}
	rm := rows[0]
	if !inWindow(rm.CreatedAt, from, to) && !inWindow(rm.UpdatedAt, from, to) {
		return nil
	}
	ref := rm.Ref
	f := finding{Category: MissingLocally, Ref: &ref, Actual: string(rm.Status), Currency: rm.Currency,
		Detail: map[string]any{"provider_amount_minor": rm.Amount, "provider_payment_id": rm.PaymentID}}
	if len(rows) > 1 {
		f.Detail["copies"] = len(rows)
	}
	return []finding{f}
}

// judgePending reports a payment pending for longer than stuckAfter as
// stuck_pending, with the provider's latest state if it has one. A
// pending payment is judged on nothing else: its outcome is not known yet.
func (r *Reconciler) judgePending(l *local, rows []remote) []finding {
	if r.now().Sub(l.CreatedAt) < r.stuckAfter {
		return nil
	}
	actual := "absent"
	if len(rows) > 0 {
		actual = string(rows[len(rows)-1].Status)
	}
	f := l.finding(StuckPending, "status", "pending", actual)
	f.Detail["pending_since"] = l.CreatedAt.UTC()
	return []finding{f}
}

// judgeAbsent judges a payment the provider's record does not hold:
// missing_at_provider when we hold its reference (a payment refused before
// it reached the provider has none), and a lapsed hold.
func (r *Reconciler) judgeAbsent(l *local) []finding {
	var out []finding
	if l.Ref != nil {
		out = append(out, l.finding(MissingAtProvider, "", l.Status, "absent"))
	}
	if f, ok := r.lapsed(l, nil); ok {
		out = append(out, f)
	}
	return out
}

// judgeMatched compares a payment with the provider rows matched to it:
// more than one is duplicate_at_provider; the latest is compared for
// currency, each amount, each part when it reports them (with ops, our
// increments and captures), and state (a lapsed hold, or the state
// expectedStatus says).
func (r *Reconciler) judgeMatched(l *local, rows []remote, ops []ourPart) []finding {
	var out []finding
	if len(rows) > 1 {
		out = append(out, duplicates(l, rows))
	}
	rm := rows[len(rows)-1] // the latest state
	if rm.Currency != l.Currency {
		out = append(out, l.finding(CurrencyMismatch, "currency", l.Currency, rm.Currency))
	}
	out = append(out, amountMismatches(l, rm)...)
	if rm.Parts != nil {
		out = append(out, partMismatches(l, rm.Parts, ops)...)
	}
	if f, ok := r.lapsed(l, &rm); ok {
		out = append(out, f)
	} else if want := expectedStatus[orchestrator.Status(l.Status)]; want != providers.Status(rm.Status) &&
		!failedAndCanceled(l, rm) {
		out = append(out, l.finding(StatusMismatch, "status", string(want), rm.Status))
	}
	return out
}

// failedAndCanceled reports a failed payment whose provider object was
// canceled: an abandoned authentication challenge, whose intent payorch
// canceled (orchestrator.FailureAuthenticationAbandoned). Neither side
// holds money; they agree.
func failedAndCanceled(l *local, rm remote) bool {
	return orchestrator.Status(l.Status) == orchestrator.StatusFailed && providers.Status(rm.Status) == providers.StatusCanceled
}

// duplicates is the duplicate_at_provider finding of a payment that
// several provider rows match, with their references.
func duplicates(l *local, rows []remote) finding {
	refs := map[string]bool{}
	for _, rm := range rows {
		refs[rm.Ref] = true
	}
	list := make([]string, 0, len(refs))
	for ref := range refs {
		list = append(list, ref)
	}
	f := l.finding(DuplicateAtProvider, "", "1", itoa(int64(len(rows))))
	f.Detail["provider_refs"] = list
	return f
}

// amountMismatches compares the authorized, captured and refunded amounts
// of a payment with the provider's latest row: one amount_mismatch per
// field that differs, with the difference and its direction.
func amountMismatches(l *local, rm remote) []finding {
	var out []finding
	for _, a := range []struct {
		field          string
		ours, provider int64
	}{{"authorized", l.Amount, rm.Amount}, {"captured", l.Captured, rm.Captured}, {"refunded", l.Refunded, rm.Refunded}} {
		if a.ours == a.provider {
			continue
		}
		f := l.finding(AmountMismatch, a.field, itoa(a.ours), itoa(a.provider))
		d := a.provider - a.ours
		f.Difference = &d
		f.Detail["direction"] = map[bool]string{true: "over", false: "under"}[d > 0]
		out = append(out, f)
	}
	return out
}

// finding is a finding of category about the payment l.
func (l *local) finding(category, field, expected, actual string) finding {
	tenant, id := l.TenantID, l.ID
	f := finding{Category: category, Field: field, Expected: expected, Actual: actual, TenantID: &tenant,
		PaymentID: &id, Currency: l.Currency, Detail: map[string]any{}}
	if l.Ref != nil {
		ref := *l.Ref
		f.Ref = &ref
	}
	return f
}

// lapsed reports a hold that expired uncaptured: we still hold it as
// authorized past its capture_before, or the provider says it expired.
func (r *Reconciler) lapsed(l *local, rm *remote) (finding, bool) {
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
	f := l.finding(HoldExpiredUncaptured, "status", "captured or canceled before capture_before", actual)
	if l.CaptureBefore != nil {
		f.Detail["capture_before"] = l.CaptureBefore.UTC()
	}
	return f, true
}

// stats accumulates counts and per-currency totals of the core window,
// and the day's settlement (nil when the provider reports no money).
type stats struct {
	from, to                           time.Time
	localCount, providerCount, matched int64
	totals                             map[string]map[string]*Totals
	settlement                         map[string]*Settlement
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
// transaction; a finding the previous version of the day had (prev, by
// fingerprint) is stored still_open with the resolution it had there.
type findingWriter struct {
	r          *Reconciler
	tx         pgx.Tx
	runID      int64
	prev       map[string]resolution
	batch      [][]any
	total      int64
	byCategory map[string]int64
	seen       map[string]bool
}

func newFindingWriter(r *Reconciler, tx pgx.Tx, runID int64, prev map[string]resolution) *findingWriter {
	return &findingWriter{r: r, tx: tx, runID: runID, prev: prev, byCategory: map[string]int64{}, seen: map[string]bool{}}
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
	change := "new"
	res, seenBefore := w.prev[fp]
	if seenBefore {
		change = "still_open"
	}
	w.batch = append(w.batch, []any{w.runID, f.Category, fp, f.TenantID, f.PaymentID, f.Ref, f.Field, f.Expected,
		f.Actual, f.Currency, f.Difference, f.Detail, w.r.now(), change, res.At, res.By, res.Note})
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
			"actual", "currency", "difference_minor", "detail", "created_at", "change", "resolved_at", "resolved_by",
			"resolution_note"}, pgx.CopyFromRows(w.batch))
	w.batch = w.batch[:0]
	if err != nil {
		return fmt.Errorf("store discrepancies: %w", err)
	}
	return nil
}
