package reconcile

// Settlement reconciliation: the money the provider actually moved for us,
// read when the run's provider is a providers.MoneyReporter (skipped when
// it is not). The run stages, with COPY into reconciliation_money_rows
// (migration 00028), what it needs of it, each row tagged by its stream:
//
//   - day: the balance transactions created in the business day [from,
//     to), no grace (the provider stamps them; a day's money is its own),
//     but for the charges whose fees agree, judged and summed as they
//     stream by (settleday.go);
//   - payout and item: the payouts created in the day, and each one's
//     items (providers.MoneyReporter.PayoutItems);
//   - late, when the connector's fee schedule states its payout delay N
//     (and grace G): the balance transactions of day X = D − N − G (read
//     with the run's grace around it, so a capture near midnight is not
//     judged absent), whose payouts are all due by now, and the payouts
//     created from X to the end of D, for their statuses.
//
// A row with a hold is our payment's when payments.provider is the run's
// provider and provider_ref the hold: each rule joins the payments index
// for the rows it judges (nothing is written into the staged rows: their
// matched_tenant_id and matched_payment_id stay empty). Once staged, the
// money is analyzed, so that the planner knows a day of a million rows
// from an empty table. Then four rules judge them in SQL, in the run's
// transaction, their findings streamed through a cursor into the finding
// writer:
//
//   - fee_mismatch: a day's charge whose fee is not the schedule's within
//     its tolerance (no schedule, or no rule for the currency: not judged);
//   - payout_unexplained: a day's payout whose items' nets (its own
//     movement aside) do not add up to its amount;
//   - payout_item_unknown: an item of a day's payout, a charge, refund or
//     dispute, whose hold is no payment of ours on the connector (or that
//     has none); adjustments without a hold are explained by the sum;
//   - not_paid_out: a charge of day X that no payout paid, or whose
//     payout failed, was canceled or came after D; and a capture of ours
//     that succeeded on day X with no charge at the provider at all.
//
// The day's money by currency (Settlement) is summed from the day stream
// (the staged rows, and the charges held out of staging) and stored with
// the run. Nothing here holds a day in memory: the
// provider's listings go straight into COPY, and the rules are sums and
// anti-joins read FETCH by FETCH.
//
// Reads only: settlement calls the provider's listings, never anything
// that moves money, so a run, or a re-run, cannot move money at all.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// Categories of settlement (settle.go).
const (
	// FeeMismatch: a charge whose fee is not the connector's agreed fee.
	FeeMismatch = "fee_mismatch"
	// PayoutUnexplained: a payout whose items do not add up to its amount.
	PayoutUnexplained = "payout_unexplained"
	// PayoutItemUnknown: an item of a payout that belongs to no payment of
	// ours.
	PayoutItemUnknown = "payout_item_unknown"
	// NotPaidOut: a charge not paid out within the connector's payout
	// terms, or a capture of ours the provider booked no charge for.
	NotPaidOut = "not_paid_out"
)

// The reasons of a not_paid_out (detail.reason).
const (
	notPaidNoPayout       = "no_payout"
	notPaidPayoutFailed   = "payout_failed"
	notPaidPayoutCanceled = "payout_canceled"
	notPaidPayoutLate     = "payout_late"
	notPaidNoCharge       = "no_balance_transaction"
)

// Settlement is the money of a day at the provider in one currency, in
// minor units with the provider's signs: charges are gross captured,
// refunds and disputes negative, fees what it charged (all movements'),
// net = charges + refunds + disputes + adjustments − fees, and paid out
// the amounts of the payouts created that day.
type Settlement struct {
	ChargeCount int64 `json:"charge_count"`
	Charges     int64 `json:"charges_minor"`
	Fees        int64 `json:"fees_minor"`
	Refunds     int64 `json:"refunds_minor"`
	Disputes    int64 `json:"disputes_minor"`
	Adjustments int64 `json:"adjustments_minor"`
	Net         int64 `json:"net_minor"`
	PayoutCount int64 `json:"payout_count"`
	PaidOut     int64 `json:"paid_out_minor"`
}

// moneyTerms is what a run knows of the connector's money before it reads
// it (nil moneyTerms: the provider reports none): its active fee schedule
// (nil: none stored) and day X, whose payouts are all due by now, with the
// run's grace around it (nil: the schedule states no payout delay).
type moneyTerms struct {
	fees *FeeVersion
	late *window
	// tally holds the day's charges that need no staging (settleday.go),
	// filled while the money is staged.
	tally *dayTally
}

// activeFeeScheduleSQL reads a connector's active fee schedule.
const activeFeeScheduleSQL = `
	SELECT connector, version, schedule, created_by, created_at FROM fee_schedules
	WHERE connector = $1 ORDER BY version DESC LIMIT 1`

// readMoneyTerms reads, on the run's connection, what settlement needs to
// know before it reads the provider: nil when the provider reports no
// money.
func (r *Reconciler) readMoneyTerms(ctx context.Context, conn *pgx.Conn, prov providers.Provider, run Run) (*moneyTerms, error) {
	if _, ok := prov.(providers.MoneyReporter); !ok {
		return nil, nil
	}
	rows, _ := conn.Query(ctx, activeFeeScheduleSQL, run.Provider)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[feeRow])
	switch {
	case isNoRows(err):
		return &moneyTerms{tally: newDayTally(nil)}, nil
	case err != nil:
		return nil, fmt.Errorf("read the fee schedule: %w", err)
	}
	v, err := row.version()
	if err != nil {
		return nil, err
	}
	t := &moneyTerms{fees: &v, tally: newDayTally(&v)}
	if n := v.Schedule.PayoutDelayDays; n != nil {
		back := *n + v.Schedule.graceDays()
		from := run.WindowStart.In(r.loc).AddDate(0, 0, -back)
		to := run.WindowEnd.In(r.loc).AddDate(0, 0, -back)
		grace := time.Duration(run.GraceSeconds) * time.Second
		t.late = &window{from: from, to: to, gfrom: from.Add(-grace), gto: to.Add(grace)}
	}
	return t, nil
}

// stageSettlement reads what settlement needs to know of the connector
// (readMoneyTerms) and stages its money (stageMoney) on the run's
// connection; nil, and nothing staged, when the provider reports none.
func (r *Reconciler) stageSettlement(ctx context.Context, conn *pgx.Conn, prov providers.Provider, run Run) (*moneyTerms, error) {
	terms, err := r.readMoneyTerms(ctx, conn, prov, run)
	if err != nil || terms == nil {
		return nil, err
	}
	if err := r.stageMoney(ctx, conn, prov.(providers.MoneyReporter), run, terms); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, analyzeMoneySQL); err != nil {
		return nil, fmt.Errorf("analyze the provider's money: %w", err)
	}
	return terms, nil
}

// The streams of reconciliation_money_rows.
const (
	streamDay    = "day"
	streamPayout = "payout"
	streamItem   = "item"
	streamLate   = "late"
)

// Objects of reconciliation_money_rows.
const (
	objectBalance = "balance_transaction"
	objectPayout  = "payout"
)

// moneyCols are the columns stageMoney copies.
var moneyCols = []string{"run_id", "seq", "stream", "object", "id", "type", "hold_ref", "operation_key", "gross_minor",
	"fee_minor", "net_minor", "currency", "payout_id", "status", "arrival_date", "created_at"}

// balanceRow is a balance transaction of stream as staged. Provider text
// is made printable first: a byte COPY cannot store must not fail the day,
// and a hold made unrecognisable is then simply not ours.
func balanceRow(runID, seq int64, stream string, bt providers.BalanceTransaction) []any {
	return []any{runID, seq, stream, objectBalance, printable(bt.ID), printable(bt.Type), printable(bt.HoldRef),
		printable(bt.OperationKey), bt.GrossMinor, bt.FeeMinor, bt.NetMinor, strings.ToUpper(printable(bt.Currency)),
		printable(bt.PayoutID), "", nil, bt.CreatedAt}
}

// payoutRow is a payout of stream as staged; its amount is its gross and
// net.
func payoutRow(runID, seq int64, stream string, p providers.Payout) []any {
	var arrival any
	if !p.ArrivalDate.IsZero() {
		arrival = p.ArrivalDate
	}
	return []any{runID, seq, stream, objectPayout, printable(p.ID), "", "", "", p.AmountMinor, int64(0), p.AmountMinor,
		strings.ToUpper(printable(p.Currency)), "", printable(p.Status), arrival, p.CreatedAt}
}

// stageMoney streams the provider's money of the run's streams into
// reconciliation_money_rows with COPY on conn: the listings are read in
// a goroutine, one after the other, each row handed to COPY as it comes.
func (r *Reconciler) stageMoney(ctx context.Context, conn *pgx.Conn, mr providers.MoneyReporter, run Run, terms *moneyTerms) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rowsCh := make(chan []any, 1024)
	errCh := make(chan error, 1)
	go func() {
		defer close(rowsCh)
		errCh <- readMoney(ctx, mr, run, terms, func(row []any) error {
			select {
			case rowsCh <- row:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	src := pgx.CopyFromFunc(func() ([]any, error) {
		row, ok := <-rowsCh
		if !ok {
			return nil, nil
		}
		return row, nil
	})
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"reconciliation_money_rows"}, moneyCols, src); err != nil {
		cancel()
		for range rowsCh { // let the reader finish
		}
		<-errCh
		return fmt.Errorf("stage the provider's money: %w", err)
	}
	if err := <-errCh; err != nil {
		return fmt.Errorf("read the provider's money: %w", err)
	}
	return nil
}

// readMoney reads the run's streams from mr and passes each row to emit:
// the day's balance transactions (those terms.tally takes aside), its
// payouts and their items, then the late day's, when there is one. Only the day's payout ids are held (a
// handful a day: one per currency on a daily schedule).
func readMoney(ctx context.Context, mr providers.MoneyReporter, run Run, terms *moneyTerms, emit func([]any) error) error {
	var seq int64
	bt := func(stream string) func(providers.BalanceTransaction) error {
		return func(b providers.BalanceTransaction) error {
			seq++
			return emit(balanceRow(run.ID, seq, stream, b))
		}
	}
	day := providers.ReportRequest{From: run.WindowStart, To: run.WindowEnd}
	err := mr.BalanceTransactions(ctx, day, func(b providers.BalanceTransaction) error {
		seq++
		if terms.tally.take(b) {
			return nil
		}
		return emit(balanceRow(run.ID, seq, streamDay, b))
	})
	if err != nil {
		return err
	}
	var payouts []string
	err = mr.Payouts(ctx, day, func(p providers.Payout) error {
		seq++
		payouts = append(payouts, p.ID)
		return emit(payoutRow(run.ID, seq, streamPayout, p))
	})
	if err != nil {
		return err
	}
	for _, id := range payouts {
		if err := mr.PayoutItems(ctx, id, bt(streamItem)); err != nil {
			return err
		}
	}
	if terms.late == nil {
		return nil
	}
	late := providers.ReportRequest{From: terms.late.gfrom, To: terms.late.gto}
	if err := mr.BalanceTransactions(ctx, late, bt(streamLate)); err != nil {
		return err
	}
	return mr.Payouts(ctx, providers.ReportRequest{From: terms.late.from, To: run.WindowEnd}, func(p providers.Payout) error {
		seq++
		return emit(payoutRow(run.ID, seq, streamLate, p))
	})
}

// analyzeMoneySQL refreshes the staged money's statistics: the rules'
// joins are planned for the rows just staged (a sample: well under a
// second for a million).
const analyzeMoneySQL = `ANALYZE reconciliation_money_rows`

// clearMoneySQL deletes the run's staged money.
const clearMoneySQL = `DELETE FROM reconciliation_money_rows WHERE run_id = $1`
