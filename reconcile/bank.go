package reconcile

// The bank step of a daily run: did each payout arrive in the bank?
//
// The run of (connector, D), when the connector has a bank account
// (bankaccount.go) with match window W, judges the connector's payouts
// arriving on A = D − W: by D, the last day a credit of theirs may be
// booked, each should be one credit line of the account booked from A − 1
// to A + W. Lines are matched to payouts by currency and amount, then
// reference (the payout's reference equal to the line's, then contained
// in it), then nearest booking date; one line pays at most one payout, and
// the best pairs are taken first, over the payouts of every connector
// paying into the account (a line can only be one of theirs), so that the
// same statement gives the same matching in each connector's run.
//
// Findings: payout_missing_in_bank (a paid or in-transit payout without a
// line), payout_amount_mismatch (a line whose reference names an
// unmatched payout but whose amount differs), bank_credit_unmatched (a
// credit line booked on A that no payout of the account's connectors
// took; a second line for a payout already matched is one too, with
// detail.reason duplicate). Unmatched credits are reported once, by the
// run of the account's first connector by name, as they belong to no
// connector in particular.
//
// Reading payouts is a provider call, made before the run's transaction
// opens (readBankDay); the judging reads the lines in it (judgeBank).
// Nothing here moves money: payouts and lines are only read.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// Categories of the bank step.
const (
	PayoutMissingInBank  = "payout_missing_in_bank"
	PayoutAmountMismatch = "payout_amount_mismatch"
	BankCreditUnmatched  = "bank_credit_unmatched"
)

// The reasons of a bank_credit_unmatched (detail.reason).
const (
	CreditUnknown   = "unknown"
	CreditDuplicate = "duplicate"
)

// payoutTransit bounds how long before its arrival date a payout is
// created: payouts are read by creation time, and kept by arrival date.
const payoutTransit = 14 * 24 * time.Hour

const oneDay = 24 * time.Hour

// BankSummary is what a run found of its connector's payouts in the bank:
// those arriving on ArrivalDate (the business date − MatchWindowDays).
type BankSummary struct {
	Account         string                 `json:"account"`
	ArrivalDate     string                 `json:"arrival_date"`
	MatchWindowDays int                    `json:"match_window_days"`
	Currencies      map[string]*BankTotals `json:"currencies"`
}

// BankTotals are the payouts of one currency and what of them is in the
// bank, in minor units.
type BankTotals struct {
	// Payouts are the paid and in-transit payouts arriving that day.
	Payouts      int64 `json:"payouts"`
	PayoutsMinor int64 `json:"payouts_minor"`
	// Matched are those matched to a credit line; InBankMinor is the
	// amount credited for them (matched credits).
	Matched     int64 `json:"matched"`
	InBankMinor int64 `json:"in_bank_minor"`
	// Missing have no line; Mismatched a line of another amount.
	Missing    int64 `json:"missing"`
	Mismatched int64 `json:"mismatched"`
}

// bankDay is what readBankDay read for the bank step of a run.
type bankDay struct {
	account BankAccount // the run's connector's
	arrival time.Time   // A
	// payouts are those of every connector paying into the account
	// arriving in [arrFrom, arrTo].
	payouts        []bankPayout
	arrFrom, arrTo time.Time
	// lineFrom, lineTo bound the booking dates of the lines the payouts
	// may take.
	lineFrom, lineTo time.Time
	// judgeCredits: this run reports the account's unmatched credits
	// (its connector is the account's first), and every connector of the
	// account could be read.
	judgeCredits bool
}

type bankPayout struct {
	providers.Payout
	connector string
	window    int
	arrival   time.Time
}

// bankCredit is a credit line of the account.
type bankCredit struct {
	statement                                int64
	statementID                              string
	line                                     int
	booking                                  time.Time
	amount                                   int64
	currency, reference, counterparty, bkRef string
}

// readBankDay reads, before the run's transaction, the payouts the bank
// step judges and those competing for the same lines; nil when the run's
// connector has no bank account or reports no payouts.
func (r *Reconciler) readBankDay(ctx context.Context, conn *pgx.Conn, run Run) (*bankDay, error) {
	if _, ok := r.providers[run.Provider].(providers.MoneyReporter); !ok {
		return nil, nil
	}
	acct, err := bankAccountOf(ctx, conn, run.Provider)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bank account: %w", err)
	}
	peers, err := connectorsOf(ctx, conn, acct.Account)
	if err != nil {
		return nil, fmt.Errorf("connectors of bank account: %w", err)
	}
	d, err := time.Parse(time.DateOnly, run.BusinessDate)
	if err != nil {
		return nil, fmt.Errorf("business date: %w", err)
	}
	bd := &bankDay{account: acct, arrival: d.AddDate(0, 0, -acct.MatchWindowDays), judgeCredits: true}
	maxW := 0
	for _, p := range peers {
		maxW = max(maxW, p.MatchWindowDays)
	}
	// Payouts that may take a line the judged payouts may take, or a
	// line booked on A; and every line those may take.
	bd.arrFrom, bd.arrTo = bd.arrival.AddDate(0, 0, -1-maxW), bd.arrival.AddDate(0, 0, acct.MatchWindowDays+1)
	bd.lineFrom, bd.lineTo = bd.arrFrom.AddDate(0, 0, -1), bd.arrTo.AddDate(0, 0, maxW)
	bd.judgeCredits = len(peers) > 0 && peers[0].Connector == run.Provider
	for _, p := range peers {
		mr, ok := r.providers[p.Connector].(providers.MoneyReporter)
		if !ok {
			// Its payouts cannot be read: its credits would look unknown.
			r.logger.WarnContext(ctx, "reconcile: a connector of the bank account is not configured; its unmatched credits are not judged",
				"connector", p.Connector, "account", acct.Account)
			bd.judgeCredits = false
			continue
		}
		req := providers.ReportRequest{From: bd.arrFrom.Add(-payoutTransit), To: bd.arrTo.Add(oneDay)}
		err := mr.Payouts(ctx, req, func(po providers.Payout) error {
			y, m, dd := po.ArrivalDate.UTC().Date()
			arr := time.Date(y, m, dd, 0, 0, 0, 0, time.UTC)
			if !arr.Before(bd.arrFrom) && !arr.After(bd.arrTo) {
				bd.payouts = append(bd.payouts, bankPayout{Payout: po, connector: p.Connector, window: p.MatchWindowDays, arrival: arr})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("payouts of %s: %w", p.Connector, err)
		}
	}
	return bd, nil
}

// readCreditsSQL reads the account's credit lines booked in [$2, $3]
// (reversals are not payouts), in the order statements were imported.
const readCreditsSQL = `
	SELECT l.statement_id, s.statement_id, l.line, l.booking_date, l.amount_minor, l.currency, l.reference,
		l.counterparty, l.bank_reference
	FROM bank_statement_lines l JOIN bank_statements s ON s.id = l.statement_id
	WHERE l.account = $1 AND l.booking_date BETWEEN $2::date AND $3::date AND l.credit_debit = 'credit' AND NOT l.reversal
	ORDER BY l.statement_id, l.line`

// judgeBank is the bank step of the run, in its transaction: it matches
// bd's payouts to the account's credit lines, hands the findings to w and
// stores the run's bank summary. Nothing when bd is nil (no bank account).
func (r *Reconciler) judgeBank(ctx context.Context, tx pgx.Tx, run Run, bd *bankDay, w *findingWriter) error {
	if bd == nil {
		return nil
	}
	rows, _ := tx.Query(ctx, readCreditsSQL, bd.account.Account, bd.lineFrom.Format(time.DateOnly), bd.lineTo.Format(time.DateOnly))
	credits, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (bankCredit, error) {
		var c bankCredit
		err := row.Scan(&c.statement, &c.statementID, &c.line, &c.booking, &c.amount, &c.currency, &c.reference,
			&c.counterparty, &c.bkRef)
		c.booking = c.booking.UTC()
		return c, err
	})
	if err != nil {
		return fmt.Errorf("bank credits: %w", err)
	}
	m := matchBank(bd.payouts, credits)
	findings, summary := bd.judge(run.Provider, m)
	for _, f := range findings {
		if err := w.add(ctx, f); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET bank = $2 WHERE id = $1`, run.ID, summary); err != nil {
		return fmt.Errorf("store bank summary: %w", err)
	}
	return nil
}

// bankMatch is the matching of payouts to credit lines: lineOf[i] is the
// credit matched to payout i (-1 none), mismatchOf[i] the credit naming
// it with another amount (-1 none); taken[j] reports credit j used.
type bankMatch struct {
	payouts            []bankPayout
	credits            []bankCredit
	lineOf, mismatchOf []int
	taken              []bool
}

// expectedInBank reports a payout the bank should have credited.
func expectedInBank(p bankPayout) bool {
	return p.Status == providers.PayoutPaid || p.Status == providers.PayoutInTransit
}

// mayMatch reports a payout a credit may be of: one not failed or
// canceled (a pending payout whose arrival date passed may still have
// arrived).
func mayMatch(p bankPayout) bool { return expectedInBank(p) || p.Status == providers.PayoutPending }

// inWindowOf reports whether c is booked within p's window.
func inWindowOf(p bankPayout, c bankCredit) bool {
	return !c.booking.Before(p.arrival.Add(-oneDay)) && !c.booking.After(p.arrival.AddDate(0, 0, p.window))
}

// refRank ranks how c's reference names p: 0 equal (or the bank's
// reference equal), 1 contained (its reference or its id), 2 not at all.
func refRank(p bankPayout, c bankCredit) int {
	if ref := p.Reference; ref != "" {
		if strings.EqualFold(c.reference, ref) || strings.EqualFold(c.bkRef, ref) {
			return 0
		}
		if containsFold(c.reference, ref) || containsFold(c.bkRef, ref) {
			return 1
		}
	}
	if p.ID != "" && (containsFold(c.reference, p.ID) || containsFold(c.bkRef, p.ID)) {
		return 1
	}
	return 2
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToUpper(s), strings.ToUpper(sub))
}

func daysApart(a, b time.Time) int {
	d := int(a.Sub(b) / oneDay)
	if d < 0 {
		return -d
	}
	return d
}

// matchBank matches payouts to credits: every (payout, credit) pair of
// the same currency and amount within the payout's window is ranked by
// reference, then distance in days, then the payout's arrival and id and
// the credit's order, and the pairs are taken best first, each payout and
// credit once. Then each payout the bank should have credited but did not
// match takes, if there is one, the best unused credit within its window
// whose reference names it: an amount mismatch.
func matchBank(payouts []bankPayout, credits []bankCredit) bankMatch {
	m := bankMatch{payouts: payouts, credits: credits, lineOf: make([]int, len(payouts)),
		mismatchOf: make([]int, len(payouts)), taken: make([]bool, len(credits))}
	type key struct {
		currency string
		amount   int64
	}
	byKey := map[key][]int{}
	for j, c := range credits {
		byKey[key{c.currency, c.amount}] = append(byKey[key{c.currency, c.amount}], j)
	}
	type pair struct{ p, c, rank, dist int }
	var pairs []pair
	for i, p := range payouts {
		m.lineOf[i], m.mismatchOf[i] = -1, -1
		if !mayMatch(p) {
			continue
		}
		for _, j := range byKey[key{p.Currency, p.AmountMinor}] {
			if inWindowOf(p, credits[j]) {
				pairs = append(pairs, pair{i, j, refRank(p, credits[j]), daysApart(credits[j].booking, p.arrival)})
			}
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.dist, b.dist),
			payouts[a.p].arrival.Compare(payouts[b.p].arrival), cmp.Compare(payouts[a.p].ID, payouts[b.p].ID),
			cmp.Compare(a.p, b.p), cmp.Compare(a.c, b.c))
	})
	for _, pr := range pairs {
		if m.lineOf[pr.p] < 0 && !m.taken[pr.c] {
			m.lineOf[pr.p], m.taken[pr.c] = pr.c, true
		}
	}
	for i, p := range payouts {
		if m.lineOf[i] >= 0 || !expectedInBank(p) {
			continue
		}
		best, bestRank, bestDist := -1, 0, 0
		for j, c := range credits {
			if m.taken[j] || c.currency != p.Currency || !inWindowOf(p, c) {
				continue
			}
			rank, dist := refRank(p, c), daysApart(c.booking, p.arrival)
			if rank < 2 && (best < 0 || rank < bestRank || rank == bestRank && dist < bestDist) {
				best, bestRank, bestDist = j, rank, dist
			}
		}
		if best >= 0 {
			m.mismatchOf[i], m.taken[best] = best, true
		}
	}
	return m
}

// judge turns the matching into the findings of connector's run and its
// bank summary.
func (bd *bankDay) judge(connector string, m bankMatch) ([]finding, BankSummary) {
	sum := BankSummary{Account: bd.account.Account, ArrivalDate: bd.arrival.Format(time.DateOnly),
		MatchWindowDays: bd.account.MatchWindowDays, Currencies: map[string]*BankTotals{}}
	var out []finding
	for i, p := range m.payouts {
		if p.connector != connector || !p.arrival.Equal(bd.arrival) || !expectedInBank(p) {
			continue
		}
		t := sum.Currencies[p.Currency]
		if t == nil {
			t = &BankTotals{}
			sum.Currencies[p.Currency] = t
		}
		t.Payouts++
		t.PayoutsMinor += p.AmountMinor
		switch {
		case m.lineOf[i] >= 0:
			t.Matched++
			t.InBankMinor += m.credits[m.lineOf[i]].amount
		case m.mismatchOf[i] >= 0:
			t.Mismatched++
			out = append(out, bd.mismatchFinding(p, m.credits[m.mismatchOf[i]]))
		default:
			t.Missing++
			out = append(out, bd.missingFinding(p))
		}
	}
	if bd.judgeCredits {
		for j, c := range m.credits {
			if !m.taken[j] && c.booking.Equal(bd.arrival) {
				out = append(out, bd.unmatchedFinding(c, m.duplicateOf(c)))
			}
		}
	}
	return out, sum
}

// duplicate is a credit line for a payout already matched to another.
type duplicate struct {
	payout bankPayout
	line   bankCredit // the line it was matched to
}

// duplicateOf is the matched payout c would have matched had its line not
// been taken (same currency and amount, within its window, c's reference
// naming it or equal to its line's); nil none.
func (m bankMatch) duplicateOf(c bankCredit) *duplicate {
	for i, p := range m.payouts {
		j := m.lineOf[i]
		if j < 0 || p.Currency != c.currency || p.AmountMinor != c.amount || !inWindowOf(p, c) {
			continue
		}
		if refRank(p, c) < 2 || c.reference != "" && c.reference == m.credits[j].reference {
			return &duplicate{payout: p, line: m.credits[j]}
		}
	}
	return nil
}

func payoutDetail(p bankPayout, account string) map[string]any {
	return map[string]any{"payout_id": p.ID, "connector": p.connector, "status": p.Status,
		"arrival_date": p.arrival.Format(time.DateOnly), "reference": p.Reference, "account": account,
		"match_window_days": p.window}
}

func creditDetail(c bankCredit) map[string]any {
	return map[string]any{"bank_statement": c.statement, "statement_id": c.statementID, "line": c.line,
		"booking_date": c.booking.Format(time.DateOnly), "amount_minor": c.amount, "reference": c.reference,
		"counterparty": c.counterparty, "bank_reference": c.bkRef}
}

func payoutSubject(p bankPayout) string { return "payout:" + p.connector + ":" + p.ID }

func (bd *bankDay) missingFinding(p bankPayout) finding {
	ref := p.ID
	return finding{Category: PayoutMissingInBank, Field: "payout", Expected: itoa(p.AmountMinor), Actual: "absent",
		Currency: p.Currency, Ref: &ref, Detail: payoutDetail(p, bd.account.Account), subject: payoutSubject(p)}
}

func (bd *bankDay) mismatchFinding(p bankPayout, c bankCredit) finding {
	ref := p.ID
	d := c.amount - p.AmountMinor
	detail := payoutDetail(p, bd.account.Account)
	detail["direction"] = map[bool]string{true: "over", false: "under"}[d > 0]
	detail["line"] = creditDetail(c)
	return finding{Category: PayoutAmountMismatch, Field: "amount", Expected: itoa(p.AmountMinor), Actual: itoa(c.amount),
		Currency: p.Currency, Ref: &ref, Difference: &d, Detail: detail, subject: payoutSubject(p)}
}

// unmatchedFinding is the bank_credit_unmatched of c; dup, when set, is
// the payout it is a second credit of.
func (bd *bankDay) unmatchedFinding(c bankCredit, dup *duplicate) finding {
	detail := creditDetail(c)
	detail["account"] = bd.account.Account
	detail["reason"] = CreditUnknown
	if dup != nil {
		detail["reason"] = CreditDuplicate
		detail["duplicate_of"] = map[string]any{"payout_id": dup.payout.ID, "connector": dup.payout.connector,
			"bank_statement": dup.line.statement, "statement_id": dup.line.statementID, "line": dup.line.line}
	}
	return finding{Category: BankCreditUnmatched, Field: "credit", Expected: "a payout", Actual: itoa(c.amount),
		Currency: c.currency, Detail: detail,
		subject: fmt.Sprintf("bank_line:%s:%s:%d", bd.account.Account, c.statementID, c.line)}
}
