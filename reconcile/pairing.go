package reconcile

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The pairing with a read replica. The staged provider rows live in an
// unlogged table (rebuilt by a re-run, so not worth their WAL), which a
// replica does not have: declarePairsSQL cannot run there. So mergedPairs
// reads the staged rows on the primary, in the run's transaction, and
// every payment on the replica, and merges the two in the order of
// declarePairsSQL: provider rows matched to no payment first (by
// reference), then by payment, each with the provider rows matched to it.
// The payments are those of the window (a cursor over the replica's range
// scan, the heavy read) and those a staged row is matched to (looked up by
// key on the replica, one query per batch of staged rows). Keys compare
// byte-wise on both sides (COLLATE "C"), as Go compares strings.

// declareStagedSQL opens the cursor of the run's staged rows in pairing
// order (on the primary). $1 is the run.
const declareStagedSQL = `
	DECLARE staged NO SCROLL CURSOR FOR
	SELECT matched_tenant_id, matched_payment_id, ref, payment_id, status, currency, amount_minor, captured_minor,
		refunded_minor, created_at, updated_at, parts
	FROM reconciliation_provider_rows
	WHERE run_id = $1 AND abandoned_attempt IS NULL
	ORDER BY coalesce(matched_tenant_id, -1), coalesce(matched_payment_id, ref) COLLATE "C", updated_at, seq`

// declareWindowSQL opens the cursor of the window's payments in key order
// (on the replica). $1 is the provider, [$2, $3) the window with its
// margins.
const declareWindowSQL = `
	DECLARE window_payments NO SCROLL CURSOR FOR
	SELECT tenant_id, id, status, currency, amount_minor, captured_minor, refunded_minor, provider_ref, capture_before,
		created_at, updated_at
	FROM payments
	WHERE provider = $1 AND ((created_at >= $2 AND created_at < $3) OR (updated_at >= $2 AND updated_at < $3))
	ORDER BY tenant_id, id COLLATE "C"`

// matchedPaymentsSQL reads the payments of the keys ($1 tenants, $2 ids)
// staged rows are matched to (on the replica).
const matchedPaymentsSQL = `
	SELECT p.tenant_id, p.id, p.status, p.currency, p.amount_minor, p.captured_minor, p.refunded_minor, p.provider_ref,
		p.capture_before, p.created_at, p.updated_at
	FROM payments p JOIN unnest($1::bigint[], $2::text[]) AS k (tenant_id, id) ON p.tenant_id = k.tenant_id AND p.id = k.id`

// The other statements of the two cursors; each FETCH reads pairBatch
// rows.
const (
	fetchStagedSQL = `FETCH 5000 FROM staged`
	closeStagedSQL = `CLOSE staged`
	fetchWindowSQL = `FETCH 5000 FROM window_payments`
	closeWindowSQL = `CLOSE window_payments`
)

// paymentKey is a payment's key.
type paymentKey struct {
	tenant int64
	id     string
}

func comparePaymentKeys(a, b paymentKey) int {
	return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.id, b.id))
}

// stagedRow is a staged provider row and the payment it is matched to
// (matched false: none).
type stagedRow struct {
	key     paymentKey
	matched bool
	remote  remote
}

// mergedPairs pairs staged rows read on the primary (tx) with payments
// read on the replica (rtx).
type mergedPairs struct {
	tx, rtx pgx.Tx
	run     Run
	win     window

	staged     []stagedRow
	stagedDone bool // the cursor has no more rows
	// found are the payments the staged rows of the batch are matched to.
	found map[paymentKey]*local

	window     []*local
	windowDone bool
}

func newMergedPairs(tx, rtx pgx.Tx, run Run, win window) *mergedPairs {
	return &mergedPairs{tx: tx, rtx: rtx, run: run, win: win}
}

func (m *mergedPairs) open(ctx context.Context) error {
	if _, err := m.tx.Exec(ctx, declareStagedSQL, m.run.ID); err != nil {
		return fmt.Errorf("pair: staged rows: %w", err)
	}
	if _, err := m.rtx.Exec(ctx, planPairsSQL); err != nil {
		return replicaFault{fmt.Errorf("pair: %w", err)}
	}
	if _, err := m.rtx.Exec(ctx, declareWindowSQL, m.run.Provider, m.win.gfrom, m.win.gto); err != nil {
		return replicaFault{fmt.Errorf("pair: window payments: %w", err)}
	}
	return nil
}

// ourParts reads our increments and captures on the replica, where the
// payments were read.
func (m *mergedPairs) ourParts(ctx context.Context, keys []paymentKey) (map[paymentKey][]ourPart, error) {
	ops, err := readOurParts(ctx, m.rtx, keys)
	if err != nil {
		return nil, replicaFault{err}
	}
	return ops, nil
}

func (m *mergedPairs) close(ctx context.Context) error {
	if _, err := m.tx.Exec(ctx, closeStagedSQL); err != nil {
		return err
	}
	if _, err := m.rtx.Exec(ctx, closeWindowSQL); err != nil {
		return replicaFault{err}
	}
	return nil
}

// next appends up to pairBatch pairs: unmatched staged rows, then
// payments and staged rows in key order, a payment of the window that
// staged rows are matched to once, with them.
func (m *mergedPairs) next(ctx context.Context, batch []pairRow) ([]pairRow, bool, error) {
	for len(batch) < pairBatch {
		s, err := m.peekStaged(ctx)
		if err != nil {
			return batch, false, err
		}
		p, err := m.peekWindow(ctx)
		if err != nil {
			return batch, false, err
		}
		switch {
		case s == nil && p == nil:
			return batch, false, nil
		case s != nil && !s.matched:
			batch = append(batch, pairRow{r: &s.remote})
			m.staged = m.staged[1:]
		case s == nil || comparePaymentKeys(paymentKey{p.TenantID, p.ID}, s.key) < 0:
			batch = append(batch, pairRow{l: p}) // a payment of the window the provider does not have
			m.window = m.window[1:]
		default:
			if p != nil && comparePaymentKeys(paymentKey{p.TenantID, p.ID}, s.key) == 0 {
				m.window = m.window[1:] // the same payment, paired through found
			}
			l := m.found[s.key] // nil only if the payment vanished since link: then it is unmatched
			batch = append(batch, pairRow{l: l, r: &s.remote})
			m.staged = m.staged[1:]
		}
	}
	return batch, true, nil
}

// peekStaged returns the next staged row, reading the next batch (and
// looking up its payments) when the last is used up; nil at the end.
func (m *mergedPairs) peekStaged(ctx context.Context) (*stagedRow, error) {
	if len(m.staged) == 0 && !m.stagedDone {
		if err := m.fetchStaged(ctx); err != nil {
			return nil, err
		}
	}
	if len(m.staged) == 0 {
		return nil, nil
	}
	return &m.staged[0], nil
}

func (m *mergedPairs) fetchStaged(ctx context.Context) error {
	rows, _ := m.tx.Query(ctx, fetchStagedSQL)
	staged, err := pgx.CollectRows(rows, scanStaged)
	if err != nil {
		return fmt.Errorf("pair: staged rows: %w", err)
	}
	m.staged, m.stagedDone = staged, len(staged) < pairBatch
	var tenants []int64
	var ids []string
	for _, s := range staged {
		if s.matched && (len(ids) == 0 || tenants[len(tenants)-1] != s.key.tenant || ids[len(ids)-1] != s.key.id) {
			tenants, ids = append(tenants, s.key.tenant), append(ids, s.key.id)
		}
	}
	m.found = make(map[paymentKey]*local, len(ids))
	if len(ids) == 0 {
		return nil
	}
	rows, _ = m.rtx.Query(ctx, matchedPaymentsSQL, tenants, ids)
	payments, err := pgx.CollectRows(rows, scanLocal)
	if err != nil {
		return replicaFault{fmt.Errorf("pair: matched payments: %w", err)}
	}
	for _, p := range payments {
		m.found[paymentKey{p.TenantID, p.ID}] = p
	}
	return nil
}

// peekWindow returns the next payment of the window, reading the next
// batch when the last is used up; nil at the end.
func (m *mergedPairs) peekWindow(ctx context.Context) (*local, error) {
	if len(m.window) == 0 && !m.windowDone {
		rows, _ := m.rtx.Query(ctx, fetchWindowSQL)
		window, err := pgx.CollectRows(rows, scanLocal)
		if err != nil {
			return nil, replicaFault{fmt.Errorf("pair: window payments: %w", err)}
		}
		m.window, m.windowDone = window, len(window) < pairBatch
	}
	if len(m.window) == 0 {
		return nil, nil
	}
	return m.window[0], nil
}

func scanStaged(row pgx.CollectableRow) (stagedRow, error) {
	var (
		s      stagedRow
		tenant *int64
		id     *string
	)
	err := row.Scan(&tenant, &id, &s.remote.Ref, &s.remote.PaymentID, &s.remote.Status, &s.remote.Currency,
		&s.remote.Amount, &s.remote.Captured, &s.remote.Refunded, &s.remote.CreatedAt, &s.remote.UpdatedAt, &s.remote.Parts)
	if tenant != nil && id != nil {
		s.key, s.matched = paymentKey{*tenant, *id}, true
	}
	return s, err
}

func scanLocal(row pgx.CollectableRow) (*local, error) {
	var l local
	err := row.Scan(&l.TenantID, &l.ID, &l.Status, &l.Currency, &l.Amount, &l.Captured, &l.Refunded, &l.Ref,
		&l.CaptureBefore, &l.CreatedAt, &l.UpdatedAt)
	return &l, err
}
