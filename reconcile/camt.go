package reconcile

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
)

// The elements of a camt.053 document that a statement is read from
// (tags without a namespace match the element's local name in any, so
// every version of the message reads alike). See bankparse.go for why
// this is not github.com/moov-io/iso20022.
type camtDocument struct {
	XMLName xml.Name        `xml:"Document"`
	Stmts   []camtStatement `xml:"BkToCstmrStmt>Stmt"`
}

type camtStatement struct {
	ID   string `xml:"Id"`
	Acct struct {
		IBAN string `xml:"Id>IBAN"`
		Othr string `xml:"Id>Othr>Id"`
	} `xml:"Acct"`
	Ntry []camtEntry `xml:"Ntry"`
}

type camtEntry struct {
	NtryRef string `xml:"NtryRef"`
	Amt     struct {
		Value string `xml:",chardata"`
		Ccy   string `xml:"Ccy,attr"`
	} `xml:"Amt"`
	CdtDbtInd string `xml:"CdtDbtInd"`
	RvslInd   string `xml:"RvslInd"`
	// Sts is a code up to 001.06 (<Sts>BOOK</Sts>), a choice from 001.07
	// (<Sts><Cd>BOOK</Cd></Sts>).
	Sts struct {
		Text string `xml:",chardata"`
		Cd   string `xml:"Cd"`
	} `xml:"Sts"`
	BookgDt      *camtDate `xml:"BookgDt"`
	ValDt        *camtDate `xml:"ValDt"`
	AcctSvcrRef  string    `xml:"AcctSvcrRef"`
	AddtlNtryInf string    `xml:"AddtlNtryInf"`
	TxDtls       []camtTx  `xml:"NtryDtls>TxDtls"`
}

type camtDate struct {
	Dt   string `xml:"Dt"`
	DtTm string `xml:"DtTm"`
}

// day is the date of d: Dt, or the date DtTm is written with.
func (d *camtDate) day() (string, bool) {
	if d == nil {
		return "", false
	}
	if v := strings.TrimSpace(d.Dt); v != "" {
		return parseDay(v)
	}
	v := strings.TrimSpace(d.DtTm)
	if len(v) < len("2006-01-02T") || v[10] != 'T' {
		return "", false
	}
	return parseDay(v[:10])
}

type camtTx struct {
	EndToEndID  string   `xml:"Refs>EndToEndId"`
	AcctSvcrRef string   `xml:"Refs>AcctSvcrRef"`
	Ustrd       []string `xml:"RmtInf>Ustrd"`
	// The debtor's name: Dbtr/Nm up to 001.06, Dbtr/Pty/Nm from 001.07.
	DbtrNm    string `xml:"RltdPties>Dbtr>Nm"`
	DbtrPtyNm string `xml:"RltdPties>Dbtr>Pty>Nm"`
}

// camt053Namespace starts the namespace of every version of camt.053.
const camt053Namespace = "urn:iso:std:iso:20022:tech:xsd:camt.053."

// ParseCAMT053 reads a camt.053 document holding one statement (Stmt):
// its account (Acct/Id/IBAN, else Acct/Id/Othr/Id), its id and its
// booked entries (Sts BOOK; pending and information entries are left
// out, as the bank has not booked them). Each entry's reference is its
// unstructured remittance information (RmtInf/Ustrd of its transactions),
// else its end-to-end id, else its additional information; its bank
// reference is its AcctSvcrRef, else its NtryRef. Errors: validation_failed
// naming Stmt.Ntry[N].Element (N from 1), or body for a document that is
// not a well-formed camt.053.
func ParseCAMT053(raw []byte) (ParsedStatement, error) {
	var doc camtDocument
	dec := xml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		var se *xml.SyntaxError
		var ue xml.UnmarshalError
		switch {
		case errors.As(err, &se):
			return ParsedStatement{}, lineError("body", "the XML is not well-formed at line %d: %s", se.Line, shown(se.Msg))
		case errors.As(err, &ue), strings.Contains(err.Error(), "expected element type"):
			return ParsedStatement{}, lineError("body", "the document is not an ISO 20022 Document")
		}
		return ParsedStatement{}, lineError("body", "the body is not a camt.053 XML document (UTF-8)")
	}
	if ns := doc.XMLName.Space; ns != "" && !strings.HasPrefix(ns, camt053Namespace) {
		return ParsedStatement{}, lineError("Document", "the document is %s, not a camt.053 statement", shown(ns))
	}
	switch len(doc.Stmts) {
	case 0:
		return ParsedStatement{}, lineError("Stmt", "the document holds no BkToCstmrStmt/Stmt: a camt.053 statement is expected")
	case 1:
	default:
		return ParsedStatement{}, lineError("Stmt[2]", "the document holds %d statements; upload one statement (Stmt) per file",
			len(doc.Stmts))
	}
	st := doc.Stmts[0]
	out := ParsedStatement{Format: FormatCAMT053}
	var err error
	if out.StatementID, err = checkText(st.ID, "Stmt.Id"); err != nil || out.StatementID == "" || len(out.StatementID) > maxStatementIDLen {
		return ParsedStatement{}, lineError("Stmt.Id", "Stmt/Id must be 1 to %d characters", maxStatementIDLen)
	}
	acct := st.Acct.IBAN
	if strings.TrimSpace(acct) == "" {
		acct = st.Acct.Othr
	}
	if out.Account, err = NormalizeAccount(acct); err != nil {
		return ParsedStatement{}, lineError("Stmt.Acct.Id", "Stmt/Acct/Id (IBAN or Othr/Id): %v", err)
	}
	if len(st.Ntry) > maxStatementLines {
		return ParsedStatement{}, lineError(fmt.Sprintf("Stmt.Ntry[%d]", maxStatementLines+1),
			"a statement may hold at most %d entries", maxStatementLines)
	}
	for i, e := range st.Ntry {
		l, booked, err := e.line(i + 1)
		if err != nil {
			return ParsedStatement{}, err
		}
		if booked {
			out.Lines = append(out.Lines, l)
		}
	}
	return out, nil
}

// line reads entry n; booked is false for an entry the bank has not
// booked (it is then not checked further).
func (e camtEntry) line(n int) (l StatementLine, booked bool, err error) {
	at := func(el string) string { return fmt.Sprintf("Stmt.Ntry[%d].%s", n, el) }
	bad := func(el, format string, args ...any) error {
		return lineError(at(el), "entry %d (Ntry[%d]/%s): %s", n, n, strings.ReplaceAll(el, ".", "/"), fmt.Sprintf(format, args...))
	}
	switch sts := strings.TrimSpace(e.Sts.Cd + e.Sts.Text); sts {
	case "BOOK":
	case "PDNG", "INFO", "FUTR":
		return l, false, nil
	default:
		return l, false, bad("Sts", "status %s is none of BOOK, PDNG, INFO, FUTR", shown(sts))
	}
	l = StatementLine{Line: n, Currency: strings.TrimSpace(e.Amt.Ccy)}
	var ok bool
	if l.BookingDate, ok = e.BookgDt.day(); !ok {
		return l, false, bad("BookgDt", "a booked entry needs BookgDt/Dt (YYYY-MM-DD) or BookgDt/DtTm")
	}
	if e.ValDt != nil {
		d, ok := e.ValDt.day()
		if !ok {
			return l, false, bad("ValDt", "ValDt needs Dt (YYYY-MM-DD) or DtTm")
		}
		l.ValueDate = &d
	}
	if l.AmountMinor, err = ParseAmount(strings.TrimSpace(e.Amt.Value), l.Currency); err != nil {
		return l, false, bad("Amt", "%v", err)
	}
	switch strings.TrimSpace(e.CdtDbtInd) {
	case "CRDT":
		l.CreditDebit = Credit
	case "DBIT":
		l.CreditDebit = Debit
	default:
		return l, false, bad("CdtDbtInd", "CdtDbtInd must be CRDT or DBIT")
	}
	switch strings.TrimSpace(e.RvslInd) {
	case "", "false", "0":
	case "true", "1":
		l.Reversal = true
	default:
		return l, false, bad("RvslInd", "RvslInd must be true or false")
	}
	if err := e.texts(&l, at); err != nil {
		return l, false, err
	}
	return l, true, nil
}

// texts fills l's reference, counterparty and bank reference.
func (e camtEntry) texts(l *StatementLine, at func(string) string) error {
	var ustrd []string
	var endToEnd, txRef, debtor string
	for _, tx := range e.TxDtls {
		for _, u := range tx.Ustrd {
			if u = strings.TrimSpace(u); u != "" {
				ustrd = append(ustrd, u)
			}
		}
		if v := strings.TrimSpace(tx.EndToEndID); endToEnd == "" && v != "NOTPROVIDED" {
			endToEnd = v
		}
		txRef = cmp.Or(txRef, strings.TrimSpace(tx.AcctSvcrRef))
		debtor = cmp.Or(debtor, strings.TrimSpace(tx.DbtrNm), strings.TrimSpace(tx.DbtrPtyNm))
	}
	ref := cmp.Or(strings.Join(ustrd, " "), endToEnd, strings.TrimSpace(e.AddtlNtryInf))
	bankRef := cmp.Or(strings.TrimSpace(e.AcctSvcrRef), strings.TrimSpace(e.NtryRef), txRef)
	var err error
	if l.Reference, err = checkText(ref, at("NtryDtls.TxDtls.RmtInf.Ustrd")); err != nil {
		return err
	}
	if l.Counterparty, err = checkText(debtor, at("NtryDtls.TxDtls.RltdPties.Dbtr")); err != nil {
		return err
	}
	l.BankReference, err = checkText(bankRef, at("AcctSvcrRef"))
	return err
}
