package reconcile

// Reading bank statements: ISO 20022 camt.053 (any version: its elements
// are matched by their local names, so 001.02 to 001.13 read alike) and a
// simple CSV. Amounts are decimal strings, turned into minor units by the
// currency's exponent exactly (no float ever holds one). A file that
// cannot be read whole is refused naming where: the CSV line and column,
// or the camt entry and element.
//
// github.com/moov-io/iso20022 (v0.2.1) has camt.053 types, but they do not
// fit: amounts are float64 (ActiveOrHistoricCurrencyAndAmount.Value), so
// "0.29" is not 29 minor units exactly and "10.001" cannot be told from
// "10.0010000000000001"; and only camt.053.001.08 is there, while banks
// mostly send 001.02 and 001.04. encoding/xml with the few elements used
// reads every version; it expands no entity a document declares (an
// entity other than the five of XML is an error), so an entity bomb is
// refused at once.

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/payorch/payorch/orchestrator"
)

// Formats of a bank statement.
const (
	FormatCAMT053 = "camt.053"
	FormatCSV     = "csv"
)

// Credit or debit, of a statement line.
const (
	Credit = "credit"
	Debit  = "debit"
)

// Limits of a statement's contents.
const (
	maxStatementLines = 500_000
	maxLineText       = 500 // runes of a reference, counterparty or bank reference
	maxStatementIDLen = 140
	maxAccountLen     = 34 // an IBAN's, and camt's Othr/Id (Max34Text)
	// maxLineAmount bounds a line's amount in minor units: far above any
	// payout, and low enough that the totals of a statement of
	// maxStatementLines lines cannot overflow int64.
	maxLineAmount = 1_000_000_000_000
)

// ParsedStatement is a statement as read from a file, before it is stored.
type ParsedStatement struct {
	Format string
	// Account is the account it is of (camt: Acct/Id/IBAN or Othr/Id;
	// CSV: given with the upload), normalized by NormalizeAccount.
	Account string
	// StatementID is the bank's id of the statement (camt: Stmt/Id); ""
	// when the file has none (CSV), and then the content's hash names it.
	StatementID string
	// ContentSHA256 is the hex SHA-256 of the file (ParseStatement).
	ContentSHA256 string
	Lines         []StatementLine
}

// StatementLine is one booked entry of a statement.
type StatementLine struct {
	// Line is where the entry is in its file: a CSV file's line number
	// (the header is line 1), a camt statement's entry number (Ntry, from
	// 1).
	Line         int     `json:"line"`
	BookingDate  string  `json:"booking_date"`
	ValueDate    *string `json:"value_date"`
	AmountMinor  int64   `json:"amount_minor"`
	Currency     string  `json:"currency"`
	CreditDebit  string  `json:"credit_debit"`
	Reversal     bool    `json:"reversal"`
	Reference    string  `json:"reference"`
	Counterparty string  `json:"counterparty"`
	// BankReference is the bank's own reference of the entry (camt:
	// AcctSvcrRef, else NtryRef).
	BankReference string `json:"bank_reference"`
}

// lineError is a refusal of a statement naming where it is wrong: param
// is the place (CSV: line[N].column; camt: Stmt.Ntry[N].Element), what is
// said is for people.
func lineError(param, format string, args ...any) error {
	return orchestrator.ParamError(param, format, args...)
}

// shown is v for an error message: quoted, printable, at most 40
// characters.
func shown(v string) string {
	if utf8.RuneCountInString(v) > 40 {
		v = string([]rune(v)[:40]) + "…"
	}
	return strconv.QuoteToASCII(v)
}

// ParseAmount turns a decimal amount (digits, at most one '.', as many
// decimals as currency's exponent at most, no sign) into minor units,
// exactly. It returns what is wrong in words otherwise.
func ParseAmount(s, currency string) (int64, error) {
	exp, err := orchestrator.ValidateCurrency(currency)
	if err != nil {
		return 0, fmt.Errorf("currency %s is not an ISO 4217 currency in upper case", shown(currency))
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || !isDigits(whole) || dot && (frac == "" || !isDigits(frac)) {
		return 0, fmt.Errorf("amount %s is not a decimal number such as 1234.56", shown(s))
	}
	if len(frac) > exp {
		return 0, fmt.Errorf("amount %s has %d decimals; %s has %d", shown(s), len(frac), currency, exp)
	}
	whole = strings.TrimLeft(whole, "0")
	digits := whole + frac + strings.Repeat("0", exp-len(frac))
	if len(digits) > 16 {
		return 0, fmt.Errorf("amount %s is too large", shown(s))
	}
	n, err := strconv.ParseInt("0"+digits, 10, 64)
	if err != nil || n > maxLineAmount {
		return 0, fmt.Errorf("amount %s is too large", shown(s))
	}
	return n, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// NormalizeAccount is an account identifier as stored and compared:
// spaces removed, letters in upper case (an IBAN is printed in groups of
// four). Errors: what is wrong, in words.
func NormalizeAccount(s string) (string, error) {
	a := strings.ToUpper(strings.Join(strings.Fields(s), ""))
	if a == "" || len(a) > maxAccountLen {
		return "", fmt.Errorf("an account must be 1 to %d characters (an IBAN, or the bank's account id)", maxAccountLen)
	}
	for _, c := range a {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-./:_", c)) {
			return "", fmt.Errorf("an account may hold letters, digits and - . / : _ only")
		}
	}
	return a, nil
}

// checkText checks free text of a line (a reference, a counterparty):
// storable and not too long; it returns it trimmed.
func checkText(v, param string) (string, error) {
	v = strings.TrimSpace(v)
	if !orchestrator.ValidText(v) {
		return "", lineError(param, "%s must be UTF-8 text without NUL characters", param)
	}
	if utf8.RuneCountInString(v) > maxLineText {
		return "", lineError(param, "%s is longer than %d characters", param, maxLineText)
	}
	return v, nil
}

// parseDay reads a date (YYYY-MM-DD) from 2000 to 9999.
func parseDay(s string) (string, bool) {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil || d.Before(minDate) || d.After(maxDate) {
		return "", false
	}
	return d.Format(time.DateOnly), true
}

// The columns of a CSV statement.
const (
	colBookingDate   = "booking_date"
	colValueDate     = "value_date"
	colAmount        = "amount"
	colCurrency      = "currency"
	colCreditDebit   = "credit_debit"
	colReference     = "reference"
	colCounterparty  = "counterparty"
	colBankReference = "bank_reference"
)

var (
	csvColumns  = []string{colBookingDate, colValueDate, colAmount, colCurrency, colCreditDebit, colReference, colCounterparty, colBankReference}
	csvRequired = []string{colBookingDate, colAmount, colCurrency, colCreditDebit}
)

// ParseCSV reads a CSV statement: a header naming its columns (any order;
// booking_date, amount, currency and credit_debit required; value_date,
// reference, counterparty and bank_reference optional), then one line per
// entry. Amounts are positive decimals with '.' (credit_debit says the
// direction: credit or debit, CRDT or DBIT). A UTF-8 byte order mark is
// skipped; blank lines are ignored. Errors: validation_failed naming
// line[N].column.
func ParseCSV(raw []byte) ([]StatementLine, error) {
	raw = bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(raw) || bytes.IndexByte(raw, 0) >= 0 {
		return nil, lineError("body", "a CSV statement must be UTF-8 text without NUL characters")
	}
	r := csv.NewReader(bytes.NewReader(raw))
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return nil, csvError(err, "the header")
	}
	cols, err := csvHeader(header)
	if err != nil {
		return nil, err
	}
	var lines []StatementLine
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(err, "")
		}
		n, _ := r.FieldPos(0)
		if len(lines) == maxStatementLines {
			return nil, lineError(fmt.Sprintf("line[%d]", n), "a statement may hold at most %d lines", maxStatementLines)
		}
		l, err := csvLine(n, rec, cols)
		if err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// csvError names where encoding/csv stopped.
func csvError(err error, what string) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return lineError(fmt.Sprintf("line[%d]", pe.Line), "line %d, column %d: %v", pe.Line, pe.Column, pe.Err)
	}
	if errors.Is(err, io.EOF) {
		return lineError("line[1]", "the CSV statement is empty: it needs a header line")
	}
	return lineError("body", "%s could not be read", what)
}

// csvHeader maps each known column to its index.
func csvHeader(header []string) (map[string]int, error) {
	cols := map[string]int{}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		known := false
		for _, c := range csvColumns {
			known = known || c == h
		}
		if !known {
			return nil, lineError(fmt.Sprintf("line[1].%s", orchestrator.FieldName(h)), "unknown column %s; the columns are %s",
				shown(h), strings.Join(csvColumns, ", "))
		}
		if _, dup := cols[h]; dup {
			return nil, lineError("line[1]."+h, "column %s appears twice", h)
		}
		cols[h] = i
	}
	for _, c := range csvRequired {
		if _, ok := cols[c]; !ok {
			return nil, lineError("line[1]."+c, "the header lacks column %s", c)
		}
	}
	return cols, nil
}

// csvLine reads line n of a CSV statement.
func csvLine(n int, rec []string, cols map[string]int) (StatementLine, error) {
	get := func(c string) string {
		if i, ok := cols[c]; ok {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	at := func(c string) string { return fmt.Sprintf("line[%d].%s", n, c) }
	l := StatementLine{Line: n, Currency: get(colCurrency)}
	var ok bool
	if l.BookingDate, ok = parseDay(get(colBookingDate)); !ok {
		return l, lineError(at(colBookingDate), "line %d: booking_date must be a date (YYYY-MM-DD)", n)
	}
	if v := get(colValueDate); v != "" {
		d, ok := parseDay(v)
		if !ok {
			return l, lineError(at(colValueDate), "line %d: value_date must be a date (YYYY-MM-DD) or empty", n)
		}
		l.ValueDate = &d
	}
	if _, err := orchestrator.ValidateCurrency(l.Currency); err != nil {
		return l, lineError(at(colCurrency), "line %d: currency %s is not an ISO 4217 currency in upper case", n, shown(l.Currency))
	}
	amount, err := ParseAmount(get(colAmount), l.Currency)
	if err != nil {
		return l, lineError(at(colAmount), "line %d: %v", n, err)
	}
	l.AmountMinor = amount
	switch strings.ToUpper(get(colCreditDebit)) {
	case "CREDIT", "CRDT":
		l.CreditDebit = Credit
	case "DEBIT", "DBIT":
		l.CreditDebit = Debit
	default:
		return l, lineError(at(colCreditDebit), "line %d: credit_debit must be credit or debit", n)
	}
	for _, f := range []struct {
		col string
		dst *string
	}{{colReference, &l.Reference}, {colCounterparty, &l.Counterparty}, {colBankReference, &l.BankReference}} {
		if *f.dst, err = checkText(get(f.col), at(f.col)); err != nil {
			return l, err
		}
	}
	return l, nil
}
