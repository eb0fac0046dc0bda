package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// Bank statements matched to the fake's payouts, over HTTP, on a real
// database: the captures of 2026-11-30 are paid out at T+2 (created
// 2026-12-02, arriving 2026-12-03); with a match window of 3 days the run
// of 2026-12-06 judges them.
var (
	bankArrival = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	bankRunDay  = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	bankRunAt   = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
)

const (
	ibanClean   = "DE89370400440532013000"
	ibanPlanted = "GB33BUKB20201555555555"
)

// minorText writes amount (minor units of currency) as a bank writes it.
func minorText(t *testing.T, amount int64, currency string) string {
	t.Helper()
	exp, err := orchestrator.ValidateCurrency(currency)
	if err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprintf("%0*d", exp+1, amount)
	if exp == 0 {
		return s
	}
	return s[:len(s)-exp] + "." + s[len(s)-exp:]
}

// stmtLine is a line of a statement the test writes.
type stmtLine struct {
	booking          time.Time
	amount           int64
	currency, dc     string
	reference, bkRef string
}

func creditFor(p providers.Payout) stmtLine {
	return stmtLine{booking: p.ArrivalDate.UTC(), amount: p.AmountMinor, currency: p.Currency, dc: "CRDT",
		reference: p.Reference, bkRef: "BK-" + p.ID}
}

// camtStatement writes lines as a camt.053.001.02 statement of iban.
func camtStatement(t *testing.T, id, iban string, lines []stmtLine) []byte {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrStmt>
<GrpHdr><MsgId>%s</MsgId><CreDtTm>2026-12-07T06:00:00+01:00</CreDtTm></GrpHdr>
<Stmt><Id>%s</Id><CreDtTm>2026-12-07T06:00:00+01:00</CreDtTm><Acct><Id><IBAN>%s</IBAN></Id></Acct>`, id, id, iban)
	for i, l := range lines {
		fmt.Fprintf(&b, `
<Ntry><NtryRef>%d</NtryRef><Amt Ccy="%s">%s</Amt><CdtDbtInd>%s</CdtDbtInd><Sts>BOOK</Sts>
<BookgDt><Dt>%s</Dt></BookgDt><ValDt><Dt>%s</Dt></ValDt><AcctSvcrRef>%s</AcctSvcrRef><BkTxCd/>
<NtryDtls><TxDtls><Refs><EndToEndId>NOTPROVIDED</EndToEndId></Refs><RltdPties><Dbtr><Nm>Fake Payments Ltd</Nm></Dbtr></RltdPties>
<RmtInf><Ustrd>%s</Ustrd></RmtInf></TxDtls></NtryDtls></Ntry>`, i+1, l.currency, minorText(t, l.amount, l.currency), l.dc,
			l.booking.Format(time.DateOnly), l.booking.Format(time.DateOnly), l.bkRef, l.reference)
	}
	b.WriteString("\n</Stmt></BkToCstmrStmt></Document>\n")
	return []byte(b.String())
}

// csvStatement writes lines as a CSV statement.
func csvStatement(t *testing.T, lines []stmtLine) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString("booking_date,value_date,amount,currency,credit_debit,reference,counterparty,bank_reference\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s,Fake Payments Ltd,%s\n", l.booking.Format(time.DateOnly), l.booking.Format(time.DateOnly),
			minorText(t, l.amount, l.currency), l.currency, l.dc, l.reference, l.bkRef)
	}
	return []byte(b.String())
}

func (e *env) importStatement(t *testing.T, u reconcile.StatementUpload) reconcile.BankStatement {
	t.Helper()
	p, err := reconcile.ParseStatement(u)
	if err != nil {
		t.Fatal(err)
	}
	st, created, err := e.rec.ImportStatement(context.Background(), p, "test")
	if err != nil || !created {
		t.Fatalf("import: %v (created %v)", err, created)
	}
	return st
}

// payoutsArriving lists fc's payouts arriving on day, by currency.
func payoutsArriving(t *testing.T, fc *fake.Client, day time.Time) map[string]providers.Payout {
	t.Helper()
	out := map[string]providers.Payout{}
	err := fc.Payouts(context.Background(), providers.ReportRequest{From: day.AddDate(0, 0, -10), To: day.AddDate(0, 0, 5)},
		func(p providers.Payout) error {
			if p.ArrivalDate.Equal(day) {
				if _, dup := out[p.Currency]; dup {
					t.Fatalf("two %s payouts arrive on %s", p.Currency, day)
				}
				out[p.Currency] = p
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func bankRun(t *testing.T, rec *reconcile.Reconciler) (reconcile.Run, []reconcile.Discrepancy) {
	t.Helper()
	run, err := rec.Reconcile(context.Background(), "fake", bankRunDay, reconcile.TriggerAPI, "test")
	if err != nil || run.Status != "succeeded" {
		t.Fatalf("run %+v: %v", run, err)
	}
	ds, _, err := rec.ListDiscrepancies(context.Background(), reconcile.DiscrepancyFilter{RunID: run.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return run, ds
}

// TestBankStatementMatching: a statement made of the fake's payouts
// matches them all, and finds nothing; then each planted fault of the
// bank (a payout's credit missing, one short by a cent, a credit twice, a
// credit of nobody's) is found in exactly its category, and a credit of
// another connector paying into the same account is nobody's fault.
func TestBankStatementMatching(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	ctx := context.Background()
	// A second connector pays into the planted account; its payouts are
	// made of holds seeded at the fake.
	clkB := e.clk
	fb, err := fake.Start("127.0.0.1:0", fake.Config{Clock: clkB.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fb.Shutdown(context.Background()) })
	fcB := fb.Client(&http.Client{})
	if _, err := fcB.Seed(ctx, slices.Values([]fake.SeedHold{{Status: providers.StatusCaptured, AmountMinor: 70000,
		CapturedMinor: 70000, Currency: "EUR", CreatedAt: dayStart.Add(9 * time.Hour)}})); err != nil {
		t.Fatal(err)
	}
	rec := reconcile.New(reconcile.Config{Pool: e.pool, Providers: map[string]providers.Provider{"fake": e.fc, "fake_b": fcB},
		Clock: e.clk.Now})
	e.rec = rec

	for _, c := range []struct {
		amount   int64
		currency string
	}{{12000, "EUR"}, {3050, "EUR"}, {9900, "USD"}, {4500, "GBP"}, {120000, "JPY"}} {
		e.pay(t, c.amount, c.currency, "pm_card_visa", "capture")
	}
	e.clk.Set(bankRunAt)
	payouts := payoutsArriving(t, e.fc, bankArrival)
	if len(payouts) != 4 {
		t.Fatalf("payouts arriving %s: %+v", bankArrival, payouts)
	}
	for _, p := range payouts {
		if p.Status != providers.PayoutPaid || p.Reference == "" {
			t.Fatalf("payout %+v", p)
		}
	}
	payoutB := payoutsArriving(t, fcB, bankArrival)["EUR"]
	if payoutB.ID == "" {
		t.Fatal("fake_b made no payout")
	}

	window := 3
	if _, err := rec.SetBankAccount(ctx, "fake", reconcile.BankAccountInput{Account: "de89 3704 0044 0532 0130 00",
		MatchWindowDays: &window}, "test"); err != nil {
		t.Fatal(err)
	}

	// The clean statement: each payout once, some a day late, with a
	// debit and a credit of other days around them.
	var clean []stmtLine
	for _, cur := range []string{"EUR", "GBP", "JPY", "USD"} {
		l := creditFor(payouts[cur])
		if cur == "GBP" || cur == "JPY" {
			l.booking = l.booking.AddDate(0, 0, 1)
		}
		clean = append(clean, l)
	}
	clean = append(clean, stmtLine{booking: bankArrival, amount: 12183, currency: "EUR", dc: "DBIT", reference: "INV-1188"},
		stmtLine{booking: bankArrival.AddDate(0, 0, 2), amount: 5000, currency: "EUR", dc: "CRDT", reference: "interest"})
	e.importStatement(t, reconcile.StatementUpload{Format: reconcile.FormatCAMT053,
		Raw: camtStatement(t, "STMT-CLEAN", ibanClean, clean)})

	run, ds := bankRun(t, rec)
	if len(ds) != 0 {
		t.Fatalf("the clean statement: %d discrepancies: %+v", len(ds), ds)
	}
	if run.Bank == nil || run.Bank.Account != ibanClean || run.Bank.ArrivalDate != "2026-12-03" || run.Bank.MatchWindowDays != 3 {
		t.Fatalf("bank summary %+v", run.Bank)
	}
	for cur, p := range payouts {
		got := run.Bank.Currencies[cur]
		want := reconcile.BankTotals{Payouts: 1, PayoutsMinor: p.AmountMinor, Matched: 1, InBankMinor: p.AmountMinor}
		if got == nil || *got != want {
			t.Fatalf("%s: bank totals %+v, want %+v", cur, got, want)
		}
	}
	if got, err := rec.GetRun(ctx, run.ID); err != nil || got.Bank == nil || *got.Bank.Currencies["EUR"] != *run.Bank.Currencies["EUR"] {
		t.Fatalf("the run read back: %+v %v", got.Bank, err)
	}

	// The planted statement, of another account that fake and fake_b
	// both pay into: EUR's credit is missing, GBP's a cent short, USD's
	// twice, a credit of nobody's, and fake_b's payout.
	if _, err := rec.SetBankAccount(ctx, "fake", reconcile.BankAccountInput{Account: ibanPlanted}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.SetBankAccount(ctx, "fake_b", reconcile.BankAccountInput{Account: ibanPlanted}, "test"); err != nil {
		t.Fatal(err)
	}
	short := creditFor(payouts["GBP"])
	short.amount--
	unknown := stmtLine{booking: bankArrival, amount: 77777, currency: "EUR", dc: "CRDT", reference: "SUPPLIER REFUND 42", bkRef: "BK-X"}
	dup := creditFor(payouts["USD"])
	dup.bkRef = "BK-DUP"
	planted := []stmtLine{creditFor(payouts["JPY"]), short, creditFor(payouts["USD"]), dup, unknown, creditFor(payoutB)}
	st := e.importStatement(t, reconcile.StatementUpload{Format: reconcile.FormatCSV, Account: ibanPlanted,
		Raw: csvStatement(t, planted)})

	run2, ds := bankRun(t, rec)
	var got []string
	byCat := map[string]reconcile.Discrepancy{}
	for _, d := range ds {
		key := d.Category + " " + d.Currency
		if d.Category == reconcile.BankCreditUnmatched {
			key += " " + fmt.Sprint(d.Detail["reason"])
		}
		got = append(got, key)
		byCat[key] = d
	}
	sort.Strings(got)
	want := []string{"bank_credit_unmatched EUR unknown", "bank_credit_unmatched USD duplicate",
		"payout_amount_mismatch GBP", "payout_missing_in_bank EUR"}
	if !slices.Equal(got, want) {
		t.Fatalf("planted: found %q, want %q\n%+v", got, want, ds)
	}
	missing := byCat["payout_missing_in_bank EUR"]
	if deref(missing.ProviderRef) != payouts["EUR"].ID || missing.Expected != fmt.Sprint(payouts["EUR"].AmountMinor) ||
		missing.Actual != "absent" || missing.Detail["connector"] != "fake" {
		t.Fatalf("missing %+v", missing)
	}
	mismatch := byCat["payout_amount_mismatch GBP"]
	if mismatch.DifferenceMinor == nil || *mismatch.DifferenceMinor != -1 || deref(mismatch.ProviderRef) != payouts["GBP"].ID ||
		mismatch.Detail["direction"] != "under" {
		t.Fatalf("mismatch %+v", mismatch)
	}
	dupD := byCat["bank_credit_unmatched USD duplicate"]
	if of, _ := dupD.Detail["duplicate_of"].(map[string]any); of["payout_id"] != payouts["USD"].ID ||
		dupD.Detail["bank_reference"] != "BK-DUP" || fmt.Sprint(dupD.Detail["bank_statement"]) != fmt.Sprint(st.ID) {
		t.Fatalf("duplicate %+v", dupD)
	}
	if u := byCat["bank_credit_unmatched EUR unknown"]; u.Actual != "77777" || u.Detail["reference"] != "SUPPLIER REFUND 42" {
		t.Fatalf("unknown credit %+v", u)
	}
	wantTotals := map[string]reconcile.BankTotals{
		"EUR": {Payouts: 1, PayoutsMinor: payouts["EUR"].AmountMinor, Missing: 1},
		"GBP": {Payouts: 1, PayoutsMinor: payouts["GBP"].AmountMinor, Mismatched: 1},
		"USD": {Payouts: 1, PayoutsMinor: payouts["USD"].AmountMinor, Matched: 1, InBankMinor: payouts["USD"].AmountMinor},
		"JPY": {Payouts: 1, PayoutsMinor: payouts["JPY"].AmountMinor, Matched: 1, InBankMinor: payouts["JPY"].AmountMinor},
	}
	for cur, w := range wantTotals {
		if g := run2.Bank.Currencies[cur]; g == nil || *g != w {
			t.Fatalf("%s: totals %+v, want %+v", cur, g, w)
		}
	}
	if run2.Diff.New != 4 || run2.CategoryCounts[reconcile.PayoutMissingInBank] != 1 {
		t.Fatalf("version 2: diff %+v counts %v", run2.Diff, run2.CategoryCounts)
	}
	// The run's event holds its bank summary, as the API answers the run.
	var evBank string
	for _, ev := range e.staffEvents(t, "reconciliation.run.completed") {
		var data struct {
			ID   int64           `json:"id"`
			Bank json.RawMessage `json:"bank"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if data.ID == run2.ID {
			evBank = string(data.Bank)
		}
	}
	if want := mustJSONText(t, run2.Bank); evBank != want {
		t.Fatalf("the event's bank summary\n got  %s\n want %s", evBank, want)
	}

	// fake_b's run reports its own payout matched and leaves the
	// account's unmatched credits to fake's run.
	runB, err := rec.Reconcile(ctx, "fake_b", bankRunDay, reconcile.TriggerAPI, "test")
	if err != nil || runB.DiscrepancyCount != 0 || runB.Bank == nil || runB.Bank.Currencies["EUR"].Matched != 1 {
		t.Fatalf("fake_b's run %+v: %v", runB, err)
	}

	// Re-run: the same findings, still open.
	run3, ds3 := bankRun(t, rec)
	if len(ds3) != 4 || run3.Diff.StillOpen != 4 || run3.Diff.New != 0 || run3.Diff.Gone != 0 {
		t.Fatalf("version 3: %d findings, diff %+v", len(ds3), run3.Diff)
	}
}
