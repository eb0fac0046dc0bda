package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

// Bank statements (finance, admin): uploaded as the bank sends them,
// camt.053 XML or CSV, so they have a body limit of their own and are the
// API's only bodies that are not JSON.

const (
	routeBankStatements = "/v1/bank_statements"
	opImportStatement   = "POST " + routeBankStatements
)

// MaxStatementBytes bounds an uploaded bank statement, 20 MiB: a year of
// a busy account's daily camt.053 entries. The API's 64 KiB limit
// (MaxBodyBytes) does not apply to it.
const MaxStatementBytes = 20 << 20

// isStatementUpload reports whether c uploads a bank statement, which has
// its own body limit and media types.
func isStatementUpload(c echo.Context) bool {
	return c.Request().Method == http.MethodPost && c.Path() == routeBankStatements
}

// statementFormat maps the upload's media type to its format. Errors:
// unsupported_media_type.
func statementFormat(contentType string) (string, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
	case mt == "application/xml" || mt == "text/xml":
		return reconcile.FormatCAMT053, nil
	case mt == "text/csv":
		return reconcile.FormatCSV, nil
	}
	return "", &orchestrator.Error{Code: orchestrator.CodeUnsupportedMediaType, Param: "Content-Type",
		Message: "a bank statement is application/xml (camt.053) or text/csv"}
}

// createBankStatement: POST /v1/bank_statements?account=&statement_id=
// (finance, admin) with the statement file as the body. The file is read
// whole before the Idempotency-Key is claimed: a bad file is 400
// validation_failed naming the line (CSV: param line[N].column) or the
// entry (camt: Stmt.Ntry[N].Element), and nothing is stored. 201 with
// the statement and its Location once imported; 200 with the statement
// already stored when the account has it (same statement id and
// content). Errors: unsupported_media_type, body_too_large, conflict
// (the account's statement of that id has other content).
func (s *Server) createBankStatement(c echo.Context) error {
	key, err := idempotencyKey(c)
	if err != nil {
		return err
	}
	req := c.Request()
	format, err := statementFormat(req.Header.Get(echo.HeaderContentType))
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, MaxStatementBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &orchestrator.Error{Code: orchestrator.CodeBodyTooLarge, Message: "a bank statement is at most 20 MiB"}
		}
		return &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Param: "body", Message: "the body could not be read", Err: err}
	}
	q := c.QueryParams()
	parsed, err := reconcile.ParseStatement(reconcile.StatementUpload{Format: format, Raw: raw, Account: q.Get("account"),
		StatementID: q.Get("statement_id")})
	if err != nil {
		return err
	}
	// The fingerprint holds the file by its hash, and what was asked of it.
	doc, err := json.Marshal(map[string]string{"account": q.Get("account"), "statement_id": q.Get("statement_id"),
		"format": format, "sha256": parsed.ContentSHA256})
	if err != nil {
		return orchestrator.Internalf("fingerprint: %w", err)
	}
	fp, err := orchestrator.NewFingerprint(opImportStatement, nil, doc)
	if err != nil {
		return orchestrator.Internalf("fingerprint: %w", err)
	}
	p := principal(c)
	return s.idempotent(c, opImportStatement, key, fp, func(ctx context.Context, _ *orchestrator.Claim) (result, error) {
		st, created, err := s.rec.ImportStatement(ctx, parsed, p.KeyID)
		if err != nil {
			return result{}, err
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		stored, err := orchestrator.JSONAnswer(status, st, routeBankStatements+"/"+strconv.FormatInt(st.ID, 10))
		if err != nil {
			return result{}, err
		}
		return finalResult(stored, ""), nil
	})
}

// listBankStatements: GET /v1/bank_statements?account=&limit=&starting_after=
// (finance, admin), newest first.
func (s *Server) listBankStatements(c echo.Context) error {
	q := c.QueryParams()
	f := reconcile.StatementFilter{Account: q.Get("account")}
	var err error
	if f.Limit, f.StartingAfter, err = pageParams(q, 100); err != nil {
		return err
	}
	sts, more, err := s.rec.ListStatements(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(sts, more))
}

// bankStatementWithLines is a statement with a page of its lines.
type bankStatementWithLines struct {
	reconcile.BankStatement
	Lines list[reconcile.StatementLine] `json:"lines"`
}

// getBankStatement: GET /v1/bank_statements/{id}?limit=&starting_after=
// (finance, admin): the statement with a page of its lines in file
// order, limit (1 to 1000, default 100) after line number starting_after.
func (s *Server) getBankStatement(c echo.Context) error {
	id, err := idParam(c, "bank statement")
	if err != nil {
		return err
	}
	q := c.QueryParams()
	limit, err := intParam(q.Get("limit"), "limit", 1, 1000)
	if err != nil {
		return err
	}
	after, err := intParam(q.Get("starting_after"), "starting_after", 1, 1<<31-1)
	if err != nil {
		return err
	}
	st, lines, more, err := s.rec.GetStatement(c.Request().Context(), id, limit, after)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, bankStatementWithLines{BankStatement: st, Lines: newList(lines, more)})
}

// getBankAccount: GET /v1/connectors/{name}/bank_account (finance,
// admin): the account the connector pays out to. Errors: not_found (no
// such connector, or none set).
func (s *Server) getBankAccount(c echo.Context) error {
	a, err := s.rec.BankAccountOf(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}

// putBankAccount: PUT /v1/connectors/{name}/bank_account (admin) with
// {account, match_window_days?} sets it, replacing the one before: 200
// with the setting. Errors: validation_failed naming the field,
// not_found, body_too_large.
func (s *Server) putBankAccount(c echo.Context) error {
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	var req bankAccountRequest
	if err := decodeStrict(raw, &req); err != nil {
		return err
	}
	in := reconcile.BankAccountInput{Account: req.Account}
	if req.MatchWindowDays.set {
		in.MatchWindowDays = &req.MatchWindowDays.n
	}
	a, err := s.rec.SetBankAccount(c.Request().Context(), c.Param("name"), in, principal(c).KeyID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}

// bankAccountRequest is the body of PUT /v1/connectors/{name}/bank_account.
type bankAccountRequest struct {
	Account         string     `json:"account"`
	MatchWindowDays windowDays `json:"match_window_days"`
}

// windowDays is match_window_days: absent means the default, null is
// refused like any other value that is no whole number.
type windowDays struct {
	set bool
	n   int
}

func (w *windowDays) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &w.n); err != nil || string(bytes.TrimSpace(b)) == "null" {
		return &fieldError{"match_window_days", "match_window_days must be a whole number of days from 1 to 14"}
	}
	w.set = true
	return nil
}
