package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/orchestrator"
)

// MoneyCategories are the categories about the provider's money and the
// bank (settle.go, bank.go), those a day's summary counts.
var MoneyCategories = []string{FeeMismatch, PayoutUnexplained, PayoutItemUnknown, NotPaidOut, PayoutMissingInBank,
	PayoutAmountMismatch, BankCreditUnmatched}

// DaySummary is finance's page of a business day at a connector: a run's
// money by currency, what of it reached the bank and what is still open.
type DaySummary struct {
	Object       string `json:"object"`
	Provider     string `json:"provider"`
	BusinessDate string `json:"business_date"`
	RunID        int64  `json:"run_id"`
	Version      int    `json:"version"`
	// BankArrivalDate is the day whose payouts InBank is about (the
	// business date less the account's match window: by the end of the
	// business date they must all be booked); nil when the connector has
	// no bank account.
	BankArrivalDate *string `json:"bank_arrival_date"`
	// Currencies holds every currency the day moved money, had payouts
	// arriving in the bank or has a finding in.
	Currencies map[string]*CurrencySummary `json:"currencies"`
}

// CurrencySummary is a day's money in one currency, in minor units: the
// provider's settlement of the day (zero when it reports no money), the
// bank's side of the payouts arriving on the summary's BankArrivalDate,
// and the open discrepancies of each of MoneyCategories (every one
// present, 0 included).
type CurrencySummary struct {
	Settlement
	// BankPayoutsMinor is the payouts expected in the bank on the
	// arrival date, InBankMinor what the bank credited for them; both nil
	// without a bank account.
	BankPayoutsMinor *int64           `json:"bank_payouts_minor"`
	InBankMinor      *int64           `json:"in_bank_minor"`
	Open             map[string]int64 `json:"open"`
}

// latestSucceededSQL reads the latest succeeded version of a day's run.
const latestSucceededSQL = `SELECT ` + runCols + ` FROM reconciliation_runs
	WHERE provider = $1 AND business_date = $2::date AND status = 'succeeded'
	ORDER BY version DESC LIMIT 1`

// DaySummary summarises the latest succeeded run of (provider, date)
// (from the replica when it has caught up). Errors: validation_failed
// (provider or business_date missing or malformed, a date that has not
// begun), not_found (no succeeded run of the day).
func (r *Reconciler) DaySummary(ctx context.Context, provider, date string) (DaySummary, error) {
	// What is given is checked before what is missing, so that the error
	// names the parameter that is wrong.
	if len(provider) > 100 {
		return DaySummary{}, orchestrator.ParamError("provider", "provider must be up to 100 characters")
	}
	if date != "" {
		d, err := ParseDate(date)
		if err != nil {
			return DaySummary{}, orchestrator.ParamError("business_date", "business_date must be a day as YYYY-MM-DD, from 2000-01-01")
		}
		if y, m, dd := d.Date(); !time.Date(y, m, dd, 0, 0, 0, 0, r.loc).Before(r.now()) {
			return DaySummary{}, orchestrator.ParamError("business_date", "%s has not begun yet in %s", date, r.loc)
		}
	}
	switch {
	case provider == "":
		return DaySummary{}, orchestrator.ParamError("provider", "provider is required")
	case date == "":
		return DaySummary{}, orchestrator.ParamError("business_date", "business_date is required")
	}
	var sum DaySummary
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		rows, _ := conn.Query(ctx, latestSucceededSQL, provider, date)
		run, err := pgx.CollectExactlyOneRow(rows, scanRun)
		if errors.Is(err, pgx.ErrNoRows) {
			return orchestrator.Errorf(orchestrator.CodeNotFound, "no succeeded reconciliation run of %s on %s", provider, date)
		}
		if err != nil {
			return fmt.Errorf("reconcile: summary: %w", err)
		}
		sum, err = summaryOf(ctx, conn, run)
		return err
	})
	return sum, err
}

// RunSummary summarises run, whichever its version (from the replica
// when it has caught up).
func (r *Reconciler) RunSummary(ctx context.Context, run Run) (DaySummary, error) {
	var sum DaySummary
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		var err error
		sum, err = summaryOf(ctx, conn, run)
		return err
	})
	return sum, err
}

// openMoneySQL counts the run's open discrepancies of the categories $2
// by currency.
const openMoneySQL = `
	SELECT currency, category, count(*) FROM reconciliation_discrepancies
	WHERE run_id = $1 AND resolved_at IS NULL AND category = ANY($2)
	GROUP BY currency, category`

// summaryOf is run's summary, its open discrepancies counted on q.
func summaryOf(ctx context.Context, q querier, run Run) (DaySummary, error) {
	sum := DaySummary{Object: "reconciliation_summary", Provider: run.Provider, BusinessDate: run.BusinessDate,
		RunID: run.ID, Version: run.Version, Currencies: map[string]*CurrencySummary{}}
	cur := func(c string) *CurrencySummary {
		cs := sum.Currencies[c]
		if cs == nil {
			cs = &CurrencySummary{Open: map[string]int64{}}
			for _, k := range MoneyCategories {
				cs.Open[k] = 0
			}
			if run.Bank != nil {
				cs.BankPayoutsMinor, cs.InBankMinor = new(int64), new(int64)
			}
			sum.Currencies[c] = cs
		}
		return cs
	}
	for c, s := range run.Settlement {
		cur(c).Settlement = *s
	}
	if run.Bank != nil {
		sum.BankArrivalDate = &run.Bank.ArrivalDate
		for c, b := range run.Bank.Currencies {
			cs := cur(c)
			*cs.BankPayoutsMinor, *cs.InBankMinor = b.PayoutsMinor, b.InBankMinor
		}
	}
	rows, _ := q.Query(ctx, openMoneySQL, run.ID, MoneyCategories)
	var (
		c, category string
		n           int64
	)
	_, err := pgx.ForEachRow(rows, []any{&c, &category, &n}, func() error {
		cur(c).Open[category] = n
		return nil
	})
	if err != nil {
		return DaySummary{}, fmt.Errorf("reconcile: summary: %w", err)
	}
	return sum, nil
}

// SortedCurrencies are the summary's currencies in order, for pages.
func (s DaySummary) SortedCurrencies() []string {
	out := make([]string, 0, len(s.Currencies))
	for c := range s.Currencies {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
