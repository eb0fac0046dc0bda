package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// staged is what stage loaded, and the provider rows it could not load.
type staged struct {
	// invalid holds one invalid_provider_row finding per bad row of the
	// day (copies of one folded into it); invalidInWindow counts the bad
	// rows they stand for.
	invalid         []finding
	invalidInWindow int64
	index           map[string]int // fingerprint → invalid
	// money is what settlement knows of the connector's money, its own
	// staged apart (settle.go); nil when the provider reports none.
	money *moneyTerms
	// bank is the day's payouts for the bank step (bank.go), read with
	// the provider's record; nil when the connector has no bank account.
	bank *bankDay
}

// addInvalid keeps f, or counts it as one more copy of a finding kept.
func (s *staged) addInvalid(f finding) {
	if s.index == nil {
		s.index = map[string]int{}
	}
	if i, seen := s.index[f.fingerprint()]; seen {
		copies, _ := s.invalid[i].Detail["copies"].(int)
		s.invalid[i].Detail["copies"] = max(copies, 1) + 1
		return
	}
	s.index[f.fingerprint()] = len(s.invalid)
	s.invalid = append(s.invalid, f)
}

// stage streams the provider's record of [gfrom, gto) into
// reconciliation_provider_rows with COPY on conn, never holding it in
// memory. A row that cannot be stored or compared does not fail the day:
// it is left out of staging and, when it belongs to [from, to) (or its
// times are what is wrong with it), becomes an invalid_provider_row
// finding. A row whose only fault is in its parts is staged without them
// (its totals are still compared, as a provider's that reports none) and
// its parts are an invalid_provider_row finding (field parts).
func (r *Reconciler) stage(ctx context.Context, conn *pgx.Conn, prov providers.Provider, runID int64,
	from, to, gfrom, gto time.Time) (staged, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rowsCh := make(chan providers.ReportRow, 1024)
	errCh := make(chan error, 1)
	go func() {
		defer close(rowsCh)
		errCh <- prov.Report(ctx, providers.ReportRequest{From: gfrom, To: gto}, func(row providers.ReportRow) error {
			select {
			case rowsCh <- row:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	var (
		out staged
		seq int64
	)
	src := pgx.CopyFromFunc(func() ([]any, error) {
		for row := range rowsCh {
			seq++
			if bad, ok := checkRow(row); !ok {
				if !inWindow(row.CreatedAt, from, to) && !inWindow(row.UpdatedAt, from, to) && bad.field != "created_at" &&
					bad.field != "updated_at" {
					continue // the neighbouring day's run reports it
				}
				out.invalidInWindow++
				out.addInvalid(invalidRowFinding(row, seq, bad))
				continue
			}
			if bad, ok := checkParts(row.Parts); !ok {
				if inWindow(row.CreatedAt, from, to) || inWindow(row.UpdatedAt, from, to) {
					out.addInvalid(invalidRowFinding(row, seq, bad))
				}
				row.Parts = nil
			}
			parts, err := stagedParts(row)
			if err != nil {
				return nil, fmt.Errorf("row %d: parts: %w", seq, err)
			}
			return []any{runID, seq, row.Ref, row.PaymentID, string(row.Status), row.AmountMinor, row.CapturedMinor,
				row.RefundedMinor, strings.ToUpper(row.Currency), row.CreatedAt, row.UpdatedAt, parts}, nil
		}
		return nil, nil
	})
	_, copyErr := conn.CopyFrom(ctx, pgx.Identifier{"reconciliation_provider_rows"},
		[]string{"run_id", "seq", "ref", "payment_id", "status", "amount_minor", "captured_minor", "refunded_minor",
			"currency", "created_at", "updated_at", "parts"}, src)
	if copyErr != nil {
		cancel()
		for range rowsCh { // let the reader finish
		}
		<-errCh
		return staged{}, fmt.Errorf("stage provider rows: %w", copyErr)
	}
	if err := <-errCh; err != nil {
		return staged{}, err
	}
	return out, nil
}

// rowProblem is what is wrong with a provider row: the first bad field,
// what it should be, and why it is not.
type rowProblem struct {
	field, expected, reason string
	actual                  string
}

// Limits of a provider row's text fields, in bytes.
const (
	maxRefLen    = 255
	maxStatusLen = 64
)

// Provider times must fall in these years to be compared.
const minRowYear, maxRowYear = 1970, 9999

// checkRow reports the first problem of row that keeps it from being
// stored or compared; ok is true when there is none.
func checkRow(row providers.ReportRow) (rowProblem, bool) {
	const textWant = "UTF-8 text without NUL bytes"
	for _, t := range []struct {
		field, value string
		max          int
	}{{"ref", row.Ref, maxRefLen}, {"payment_id", row.PaymentID, maxRefLen}, {"status", string(row.Status), maxStatusLen}} {
		switch {
		case !utf8.ValidString(t.value):
			return rowProblem{field: t.field, expected: textWant, reason: "not valid UTF-8", actual: printable(t.value)}, false
		case strings.IndexByte(t.value, 0) >= 0:
			return rowProblem{field: t.field, expected: textWant, reason: "contains a NUL byte", actual: printable(t.value)}, false
		case len(t.value) > t.max:
			return rowProblem{field: t.field, expected: fmt.Sprintf("at most %d bytes", t.max),
				reason: fmt.Sprintf("%d bytes long", len(t.value)), actual: printable(t.value)}, false
		case t.value == "" && t.field != "payment_id":
			return rowProblem{field: t.field, expected: "a value", reason: "empty"}, false
		}
	}
	if !currencyCode(row.Currency) {
		return rowProblem{field: "currency", expected: "an ISO 4217 code of three letters", reason: "not a currency code",
			actual: printable(row.Currency)}, false
	}
	for _, a := range []struct {
		field string
		v     int64
	}{{"amount_minor", row.AmountMinor}, {"captured_minor", row.CapturedMinor}, {"refunded_minor", row.RefundedMinor}} {
		if a.v < 0 {
			return rowProblem{field: a.field, expected: "an amount of 0 or more", reason: "negative", actual: itoa(a.v)}, false
		}
	}
	for _, t := range []struct {
		field string
		v     time.Time
	}{{"created_at", row.CreatedAt}, {"updated_at", row.UpdatedAt}} {
		if y := t.v.UTC().Year(); y < minRowYear || y > maxRowYear {
			return rowProblem{field: t.field, expected: fmt.Sprintf("a time from %d to %d", minRowYear, maxRowYear),
				reason: "out of range", actual: t.v.UTC().Format(time.RFC3339)}, false
		}
	}
	return rowProblem{}, true
}

func currencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		c := s[i] | 0x20 // lower case
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// printable makes provider text safe to store and show: invalid UTF-8 and
// NUL bytes become U+FFFD, and it is cut to maxRefLen bytes (on a rune
// boundary, marked with an ellipsis).
func printable(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= maxRefLen {
		return s
	}
	cut := maxRefLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// invalidRowFinding is the discrepancy for the seq-th row of the report,
// which has problem bad. It is about the row's reference, made printable,
// or about its position when it has none.
func invalidRowFinding(row providers.ReportRow, seq int64, bad rowProblem) finding {
	f := finding{Category: InvalidProviderRow, Field: bad.field, Expected: bad.expected, Actual: bad.actual,
		Detail: map[string]any{"reason": bad.reason, "row": seq}}
	if currencyCode(row.Currency) {
		f.Currency = strings.ToUpper(row.Currency)
	}
	if ref := printable(row.Ref); ref != "" {
		f.Ref = &ref
	} else {
		f.subject = "row:" + itoa(seq)
	}
	if row.PaymentID != "" {
		f.Detail["provider_payment_id"] = printable(row.PaymentID)
	}
	return f
}
