package reconcile

// Which bank account each connector pays out to (table
// connector_bank_accounts), and the window within which a payout's credit
// must be booked. The credit lines of an account belong to the connectors
// paying into it (bank.go). A setting of its own, not a field of the fee
// schedule: it is not a fee, and changing it does not make a new fee
// version.

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// DefaultMatchWindowDays is the match window of a connector whose
// setting gives none.
const DefaultMatchWindowDays = 3

// maxMatchWindowDays bounds the match window (the migration's check).
const maxMatchWindowDays = 14

// BankAccount is where a connector's payouts arrive.
type BankAccount struct {
	Connector string `json:"connector"`
	// Account is the account (NormalizeAccount: an IBAN or the bank's
	// account id, as bank statements name it).
	Account string `json:"account"`
	// MatchWindowDays is W: a payout arriving on day A is matched to a
	// credit booked from A − 1 to A + W, and the run of business date D
	// judges the payouts arriving on D − W.
	MatchWindowDays int       `json:"match_window_days"`
	UpdatedBy       string    `json:"updated_by"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// BankAccountInput sets a connector's bank account.
type BankAccountInput struct {
	Account string `json:"account"`
	// MatchWindowDays, 1 to 14; nil means DefaultMatchWindowDays.
	MatchWindowDays *int `json:"match_window_days"`
}

const bankAccountCols = `connector, account, match_window_days, updated_by, updated_at`

func scanBankAccount(row pgx.CollectableRow) (BankAccount, error) {
	var a BankAccount
	err := row.Scan(&a.Connector, &a.Account, &a.MatchWindowDays, &a.UpdatedBy, &a.UpdatedAt)
	a.UpdatedAt = a.UpdatedAt.UTC()
	return a, err
}

// SetBankAccount sets the account connector pays out to, replacing the
// one set before. Errors: not_found (no such connector), validation_failed
// (a connector that reports no payouts, account, match_window_days),
// internal.
func (r *Reconciler) SetBankAccount(ctx context.Context, connector string, in BankAccountInput, updatedBy string) (BankAccount, error) {
	if err := r.knownConnector(connector); err != nil {
		return BankAccount{}, err
	}
	if _, ok := r.providers[connector].(providers.MoneyReporter); !ok {
		return BankAccount{}, orchestrator.ParamError("connector", "connector %s reports no payouts to match", connector)
	}
	account, err := NormalizeAccount(in.Account)
	if err != nil {
		return BankAccount{}, orchestrator.ParamError("account", "account: %v", err)
	}
	window := DefaultMatchWindowDays
	if in.MatchWindowDays != nil {
		window = *in.MatchWindowDays
	}
	if window < 1 || window > maxMatchWindowDays {
		return BankAccount{}, orchestrator.ParamError("match_window_days", "match_window_days must be 1 to %d", maxMatchWindowDays)
	}
	if updatedBy == "" || !orchestrator.ValidText(updatedBy) || utf8.RuneCountInString(updatedBy) > 200 {
		return BankAccount{}, orchestrator.ParamError("updated_by", "updated_by must be 1 to 200 characters")
	}
	rows, _ := r.pool.Query(ctx, `
		INSERT INTO connector_bank_accounts (`+bankAccountCols+`) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (connector) DO UPDATE SET account = EXCLUDED.account,
			match_window_days = EXCLUDED.match_window_days, updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
		RETURNING `+bankAccountCols, connector, account, window, updatedBy, r.now())
	a, err := pgx.CollectExactlyOneRow(rows, scanBankAccount)
	if err != nil {
		return BankAccount{}, orchestrator.Internalf("set bank account of %s: %w", connector, err)
	}
	return a, nil
}

// BankAccountOf returns the account connector pays out to. Errors:
// not_found (no such connector, or none set), internal.
func (r *Reconciler) BankAccountOf(ctx context.Context, connector string) (BankAccount, error) {
	if err := r.knownConnector(connector); err != nil {
		return BankAccount{}, err
	}
	a, err := bankAccountOf(ctx, r.pool, connector)
	switch {
	case isNoRows(err):
		return BankAccount{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no bank account is set for %s", connector)
	case err != nil:
		return BankAccount{}, orchestrator.Internalf("bank account of %s: %w", connector, err)
	}
	return a, nil
}

// bankAccountOf reads connector's setting on q (pgx.ErrNoRows: none).
func bankAccountOf(ctx context.Context, q querier, connector string) (BankAccount, error) {
	rows, _ := q.Query(ctx, `SELECT `+bankAccountCols+` FROM connector_bank_accounts WHERE connector = $1`, connector)
	return pgx.CollectExactlyOneRow(rows, scanBankAccount)
}

// connectorsOf lists the connectors paying into account, by name.
func connectorsOf(ctx context.Context, q querier, account string) ([]BankAccount, error) {
	rows, _ := q.Query(ctx, `SELECT `+bankAccountCols+` FROM connector_bank_accounts WHERE account = $1 ORDER BY connector`,
		account)
	return pgx.CollectRows(rows, scanBankAccount)
}
