package reconcile

// Bank statements: finance uploads the bank's statement of an account
// (camt.053 or CSV, bankparse.go); it is stored whole with its lines in
// one transaction, once (the same statement id of the account, or the
// same content, is the statement already stored). The daily run matches
// the account's credit lines to the payouts of the connectors paying into
// it (bank.go).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/orchestrator"
)

// BankStatement is a stored statement (without its lines).
type BankStatement struct {
	ID     int64  `json:"id"`
	Object string `json:"object"`
	// Account is the account it is of (NormalizeAccount).
	Account string `json:"account"`
	// StatementID is the bank's id of the statement, or "sha256:" and
	// its content's hash when the file has none.
	StatementID   string `json:"statement_id"`
	Format        string `json:"format"`
	ContentSHA256 string `json:"content_sha256"`
	// FromDate and ToDate are its first and last booking dates (null
	// when it has no booked line).
	FromDate  *string `json:"from_date"`
	ToDate    *string `json:"to_date"`
	LineCount int     `json:"line_count"`
	// Totals are its credits and debits per currency.
	Totals    map[string]*StatementTotals `json:"totals"`
	CreatedBy string                      `json:"created_by"`
	CreatedAt time.Time                   `json:"created_at"`
}

// StatementTotals are the credits and debits of a statement in one
// currency (reversals included as booked), in minor units.
type StatementTotals struct {
	Credits     int64 `json:"credits"`
	CreditMinor int64 `json:"credit_minor"`
	Debits      int64 `json:"debits"`
	DebitMinor  int64 `json:"debit_minor"`
}

// StatementUpload is a statement file as uploaded.
type StatementUpload struct {
	Format string
	Raw    []byte
	// Account is the account a CSV statement is of (required then); for a
	// camt.053 statement, which names its own, it may be given to check
	// the file is of that account.
	Account string
	// StatementID names a CSV statement (optional: its content's hash
	// does otherwise); a camt.053 statement has its own.
	StatementID string
}

// ParseStatement reads an upload whole, before anything is stored.
// Errors: validation_failed naming the line (CSV: line[N].column) or
// entry (camt: Stmt.Ntry[N].Element) and what is wrong, or the parameter
// (account, statement_id).
func ParseStatement(u StatementUpload) (ParsedStatement, error) {
	var p ParsedStatement
	account := ""
	if u.Account != "" {
		a, err := NormalizeAccount(u.Account)
		if err != nil {
			return p, orchestrator.ParamError("account", "account: %v", err)
		}
		account = a
	}
	switch u.Format {
	case FormatCAMT053:
		if u.StatementID != "" {
			return p, orchestrator.ParamError("statement_id", "a camt.053 statement has its own id (Stmt/Id)")
		}
		var err error
		if p, err = ParseCAMT053(u.Raw); err != nil {
			return p, err
		}
		if account != "" && account != p.Account {
			return p, orchestrator.ParamError("account", "the statement is of account %s, not %s", p.Account, account)
		}
	case FormatCSV:
		if account == "" {
			return p, orchestrator.ParamError("account", "a CSV statement needs ?account= (the IBAN or account id)")
		}
		if u.StatementID != "" && (!orchestrator.ValidText(u.StatementID) || utf8.RuneCountInString(u.StatementID) > maxStatementIDLen) {
			return p, orchestrator.ParamError("statement_id", "statement_id must be 1 to %d characters", maxStatementIDLen)
		}
		lines, err := ParseCSV(u.Raw)
		if err != nil {
			return p, err
		}
		p = ParsedStatement{Format: FormatCSV, Account: account, StatementID: u.StatementID, Lines: lines}
	default:
		return p, orchestrator.ParamError("Content-Type", "a statement is application/xml (camt.053) or text/csv")
	}
	sum := sha256.Sum256(u.Raw)
	p.ContentSHA256 = hex.EncodeToString(sum[:])
	if p.StatementID == "" {
		p.StatementID = "sha256:" + p.ContentSHA256
	}
	return p, nil
}

// totals adds up p's lines.
func (p ParsedStatement) totals() (map[string]*StatementTotals, *string, *string) {
	totals := map[string]*StatementTotals{}
	var from, to *string
	for i := range p.Lines {
		l := &p.Lines[i]
		t := totals[l.Currency]
		if t == nil {
			t = &StatementTotals{}
			totals[l.Currency] = t
		}
		if l.CreditDebit == Credit {
			t.Credits++
			t.CreditMinor += l.AmountMinor
		} else {
			t.Debits++
			t.DebitMinor += l.AmountMinor
		}
		if from == nil || l.BookingDate < *from {
			from = &l.BookingDate
		}
		if to == nil || l.BookingDate > *to {
			to = &l.BookingDate
		}
	}
	return totals, from, to
}

const statementCols = `id, account, statement_id, format, content_sha256, from_date::text, to_date::text, line_count,
	totals, created_by, created_at`

func scanStatement(row pgx.CollectableRow) (BankStatement, error) {
	var s BankStatement
	err := row.Scan(&s.ID, &s.Account, &s.StatementID, &s.Format, &s.ContentSHA256, &s.FromDate, &s.ToDate, &s.LineCount,
		&s.Totals, &s.CreatedBy, &s.CreatedAt)
	s.Object = "bank_statement"
	s.CreatedAt = s.CreatedAt.UTC()
	if s.Totals == nil {
		s.Totals = map[string]*StatementTotals{}
	}
	return s, err
}

// ImportStatement stores p with its lines, all or nothing, unless its
// account already has it: the same statement id with the same content is
// answered with the statement stored (created false), so an upload is
// safe to repeat. Errors: validation_failed (created_by), conflict (the
// account has a statement of that id with other content), internal.
func (r *Reconciler) ImportStatement(ctx context.Context, p ParsedStatement, createdBy string) (BankStatement, bool, error) {
	if createdBy == "" || !orchestrator.ValidText(createdBy) || utf8.RuneCountInString(createdBy) > 200 {
		return BankStatement{}, false, orchestrator.ParamError("created_by", "created_by must be 1 to 200 characters")
	}
	st, created, err := r.importOnce(ctx, p, createdBy)
	if isUniqueViolation(err) {
		// The same statement was imported concurrently: answer it.
		st, created, err = r.importOnce(ctx, p, createdBy)
	}
	if isUniqueViolation(err) {
		return BankStatement{}, false, orchestrator.Internalf("import bank statement: %w", err)
	}
	return st, created, err
}

// existingStatementSQL finds the account's statement of the same id or
// content.
const existingStatementSQL = `SELECT ` + statementCols + ` FROM bank_statements
	WHERE account = $1 AND (statement_id = $2 OR content_sha256 = $3) ORDER BY id LIMIT 1`

const insertStatementSQL = `
	INSERT INTO bank_statements (account, statement_id, format, content_sha256, from_date, to_date, line_count, totals,
		created_by, created_at)
	VALUES ($1, $2, $3, $4, $5::date, $6::date, $7, $8, $9, $10)
	RETURNING ` + statementCols

func (r *Reconciler) importOnce(ctx context.Context, p ParsedStatement, createdBy string) (BankStatement, bool, error) {
	var st BankStatement
	created := false
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, existingStatementSQL, p.Account, p.StatementID, p.ContentSHA256)
		old, err := pgx.CollectRows(rows, scanStatement)
		if err != nil {
			return err
		}
		if len(old) > 0 {
			st = old[0]
			if st.ContentSHA256 != p.ContentSHA256 {
				return orchestrator.Errorf(orchestrator.CodeConflict,
					"account %s already has statement %s (bank statement %d) with other content", p.Account, p.StatementID, st.ID)
			}
			return nil
		}
		totals, from, to := p.totals()
		doc, err := json.Marshal(totals)
		if err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, insertStatementSQL, p.Account, p.StatementID, p.Format, p.ContentSHA256, from, to,
			len(p.Lines), doc, createdBy, r.now())
		if st, err = pgx.CollectExactlyOneRow(rows, scanStatement); err != nil {
			return err
		}
		created = true
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"bank_statement_lines"},
			[]string{"statement_id", "line", "account", "booking_date", "value_date", "amount_minor", "currency",
				"credit_debit", "reversal", "reference", "counterparty", "bank_reference"},
			pgx.CopyFromSlice(len(p.Lines), func(i int) ([]any, error) {
				l := p.Lines[i]
				return []any{st.ID, l.Line, p.Account, l.BookingDate, l.ValueDate, l.AmountMinor, l.Currency,
					l.CreditDebit, l.Reversal, l.Reference, l.Counterparty, l.BankReference}, nil
			}))
		return err
	})
	if err != nil {
		if orchestrator.ErrorCode(err) == orchestrator.CodeConflict || isUniqueViolation(err) {
			return BankStatement{}, false, err
		}
		return BankStatement{}, false, orchestrator.Internalf("import bank statement: %w", err)
	}
	return st, created, nil
}

// StatementFilter selects statements, newest first.
type StatementFilter struct {
	// Account, when set, is the account (normalized) they are of.
	Account string
	Limit   int
	// StartingAfter is the id of the last statement of the previous page.
	StartingAfter int64
}

// ListStatements lists statements and whether more follow. Errors:
// validation_failed (account), internal.
func (r *Reconciler) ListStatements(ctx context.Context, f StatementFilter) ([]BankStatement, bool, error) {
	if f.Limit <= 0 || f.Limit > 100 {
		f.Limit = 20
	}
	if f.Account != "" {
		a, err := NormalizeAccount(f.Account)
		if err != nil {
			return nil, false, orchestrator.ParamError("account", "account: %v", err)
		}
		f.Account = a
	}
	q := `SELECT ` + statementCols + ` FROM bank_statements
		WHERE ($1 = '' OR account = $1) AND ($2::bigint = 0 OR id < $2) ORDER BY id DESC LIMIT $3`
	var out []BankStatement
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		rows, _ := conn.Query(ctx, q, f.Account, f.StartingAfter, f.Limit+1)
		var err error
		out, err = pgx.CollectRows(rows, scanStatement)
		return err
	})
	if err != nil {
		return nil, false, orchestrator.Internalf("list bank statements: %w", err)
	}
	more := len(out) > f.Limit
	if more {
		out = out[:f.Limit]
	}
	return out, more, nil
}

// GetStatement reads one statement and a page of its lines, in file
// order: limit (1 to 1000, 0 meaning 100) lines after line number
// startingAfter; more reports whether others follow. Errors: not_found,
// internal.
func (r *Reconciler) GetStatement(ctx context.Context, id int64, limit, startingAfter int) (BankStatement, []StatementLine, bool, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	var st BankStatement
	var lines []StatementLine
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		rows, _ := conn.Query(ctx, `SELECT `+statementCols+` FROM bank_statements WHERE id = $1`, id)
		var err error
		if st, err = pgx.CollectExactlyOneRow(rows, scanStatement); err != nil {
			return err
		}
		rows, _ = conn.Query(ctx, `
			SELECT line, booking_date::text, value_date::text, amount_minor, currency, credit_debit, reversal, reference,
				counterparty, bank_reference
			FROM bank_statement_lines WHERE statement_id = $1 AND line > $2 ORDER BY line LIMIT $3`, id, startingAfter, limit+1)
		lines, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (StatementLine, error) {
			var l StatementLine
			err := row.Scan(&l.Line, &l.BookingDate, &l.ValueDate, &l.AmountMinor, &l.Currency, &l.CreditDebit, &l.Reversal,
				&l.Reference, &l.Counterparty, &l.BankReference)
			return l, err
		})
		return err
	})
	if isNoRows(err) {
		return BankStatement{}, nil, false, orchestrator.Errorf(orchestrator.CodeNotFound, "no bank statement %d", id)
	}
	if err != nil {
		return BankStatement{}, nil, false, orchestrator.Internalf("bank statement %d: %w", id, err)
	}
	more := len(lines) > limit
	if more {
		lines = lines[:limit]
	}
	if lines == nil {
		lines = []StatementLine{}
	}
	return st, lines, more, nil
}
