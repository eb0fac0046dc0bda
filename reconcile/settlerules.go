package reconcile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The rules of settlement (settle.go), each a query over the run's staged
// money whose rows are findings.

// fetchFindings declares query as the cursor name in tx and hands the
// finding scan makes of each of its rows to w, pairBatch rows a FETCH: w
// writes in tx between two FETCHes, never while a result is being read,
// and no more than a batch is ever held.
func fetchFindings(ctx context.Context, tx pgx.Tx, w *findingWriter, name, query string, args []any,
	scan func(pgx.CollectableRow) (finding, error)) error {
	if _, err := tx.Exec(ctx, "DECLARE "+name+" NO SCROLL CURSOR FOR "+query, args...); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for {
		rows, _ := tx.Query(ctx, fmt.Sprintf("FETCH %d FROM %s", pairBatch, name))
		fs, err := pgx.CollectRows(rows, scan)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, f := range fs {
			if err := w.add(ctx, f); err != nil {
				return err
			}
		}
		if len(fs) < pairBatch {
			break
		}
	}
	if _, err := tx.Exec(ctx, "CLOSE "+name); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// judgeSettlement judges the run's staged money (nothing when terms is
// nil: the provider reports none) and sums the day's settlement into st.
func (r *Reconciler) judgeSettlement(ctx context.Context, tx pgx.Tx, run Run, terms *moneyTerms, st *stats,
	w *findingWriter) error {
	if terms == nil {
		return nil
	}
	// The rules hash a day of holds (the items, the late charges) to
	// join them: in memory, not in batches spilled to disk.
	if _, err := tx.Exec(ctx, settleWorkMemSQL); err != nil {
		return fmt.Errorf("settlement: %w", err)
	}
	if terms.fees != nil {
		if err := judgeFees(ctx, tx, run, terms.fees, w); err != nil {
			return err
		}
	}
	if err := fetchFindings(ctx, tx, w, "unexplained_payouts", unexplainedPayoutsSQL, []any{run.ID}, scanUnexplained); err != nil {
		return err
	}
	if err := fetchFindings(ctx, tx, w, "unknown_items", unknownItemsSQL, []any{run.ID, run.Provider}, scanUnknownItem); err != nil {
		return err
	}
	if late := terms.late; late != nil {
		due := run.WindowEnd.In(r.loc).AddDate(0, 0, -1).Format(time.DateOnly)
		if err := fetchFindings(ctx, tx, w, "unpaid_charges", unpaidChargesSQL, []any{run.ID, late.from, late.to, run.Provider},
			scanUnpaid(late.from, due)); err != nil {
			return err
		}
		if err := fetchFindings(ctx, tx, w, "uncharged_captures", unchargedCapturesSQL,
			[]any{run.ID, run.Provider, late.from, late.to}, scanUncharged(late.from)); err != nil {
			return err
		}
	}
	var err error
	if st.settlement, err = settlementOf(ctx, tx, run.ID); err != nil {
		return err
	}
	return addTally(st.settlement, terms.tally.sums)
}

// settleWorkMemSQL is the memory each sort or hash of the settlement
// rules may take, for the rest of the run's transaction.
const settleWorkMemSQL = `SET LOCAL work_mem = '128MB'`

// feeMismatchesSQL finds the day's charges whose fee is off the schedule
// by more than its tolerance ($7), each with its payment when the hold is
// ours on the run's provider ($8), looked up for these charges only (the
// staged rows are never linked: settle.go; OFFSET 0 keeps the look-up
// after the filter). The expected fee is FeeSchedule.Expected in SQL: the
// currency's rule ($2 currencies, $3 basis points, $4 fixed fees), else
// the default ($5, $6; NULL: none), basis points of the gross rounded
// half up (div truncates, as Go's integer division, and numeric cannot
// overflow on a provider's wild gross). A currency without a rule is not
// judged.
const feeMismatchesSQL = `
	SELECT f.id, f.hold_ref, f.currency, f.gross_minor, f.fee_minor, f.expected, p.tenant_id, p.id
	FROM (
		SELECT s.seq, s.id, s.hold_ref, s.currency, s.gross_minor, s.fee_minor, e.expected::bigint AS expected
		FROM reconciliation_money_rows s
		LEFT JOIN unnest($2::text[], $3::bigint[], $4::bigint[]) AS r (currency, bp, fixed) ON r.currency = s.currency
		CROSS JOIN LATERAL (SELECT CASE
			WHEN r.currency IS NOT NULL THEN div(s.gross_minor::numeric * r.bp + 5000, 10000) + r.fixed
			WHEN $5::bigint IS NOT NULL THEN div(s.gross_minor::numeric * $5::bigint + 5000, 10000) + $6::bigint
			END AS expected) e
		WHERE s.run_id = $1 AND s.stream = 'day' AND s.object = 'balance_transaction' AND s.type = 'charge'
			AND e.expected IS NOT NULL AND abs(s.fee_minor - e.expected) > $7
		OFFSET 0
	) f
	LEFT JOIN LATERAL (
		SELECT tenant_id, id FROM payments WHERE provider = $8 AND provider_ref = f.hold_ref AND f.hold_ref <> '' LIMIT 1
	) p ON true
	ORDER BY f.seq`

// judgeFees reports each of the run's day's charges whose fee the
// schedule fees does not agree with as fee_mismatch.
func judgeFees(ctx context.Context, tx pgx.Tx, run Run, fees *FeeVersion, w *findingWriter) error {
	s := fees.Schedule
	curs := slices.Sorted(func(yield func(string) bool) {
		for c := range s.Currencies {
			if !yield(c) {
				return
			}
		}
	})
	bps, fixed := make([]int64, len(curs)), make([]int64, len(curs))
	for i, c := range curs {
		bps[i], fixed[i] = s.Currencies[c].PercentBP, s.Currencies[c].FixedMinor
	}
	var defBP, defFixed *int64
	if s.Default != nil {
		defBP, defFixed = &s.Default.PercentBP, &s.Default.FixedMinor
	}
	args := []any{run.ID, curs, bps, fixed, defBP, defFixed, s.ToleranceMinor, run.Provider}
	return fetchFindings(ctx, tx, w, "fee_mismatches", feeMismatchesSQL, args, func(row pgx.CollectableRow) (finding, error) {
		var (
			id, ref, cur       string
			gross, fee, expect int64
			tenant             *int64
			payment            *string
		)
		if err := row.Scan(&id, &ref, &cur, &gross, &fee, &expect, &tenant, &payment); err != nil {
			return finding{}, err
		}
		f := moneyFinding(FeeMismatch, "fee", itoa(expect), itoa(fee), cur, tenant, payment, ref, "bt:"+id)
		d := fee - expect
		f.Difference = &d
		f.Detail["balance_transaction"] = id
		f.Detail["gross_minor"] = gross
		f.Detail["schedule_version"] = fees.Version
		f.Detail["tolerance_minor"] = s.ToleranceMinor
		return f, nil
	})
}

// moneyFinding is a finding about the provider's money: about our payment
// when the row's hold is one of ours (tenant, payment), with the hold ref when
// it has one, and subject naming the provider's object.
func moneyFinding(category, field, expected, actual, currency string, tenant *int64, payment *string, ref, subject string) finding {
	f := finding{Category: category, Field: field, Expected: expected, Actual: actual, Currency: currency,
		TenantID: tenant, PaymentID: payment, Detail: map[string]any{}, subject: subject}
	if ref != "" {
		f.Ref = &ref
	}
	return f
}

// unexplainedPayoutsSQL finds the day's payouts whose items' nets (the
// payout's own movement aside) do not add up to their amount.
const unexplainedPayoutsSQL = `
	SELECT p.id, p.currency, p.gross_minor, p.status, p.arrival_date, count(i.seq),
		coalesce(sum(i.net_minor), 0)::bigint
	FROM reconciliation_money_rows p
	LEFT JOIN reconciliation_money_rows i ON i.run_id = p.run_id AND i.stream = 'item' AND i.payout_id = p.id
		AND i.type <> 'payout'
	WHERE p.run_id = $1 AND p.stream = 'payout'
	GROUP BY p.seq, p.id, p.currency, p.gross_minor, p.status, p.arrival_date
	HAVING p.gross_minor <> coalesce(sum(i.net_minor), 0)
	ORDER BY p.seq`

func scanUnexplained(row pgx.CollectableRow) (finding, error) {
	var (
		id, cur, status string
		amount, n, sum  int64
		arrival         *time.Time
	)
	if err := row.Scan(&id, &cur, &amount, &status, &arrival, &n, &sum); err != nil {
		return finding{}, err
	}
	f := moneyFinding(PayoutUnexplained, "amount", itoa(sum), itoa(amount), cur, nil, nil, "", "payout:"+id)
	d := amount - sum
	f.Difference = &d
	f.Detail["payout"] = id
	f.Detail["item_count"] = n
	f.Detail["items_net_minor"] = sum
	f.Detail["status"] = status
	if arrival != nil {
		f.Detail["arrival_date"] = arrival.UTC().Format(time.DateOnly)
	}
	return f, nil
}

// unknownItemsSQL finds the items of the day's payouts, charges, refunds
// and disputes, that belong to no payment of ours on the connector ($2):
// none whose hold they name (an anti-join on the payments index, not a
// link written into the staged rows first: rewriting a million items
// costs more than the rule).
const unknownItemsSQL = `
	SELECT s.payout_id, s.id, s.type, s.hold_ref, s.currency, s.gross_minor, s.net_minor
	FROM reconciliation_money_rows s
	WHERE s.run_id = $1 AND s.stream = 'item' AND s.type IN ('charge', 'refund', 'dispute')
		AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.provider = $2 AND p.provider_ref = s.hold_ref AND s.hold_ref <> '')
	ORDER BY s.seq`

func scanUnknownItem(row pgx.CollectableRow) (finding, error) {
	var (
		payout, id, typ, ref, cur string
		gross, net                int64
	)
	if err := row.Scan(&payout, &id, &typ, &ref, &cur, &gross, &net); err != nil {
		return finding{}, err
	}
	actual := ref
	if actual == "" {
		actual = "no hold"
	}
	f := moneyFinding(PayoutItemUnknown, "hold_ref", "a payment of ours", actual, cur, nil, nil, ref,
		"payout:"+payout+":"+id)
	f.Detail["payout"] = payout
	f.Detail["balance_transaction"] = id
	f.Detail["type"] = typ
	f.Detail["gross_minor"] = gross
	f.Detail["net_minor"] = net
	return f, nil
}

// unpaidChargesSQL finds the charges of day X [$2, $3) that no payout
// created from X to the end of the run's day paid: none at all, or a
// payout that failed or was canceled, or one created later than that.
// The payouts listed (a handful, each once: the first listing of an id)
// are joined as a whole, never looked up per charge, which a day of a
// million charges cannot afford; each charge found has its payment on the
// run's provider ($4) looked up when its hold is ours (OFFSET 0 keeps the
// look-up after the filter).
const unpaidChargesSQL = `
	SELECT u.id, u.hold_ref, u.currency, u.gross_minor, u.net_minor, u.payout_id, u.status, u.listed, p.tenant_id, p.id
	FROM (
		SELECT c.seq, c.id, c.hold_ref, c.currency, c.gross_minor, c.net_minor, c.payout_id,
			coalesce(po.status, '') AS status, po.id IS NOT NULL AS listed
		FROM reconciliation_money_rows c
		LEFT JOIN (
			SELECT DISTINCT ON (id) id, status FROM reconciliation_money_rows
			WHERE run_id = $1 AND stream = 'late' AND object = 'payout'
			ORDER BY id, seq
		) po ON po.id = c.payout_id AND c.payout_id <> ''
		WHERE c.run_id = $1 AND c.stream = 'late' AND c.object = 'balance_transaction' AND c.type = 'charge'
			AND c.created_at >= $2 AND c.created_at < $3
			AND (c.payout_id = '' OR po.id IS NULL OR po.status IN ('failed', 'canceled'))
		OFFSET 0
	) u
	LEFT JOIN LATERAL (
		SELECT tenant_id, id FROM payments WHERE provider = $4 AND provider_ref = u.hold_ref AND u.hold_ref <> '' LIMIT 1
	) p ON true
	ORDER BY u.seq`

// scanUnpaid makes a not_paid_out of a charge of day x that was due in a
// payout by the day due.
func scanUnpaid(x time.Time, due string) func(pgx.CollectableRow) (finding, error) {
	return func(row pgx.CollectableRow) (finding, error) {
		var (
			id, ref, cur, payout, status string
			gross, net                   int64
			listed                       bool
			tenant                       *int64
			payment                      *string
		)
		if err := row.Scan(&id, &ref, &cur, &gross, &net, &payout, &status, &listed, &tenant, &payment); err != nil {
			return finding{}, err
		}
		reason, actual := notPaidNoPayout, "none"
		switch {
		case payout == "":
		case !listed:
			reason, actual = notPaidPayoutLate, payout
		case status == "canceled":
			reason, actual = notPaidPayoutCanceled, status
		default:
			reason, actual = notPaidPayoutFailed, status
		}
		f := moneyFinding(NotPaidOut, "payout", "paid out by "+due, actual, cur, tenant, payment, ref, "bt:"+id)
		d := -net
		f.Difference = &d
		f.Detail["reason"] = reason
		f.Detail["balance_transaction"] = id
		f.Detail["gross_minor"] = gross
		f.Detail["net_minor"] = net
		f.Detail["charge_date"] = x.Format(time.DateOnly)
		f.Detail["due_by"] = due
		if payout != "" {
			f.Detail["payout"] = payout
		}
		return f, nil
	}
}

// unchargedCapturesSQL finds our captures on the run's provider ($2) that
// succeeded on day X [$3, $4) and for which the provider booked no charge
// in X and its margins: none on the payment's hold, or, when the provider
// names the request that made each charge (operation_key), none of this
// capture's. A charge is the payment's when it names the payment's hold
// on the provider, as for the other rules.
const unchargedCapturesSQL = `
	SELECT o.tenant_id, o.payment_id, o.id, o.forwarded_key, o.amount_minor, p.provider_ref, p.currency
	FROM payment_operations o
	JOIN payments p ON p.tenant_id = o.tenant_id AND p.id = o.payment_id
	WHERE o.kind = 'capture' AND o.status = 'succeeded' AND o.created_at >= $3 AND o.created_at < $4
		AND p.provider = $2
		AND NOT EXISTS (
			SELECT 1 FROM reconciliation_money_rows c
			WHERE c.run_id = $1 AND c.stream = 'late' AND c.object = 'balance_transaction' AND c.type = 'charge'
				AND c.hold_ref = p.provider_ref AND c.hold_ref <> ''
				AND (c.operation_key = '' OR c.operation_key = o.forwarded_key))
	ORDER BY o.created_at, o.tenant_id, o.id`

// scanUncharged makes a not_paid_out of a capture of ours on day x that
// the provider booked no charge for.
func scanUncharged(x time.Time) func(pgx.CollectableRow) (finding, error) {
	return func(row pgx.CollectableRow) (finding, error) {
		var (
			tenant           int64
			payment, op, key string
			amount           int64
			ref              *string
			cur              string
		)
		if err := row.Scan(&tenant, &payment, &op, &key, &amount, &ref, &cur); err != nil {
			return finding{}, err
		}
		var holdRef string
		if ref != nil {
			holdRef = *ref
		}
		f := moneyFinding(NotPaidOut, "balance_transaction", "a charge on "+x.Format(time.DateOnly), "absent", cur,
			&tenant, &payment, holdRef, "capture:"+op)
		d := -amount
		f.Difference = &d
		f.Detail["reason"] = notPaidNoCharge
		f.Detail["operation_id"] = op
		f.Detail["forwarded_key"] = key
		f.Detail["amount_minor"] = amount
		f.Detail["charge_date"] = x.Format(time.DateOnly)
		return f, nil
	}
}

// settlementSQL sums the day's money by currency: its balance
// transactions by type (a payout's own movement aside) and its payouts.
const settlementSQL = `
	SELECT currency,
		count(*) FILTER (WHERE object = 'balance_transaction' AND type = 'charge'),
		coalesce(sum(gross_minor) FILTER (WHERE object = 'balance_transaction' AND type = 'charge'), 0)::bigint,
		coalesce(sum(fee_minor) FILTER (WHERE object = 'balance_transaction' AND type <> 'payout'), 0)::bigint,
		coalesce(sum(gross_minor) FILTER (WHERE object = 'balance_transaction' AND type = 'refund'), 0)::bigint,
		coalesce(sum(gross_minor) FILTER (WHERE object = 'balance_transaction' AND type = 'dispute'), 0)::bigint,
		coalesce(sum(gross_minor) FILTER (WHERE object = 'balance_transaction' AND type NOT IN
			('charge', 'refund', 'dispute', 'payout')), 0)::bigint,
		coalesce(sum(net_minor) FILTER (WHERE object = 'balance_transaction' AND type <> 'payout'), 0)::bigint,
		count(*) FILTER (WHERE object = 'payout'),
		coalesce(sum(gross_minor) FILTER (WHERE object = 'payout'), 0)::bigint
	FROM reconciliation_money_rows
	WHERE run_id = $1 AND stream IN ('day', 'payout')
	GROUP BY currency`

// settlementOf is the day's Settlement by currency (empty, not nil, on a
// day without money).
func settlementOf(ctx context.Context, tx pgx.Tx, runID int64) (map[string]*Settlement, error) {
	rows, _ := tx.Query(ctx, settlementSQL, runID)
	out := map[string]*Settlement{}
	var (
		cur string
		s   Settlement
	)
	_, err := pgx.ForEachRow(rows, []any{&cur, &s.ChargeCount, &s.Charges, &s.Fees, &s.Refunds, &s.Disputes, &s.Adjustments,
		&s.Net, &s.PayoutCount, &s.PaidOut}, func() error {
		v := s
		out[cur] = &v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sum the day's settlement: %w", err)
	}
	return out, nil
}
