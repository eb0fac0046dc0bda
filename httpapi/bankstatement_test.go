package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// camt.053 bodies are XML, which the validator does not read by itself:
// it checks them as the strings the document says they are.
func init() {
	openapi3filter.RegisterBodyDecoder("application/xml", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef,
		_ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
}

func bankSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../testdata/bank/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	xmlHdr = map[string]string{"Content-Type": "application/xml"}
	csvHdr = map[string]string{"Content-Type": "text/csv"}
)

type bankStatementJSON struct {
	ID          int64  `json:"id"`
	Account     string `json:"account"`
	StatementID string `json:"statement_id"`
	Format      string `json:"format"`
	LineCount   int    `json:"line_count"`
	Lines       struct {
		Data []struct {
			Line        int    `json:"line"`
			AmountMinor int64  `json:"amount_minor"`
			Reference   string `json:"reference"`
		} `json:"data"`
		HasMore bool `json:"has_more"`
	} `json:"lines"`
}

// contractBankStatements is the bank statements' flow of the contract
// test: the connector's account, uploads in both formats, the same file
// again, a bad file, the list and a statement's lines.
func contractBankStatements(t *testing.T, ct *contract, finance, admin string) {
	acct := "/v1/connectors/fake/bank_account"
	res, b := ct.do(t, call{method: "GET", path: acct, apiKey: finance})
	wantProblem(t, res, b, 404, "not_found")
	res, b = ct.do(t, call{method: "PUT", path: acct, apiKey: admin, body: `{"account":"de89 3704 0044 0532 0130 00","match_window_days":2}`})
	wantStatus(t, res, b, 200)
	res, b = ct.do(t, call{method: "GET", path: acct, apiKey: finance})
	wantStatus(t, res, b, 200)
	if !strings.Contains(string(b), `"account":"DE89370400440532013000"`) || !strings.Contains(string(b), `"match_window_days":2`) {
		t.Fatalf("bank account %s", b)
	}
	res, b = ct.do(t, call{method: "PUT", path: acct, apiKey: admin, offContract: true, body: `{"account":"DE89","match_window_days":0}`})
	if p := wantProblem(t, res, b, 400, "validation_failed"); p.Param != "match_window_days" {
		t.Fatalf("param %q", p.Param)
	}
	res, b = ct.do(t, call{method: "PUT", path: acct, apiKey: finance, body: `{"account":"DE89"}`})
	wantProblem(t, res, b, 403, "forbidden")

	camt := bankSample(t, "camt053_v02.xml")
	res, b = ct.do(t, call{method: "POST", path: "/v1/bank_statements", apiKey: finance, idemKey: "bs-1", body: camt, hdr: xmlHdr})
	wantStatus(t, res, b, 201)
	st := decode[bankStatementJSON](t, b)
	if st.Account != "DE89370400440532013000" || st.LineCount != 3 || st.Format != "camt.053" ||
		res.Header.Get("Location") != fmt.Sprintf("/v1/bank_statements/%d", st.ID) {
		t.Fatalf("imported %s (Location %q)", b, res.Header.Get("Location"))
	}
	res, b = ct.do(t, call{method: "POST", path: "/v1/bank_statements", apiKey: finance, idemKey: "bs-2", body: camt, hdr: xmlHdr})
	wantStatus(t, res, b, 200)
	if again := decode[bankStatementJSON](t, b); again.ID != st.ID {
		t.Fatalf("the same file again: %s", b)
	}
	res, b = ct.do(t, call{method: "POST", path: "/v1/bank_statements?account=DE89370400440532013000", apiKey: admin,
		idemKey: "bs-3", body: bankSample(t, "statement.csv"), hdr: csvHdr})
	wantStatus(t, res, b, 201)
	res, b = ct.do(t, call{method: "POST", path: "/v1/bank_statements?account=DE89370400440532013000", apiKey: finance,
		idemKey: "bs-4", body: "booking_date,amount,currency,credit_debit\n2026-12-02,12.345,EUR,credit\n", hdr: csvHdr})
	if p := wantProblem(t, res, b, 400, "validation_failed"); p.Param != "line[2].amount" {
		t.Fatalf("bad line: %s", b)
	}
	res, b = ct.do(t, call{method: "POST", path: "/v1/bank_statements", apiKey: finance, idemKey: "bs-5", body: `{}`, offContract: true})
	wantProblem(t, res, b, 415, "unsupported_media_type")

	res, b = ct.do(t, call{method: "GET", path: "/v1/bank_statements?account=de89370400440532013000&limit=1", apiKey: finance})
	wantStatus(t, res, b, 200)
	if !strings.Contains(string(b), `"has_more":true`) {
		t.Fatalf("list %s", b)
	}
	res, b = ct.do(t, call{method: "GET", path: fmt.Sprintf("/v1/bank_statements/%d?limit=2", st.ID), apiKey: finance})
	wantStatus(t, res, b, 200)
	page := decode[bankStatementJSON](t, b)
	if len(page.Lines.Data) != 2 || !page.Lines.HasMore || page.Lines.Data[0].AmountMinor != 123456 {
		t.Fatalf("lines %s", b)
	}
	res, b = ct.do(t, call{method: "GET", path: fmt.Sprintf("/v1/bank_statements/%d?starting_after=2", st.ID), apiKey: finance})
	wantStatus(t, res, b, 200)
	if page := decode[bankStatementJSON](t, b); len(page.Lines.Data) != 1 || page.Lines.Data[0].Line != 3 || page.Lines.HasMore {
		t.Fatalf("second page %s", b)
	}
	res, b = ct.do(t, call{method: "GET", path: "/v1/bank_statements/999999", apiKey: finance})
	wantProblem(t, res, b, 404, "not_found")
}

// bankRows counts what an upload may have written.
func bankRows(t *testing.T, e *env) string {
	t.Helper()
	var st, lines, keys int64
	if err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM bank_statements),
		(SELECT count(*) FROM bank_statement_lines), (SELECT count(*) FROM idempotency_keys)`).Scan(&st, &lines, &keys); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("statements=%d lines=%d keys=%d", st, lines, keys)
}

// TestBadStatementUploadsStoreNothing: every bad upload is refused as a
// problem naming what is wrong (the line or entry and the field), before
// the key is claimed, and leaves nothing; the good file then imports, once.
func TestBadStatementUploadsStoreNothing(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	finance := e.keys[orchestrator.RoleFinance]
	camt := bankSample(t, "camt053_v02.xml")
	csv := bankSample(t, "statement.csv")
	entry3 := strings.Index(camt, "<NtryRef>3</NtryRef>")
	bomb := `<?xml version="1.0"?><!DOCTYPE Document [<!ENTITY a "aaaaaaaaaa">` +
		`<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>` +
		`<Document><BkToCstmrStmt><Stmt><Id>&c;</Id></Stmt></BkToCstmrStmt></Document>`
	cases := []struct {
		name, query, body string
		hdr               map[string]string
		status            int
		code, param       string
	}{
		{"csv bad amount", "?account=DE89370400440532013000", strings.Replace(csv, "1234.56", "12,34.56", 1), csvHdr, 400, "validation_failed", "line[2]"},
		{"csv too many decimals", "?account=DE89370400440532013000", strings.Replace(csv, "121.83", "121.835", 1), csvHdr, 400, "validation_failed", "line[3].amount"},
		{"csv JPY decimals", "?account=DE89370400440532013000", strings.Replace(csv, "50000,JPY", "500.5,JPY", 1), csvHdr, 400, "validation_failed", "line[5].amount"},
		{"csv unknown currency", "?account=DE89370400440532013000", strings.Replace(csv, "50000,JPY", "50000,JPX", 1), csvHdr, 400, "validation_failed", "line[5].currency"},
		{"csv missing field", "?account=DE89370400440532013000", strings.Replace(csv, ",credit,FAKEPAYOUT-0A1B2C3D", ",,FAKEPAYOUT-0A1B2C3D", 1), csvHdr, 400, "validation_failed", "line[2].credit_debit"},
		{"csv without account", "", csv, csvHdr, 400, "validation_failed", "account"},
		{"csv bad account", "?account=DE89%2B3704", csv, csvHdr, 400, "validation_failed", "account"},
		{"camt bad amount", "", camt[:entry3] + strings.Replace(camt[entry3:], `>1000<`, `>1O00<`, 1), xmlHdr, 400, "validation_failed", "Stmt.Ntry[3].Amt"},
		{"camt wrong decimals", "", strings.Replace(camt, ">1234.56<", ">1234.567<", 1), xmlHdr, 400, "validation_failed", "Stmt.Ntry[1].Amt"},
		{"camt of another account", "?account=GB33BUKB20201555555555", camt, xmlHdr, 400, "validation_failed", "account"},
		{"not XML", "", csv, xmlHdr, 400, "validation_failed", "body"},
		{"entity bomb", "", bomb, xmlHdr, 400, "validation_failed", "body"},
		{"JSON", "", `{"lines":[]}`, map[string]string{"Content-Type": "application/json"}, 415, "unsupported_media_type", "Content-Type"},
		{"no type", "", csv, map[string]string{"Content-Type": ""}, 415, "unsupported_media_type", "Content-Type"},
		{"huge", "?account=DE89370400440532013000", csv + strings.Repeat("2026-12-02,,1.00,EUR,credit,r,c,b\n", httpapi.MaxStatementBytes/30),
			csvHdr, 413, "body_too_large", ""},
	}
	before := bankRows(t, e)
	for i, c := range cases {
		hdr := map[string]string{"Idempotency-Key": fmt.Sprintf("bad-%d", i)}
		for k, v := range c.hdr {
			hdr[k] = v
		}
		res, b := e.do(t, "POST", "/v1/bank_statements"+c.query, finance, strings.NewReader(c.body), hdr)
		p := wantProblem(t, res, b, c.status, c.code)
		if c.param != "" && p.Param != c.param && !strings.HasPrefix(p.Param, c.param+".") {
			t.Errorf("%s: param %q, want %q: %s", c.name, p.Param, c.param, b)
		}
		if now := bankRows(t, e); now != before {
			t.Fatalf("%s: wrote %s (before %s)", c.name, now, before)
		}
	}
	// A merchant may not upload.
	res, b := e.do(t, "POST", "/v1/bank_statements", e.keys[orchestrator.RoleMerchant], strings.NewReader(camt),
		map[string]string{"Content-Type": "application/xml", "Idempotency-Key": "m-1"})
	wantProblem(t, res, b, 403, "forbidden")

	// The good file: 201, the same key replays it, another key answers it
	// stored, the same id with other content is a conflict.
	up := func(key, body string) (*http.Response, []byte) {
		return e.do(t, "POST", "/v1/bank_statements", finance, strings.NewReader(body),
			map[string]string{"Content-Type": "application/xml", "Idempotency-Key": key})
	}
	res, b = up("good", camt)
	wantStatus(t, res, b, 201)
	res2, b2 := up("good", camt)
	if res2.StatusCode != 201 || !bytes.Equal(b, b2) || res2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", res2.StatusCode, b2)
	}
	res, b = up("good-again", camt)
	wantStatus(t, res, b, 200)
	res, b = up("changed", strings.Replace(camt, ">1234.56<", ">1234.57<", 1))
	wantProblem(t, res, b, 409, "conflict")
	if got := bankRows(t, e); !strings.HasPrefix(got, "statements=1 lines=3 ") {
		t.Fatalf("after the uploads: %s", got)
	}
}
