package reconcile_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/bank/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustJSONText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sp(s string) *string { return &s }

// camtV08 is the sample rewritten as camt.053.001.08 writes it: the
// status a code inside Sts/Cd, the debtor's name inside Dbtr/Pty.
func camtV08(t *testing.T) []byte {
	s := string(readTestdata(t, "camt053_v02.xml"))
	s = strings.ReplaceAll(s, "camt.053.001.02", "camt.053.001.08")
	s = strings.ReplaceAll(s, "<Sts>BOOK</Sts>", "<Sts><Cd>BOOK</Cd></Sts>")
	s = strings.ReplaceAll(s, "<Sts>PDNG</Sts>", "<Sts><Cd>PDNG</Cd></Sts>")
	s = strings.ReplaceAll(s, "<Dbtr>\n                <Nm>Fake Payments Ltd</Nm>\n              </Dbtr>",
		"<Dbtr><Pty><Nm>Fake Payments Ltd</Nm></Pty></Dbtr>")
	if !strings.Contains(s, "<Pty>") {
		t.Fatal("the v08 rewrite missed the debtor")
	}
	return []byte(s)
}

func TestParseCAMT053(t *testing.T) {
	t.Parallel()
	want := []reconcile.StatementLine{
		{Line: 1, BookingDate: "2026-12-02", ValueDate: sp("2026-12-02"), AmountMinor: 123456, Currency: "EUR", CreditDebit: "credit",
			Reference: "FAKEPAYOUT-0A1B2C3D", Counterparty: "Fake Payments Ltd", BankReference: "2026120200001234"},
		{Line: 2, BookingDate: "2026-12-02", ValueDate: sp("2026-12-02"), AmountMinor: 12183, Currency: "EUR", CreditDebit: "debit",
			Reference: "INV-2026-1188", BankReference: "2026120200001235"},
		// Booked with a DtTm; the entry's only reference is its end-to-end id.
		{Line: 3, BookingDate: "2026-12-02", ValueDate: sp("2026-12-03"), AmountMinor: 100000, Currency: "EUR", CreditDebit: "credit",
			Reference: "po_1QxYz2026", BankReference: "2026120200001236"},
		// Entry 4 is pending: not booked, not a line.
	}
	for name, raw := range map[string][]byte{"001.02": readTestdata(t, "camt053_v02.xml"), "001.08": camtV08(t)} {
		p, err := reconcile.ParseCAMT053(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Account != "DE89370400440532013000" || p.StatementID != "STMT-DE89370400440532013000-20261202" || p.Format != "camt.053" {
			t.Fatalf("%s: statement %+v", name, p)
		}
		if g, w := mustJSONText(t, p.Lines), mustJSONText(t, want); g != w {
			t.Fatalf("%s: lines\n got  %s\n want %s", name, g, w)
		}
	}
}

func TestParseCSV(t *testing.T) {
	t.Parallel()
	lines, err := reconcile.ParseCSV(readTestdata(t, "statement.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := []reconcile.StatementLine{
		{Line: 2, BookingDate: "2026-12-02", ValueDate: sp("2026-12-02"), AmountMinor: 123456, Currency: "EUR", CreditDebit: "credit",
			Reference: "FAKEPAYOUT-0A1B2C3D", Counterparty: "Fake Payments Ltd", BankReference: "2026120200001234"},
		{Line: 3, BookingDate: "2026-12-02", ValueDate: sp("2026-12-02"), AmountMinor: 12183, Currency: "EUR", CreditDebit: "debit",
			Reference: "INV-2026-1188, office supplies", Counterparty: "Office Supplies AG", BankReference: "2026120200001235"},
		// Line 4 is blank; JPY has no decimals.
		{Line: 5, BookingDate: "2026-12-03", AmountMinor: 50000, Currency: "JPY", CreditDebit: "credit",
			Reference: "FAKEPAYOUT-99", Counterparty: "Fake Payments, Tokyo"},
	}
	if g, w := mustJSONText(t, lines), mustJSONText(t, want); g != w {
		t.Fatalf("lines\n got  %s\n want %s", g, w)
	}
	// Columns in another order, a byte order mark, CRLF line ends.
	lines, err = reconcile.ParseCSV([]byte("\xef\xbb\xbfamount,credit_debit,currency,booking_date\r\n0.29,CRDT,EUR,2026-12-02\r\n"))
	if err != nil || len(lines) != 1 || lines[0].AmountMinor != 29 || lines[0].Line != 2 {
		t.Fatalf("reordered: %+v %v", lines, err)
	}
}

func TestParseAmountIsExact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, cur string
		want    int64
	}{
		{"0.29", "EUR", 29}, {"1234.56", "EUR", 123456}, {"10.5", "EUR", 1050}, {"10", "EUR", 1000}, {"00012.30", "EUR", 1230},
		{"0.07", "USD", 7}, {"50000", "JPY", 50000}, {"1.234", "BHD", 1234}, {"9999999999.99", "EUR", 999999999999},
	} {
		if got, err := reconcile.ParseAmount(c.in, c.cur); err != nil || got != c.want {
			t.Errorf("%s %s: %d %v, want %d", c.in, c.cur, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, cur string }{
		{"10.001", "EUR"}, {"10.5", "JPY"}, {"1.0", "JPY"}, {"1.2345", "BHD"}, {"-1", "EUR"}, {"+1", "EUR"}, {"1e3", "EUR"},
		{"", "EUR"}, {"1.", "EUR"}, {".5", "EUR"}, {"1,50", "EUR"}, {"1 000", "EUR"}, {"0x10", "EUR"}, {"NaN", "EUR"},
		{"10000000000.01", "EUR"}, {"99999999999999999999", "EUR"}, {"1", "XXY"}, {"1", "eur"}, {"1", ""},
	} {
		if got, err := reconcile.ParseAmount(c.in, c.cur); err == nil {
			t.Errorf("%q %q: %d, want refused", c.in, c.cur, got)
		}
	}
}

// A bad statement is refused naming the line (CSV) or the entry (camt)
// and the field.
func TestBadStatementsNameTheLine(t *testing.T) {
	t.Parallel()
	const header = "booking_date,value_date,amount,currency,credit_debit,reference,counterparty,bank_reference\n"
	const good = "2026-12-02,,10.00,EUR,credit,r,c,b\n"
	csvCases := map[string]struct{ body, param string }{
		"bad amount":        {header + good + "2026-12-02,,12.3x,EUR,credit,r,c,b\n", "line[3].amount"},
		"too many decimals": {header + good + good + "2026-12-02,,10.001,EUR,credit,r,c,b\n", "line[4].amount"},
		"JPY decimals":      {header + "2026-12-02,,10.5,JPY,credit,r,c,b\n", "line[2].amount"},
		"unknown currency":  {header + "2026-12-02,,10.00,EUX,credit,r,c,b\n", "line[2].currency"},
		"missing amount":    {header + "2026-12-02,,,EUR,credit,r,c,b\n", "line[2].amount"},
		"negative amount":   {header + "2026-12-02,,-10.00,EUR,credit,r,c,b\n", "line[2].amount"},
		"bad date":          {header + "2026-02-30,,10.00,EUR,credit,r,c,b\n", "line[2].booking_date"},
		"no date":           {header + ",,10.00,EUR,credit,r,c,b\n", "line[2].booking_date"},
		"bad value date":    {header + "2026-12-02,tomorrow,10.00,EUR,credit,r,c,b\n", "line[2].value_date"},
		"bad direction":     {header + "2026-12-02,,10.00,EUR,in,r,c,b\n", "line[2].credit_debit"},
		"missing column":    {"booking_date,amount,currency\n2026-12-02,10.00,EUR\n", "line[1].credit_debit"},
		"unknown column":    {"booking_date,amount,currency,credit_debit,colour\n", "line[1].colour"},
		"short line":        {header + "2026-12-02,,10.00,EUR\n", "line[2]"},
		"bare quote":        {header + good + "2026-12-02,,10.00,EUR,credit,a\"b,c,d\n", "line[3]"},
		"NUL":               {header + "2026-12-02,,10.00,EUR,credit,a\x00b,c,d\n", "body"},
		"not UTF-8":         {header + "2026-12-02,,10.00,EUR,credit,\xff,c,d\n", "body"},
		"long reference":    {header + "2026-12-02,,10.00,EUR,credit," + strings.Repeat("r", 501) + ",c,d\n", "line[2].reference"},
		"empty":             {"", "line[1]"},
	}
	for name, c := range csvCases {
		_, err := reconcile.ParseCSV([]byte(c.body))
		if p := paramOf(err); p != c.param {
			t.Errorf("csv %s: param %q (%v), want %q", name, p, err, c.param)
		}
	}

	sample := string(readTestdata(t, "camt053_v02.xml"))
	entry3 := strings.Index(sample, "<NtryRef>3</NtryRef>")
	in3 := func(old, new string) string { return sample[:entry3] + strings.Replace(sample[entry3:], old, new, 1) }
	camtCases := map[string]struct{ body, param string }{
		"bad amount":        {in3(`<Amt Ccy="EUR">1000</Amt>`, `<Amt Ccy="EUR">1,000</Amt>`), "Stmt.Ntry[3].Amt"},
		"too many decimals": {in3(`<Amt Ccy="EUR">1000</Amt>`, `<Amt Ccy="EUR">10.001</Amt>`), "Stmt.Ntry[3].Amt"},
		"unknown currency":  {in3(`<Amt Ccy="EUR">1000</Amt>`, `<Amt Ccy="EUX">1000</Amt>`), "Stmt.Ntry[3].Amt"},
		"no currency":       {in3(`<Amt Ccy="EUR">1000</Amt>`, `<Amt>1000</Amt>`), "Stmt.Ntry[3].Amt"},
		"no direction":      {in3(`<CdtDbtInd>CRDT</CdtDbtInd>`, ``), "Stmt.Ntry[3].CdtDbtInd"},
		"no booking date":   {in3(`<DtTm>2026-12-02T14:03:00+01:00</DtTm>`, ``), "Stmt.Ntry[3].BookgDt"},
		"bad status":        {in3(`<Sts>BOOK</Sts>`, `<Sts>DONE</Sts>`), "Stmt.Ntry[3].Sts"},
		"no account":        {strings.Replace(sample, "<IBAN>DE89 3704 0044 0532 0130 00</IBAN>", "", 1), "Stmt.Acct.Id"},
		"no statement id":   {strings.Replace(sample, "<Id>STMT-DE89370400440532013000-20261202</Id>", "", 1), "Stmt.Id"},
		"two statements":    {strings.Replace(sample, "</Stmt>", "</Stmt><Stmt><Id>B</Id></Stmt>", 1), "Stmt[2]"},
		"camt.052":          {strings.ReplaceAll(sample, "camt.053.001.02", "camt.052.001.02"), "Document"},
		"not a statement":   {`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrAcctRpt/></Document>`, "Stmt"},
		"not XML":           {"booking_date,amount\n", "body"},
		"JSON":              {`{"Stmt": []}`, "body"},
		"truncated":         {sample[:len(sample)/2], "body"},
		"other root":        {`<html><body>hi</body></html>`, "body"},
		"latin-1":           {strings.Replace(sample, `encoding="UTF-8"`, `encoding="ISO-8859-1"`, 1), "body"},
		"NUL reference":     {strings.Replace(sample, "<Ustrd>FAKEPAYOUT-0A1B2C3D</Ustrd>", "<Ustrd>&#0;</Ustrd>", 1), "body"},
		"unknown entity":    {strings.Replace(sample, "<Ustrd>FAKEPAYOUT-0A1B2C3D</Ustrd>", "<Ustrd>&nbsp;</Ustrd>", 1), "body"},
		"external entity":   {xxe, "body"},
		"billion laughs":    {billionLaughs, "body"},
		"deep nesting":      {strings.Repeat("<a>", 20000) + strings.Repeat("</a>", 20000), "body"},
	}
	for name, c := range camtCases {
		start := time.Now()
		_, err := reconcile.ParseCAMT053([]byte(c.body))
		if p := paramOf(err); p != c.param {
			t.Errorf("camt %s: param %q (%v), want %q", name, p, err, c.param)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("camt %s: took %v", name, took)
		}
		if err != nil && strings.Contains(err.Error(), "root:") {
			t.Errorf("camt %s: an entity was expanded: %v", name, err)
		}
	}
}

// paramOf is the param of a validation_failed error ("" otherwise).
func paramOf(err error) string {
	var e *orchestrator.Error
	if !errors.As(err, &e) || e.Code != orchestrator.CodeValidationFailed {
		return ""
	}
	return e.Param
}

// xxe declares an external entity (a file of this machine) and uses it.
const xxe = `<?xml version="1.0"?>
<!DOCTYPE Document [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrStmt><Stmt><Id>&xxe;</Id></Stmt></BkToCstmrStmt></Document>`

// billionLaughs expands to 10^9 "lol"s in a parser that expands entities.
var billionLaughs = func() string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0"?>` + "\n" + `<!DOCTYPE Document [<!ENTITY lol0 "lol">`)
	for i := 1; i <= 9; i++ {
		b.WriteString(`<!ENTITY lol` + string(rune('0'+i)) + ` "`)
		for range 10 {
			b.WriteString(`&lol` + string(rune('0'+i-1)) + `;`)
		}
		b.WriteString(`">`)
	}
	b.WriteString(`]><Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrStmt><Stmt><Id>&lol9;</Id>` +
		`</Stmt></BkToCstmrStmt></Document>`)
	return b.String()
}()
