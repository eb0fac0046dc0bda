package httpapi_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers/fake"
)

type runJSON struct {
	ID               int64  `json:"id"`
	Status           string `json:"status"`
	Version          int    `json:"version"`
	DiscrepancyCount int64  `json:"discrepancy_count"`
	LocalCount       int64  `json:"local_count"`
}

// waitRun polls a run until it is no longer running.
func (e *env) waitRun(t *testing.T, id int64) runJSON {
	t.Helper()
	var r runJSON
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("run %d to finish", id), testkit.Until(func() bool {
		res, b := e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d", id), e.keys[orchestrator.RoleFinance], nil, nil)
		if res.StatusCode != 200 {
			t.Fatalf("get run: %d %s", res.StatusCode, b)
		}
		r = decode[runJSON](t, b)
		return r.Status != "running"
	}))
	return r
}

func TestFinanceAPI(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	fin := e.keys[orchestrator.RoleFinance]
	ctx := context.Background()
	p := e.authorizeOK(t, "rec-1", 1000)
	e.authorizeOK(t, "rec-2", 2000)
	if err := e.fake.Drift(ctx, fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef, Field: fake.AmountAuthorized, AmountMinor: 1100}); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	body := `{"provider":"fake","date":"` + today + `"}`

	// Today has begun, so it can be reconciled (so far).
	res, b := e.post(t, "/v1/reconciliation/runs", fin, "run-1", body)
	if res.StatusCode != 202 || !strings.HasPrefix(res.Header.Get("Location"), "/v1/reconciliation/runs/") {
		t.Fatalf("start run: %d %s", res.StatusCode, b)
	}
	started := decode[runJSON](t, b)
	run := e.waitRun(t, started.ID)
	if run.Status != "succeeded" || run.DiscrepancyCount != 1 || run.LocalCount != 2 {
		t.Fatalf("run %+v", run)
	}
	// The same key replays; another key is version 2.
	res, b2 := e.post(t, "/v1/reconciliation/runs", fin, "run-1", body)
	if res.StatusCode != 202 || res.Header.Get("Idempotent-Replayed") != "true" || string(b2) != string(b) {
		t.Fatalf("replayed start: %d %s", res.StatusCode, b2)
	}
	res, b = e.post(t, "/v1/reconciliation/runs", fin, "run-2", body)
	if v2 := e.waitRun(t, decode[runJSON](t, b).ID); v2.Version != 2 {
		t.Fatalf("second run %+v", v2)
	}

	res, b = e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies?type=amount_mismatch", run.ID), fin, nil, nil)
	list := decode[struct {
		Data []struct {
			ID        int64  `json:"id"`
			PaymentID string `json:"payment_id"`
			Expected  string `json:"expected"`
			Actual    string `json:"actual"`
		} `json:"data"`
	}](t, b)
	if res.StatusCode != 200 || len(list.Data) != 1 || list.Data[0].PaymentID != p.ID || list.Data[0].Expected != "1000" || list.Data[0].Actual != "1100" {
		t.Fatalf("discrepancies: %d %s", res.StatusCode, b)
	}
	res, b = e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies?type=missing_locally", run.ID), fin, nil, nil)
	if res.StatusCode != 200 || !strings.Contains(string(b), `"data":[]`) {
		t.Fatalf("filtered: %d %s", res.StatusCode, b)
	}
	res, b = e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies?type=bogus", run.ID), fin, nil, nil)
	wantProblem(t, res, b, 400, "validation_failed")

	res, b = e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies", run.ID), fin, nil, map[string]string{"Accept": "text/csv"})
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d %s", res.StatusCode, b)
	}
	recs, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil || len(recs) != 2 || recs[1][2] != "amount_mismatch" || recs[1][4] != p.ID {
		t.Fatalf("csv %q (%v)", b, err)
	}

	did := list.Data[0].ID
	resolve := fmt.Sprintf("/v1/reconciliation/discrepancies/%d/resolve", did)
	res, b = e.post(t, resolve, fin, "res-1", `{"note":"provider corrected it"}`)
	if res.StatusCode != 200 || !strings.Contains(string(b), `"resolved_by":"key_`) || !strings.Contains(string(b), `"resolution_note":"provider corrected it"`) {
		t.Fatalf("resolve: %d %s", res.StatusCode, b)
	}
	res, b = e.post(t, resolve, fin, "res-2", `{"note":"again"}`)
	wantProblem(t, res, b, 409, "conflict")
	res, b = e.post(t, resolve, fin, "res-3", `{"note":""}`)
	wantProblem(t, res, b, 400, "validation_failed")
	res, b = e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies?status=open", run.ID), fin, nil, nil)
	if !strings.Contains(string(b), `"data":[]`) {
		t.Fatalf("open after resolving: %s", b)
	}

	// Roles: merchants and support do not see reconciliation.
	for _, role := range []orchestrator.Role{orchestrator.RoleMerchant, orchestrator.RoleSupport} {
		res, b := e.do(t, "GET", "/v1/reconciliation/runs", e.keys[role], nil, nil)
		wantProblem(t, res, b, 403, "forbidden")
	}
	res, b = e.do(t, "GET", "/v1/reconciliation/runs?provider=fake", e.keys[orchestrator.RoleAdmin], nil, nil)
	if res.StatusCode != 200 || strings.Count(string(b), `"object":"reconciliation_run"`) != 2 {
		t.Fatalf("list runs: %d %s", res.StatusCode, b)
	}
	// Bad input changes nothing.
	for _, bad := range []string{`{"provider":"fake","date":"2026-13-01"}`, `{"provider":"paypal","date":"2026-11-01"}`,
		`{"provider":"fake","date":"2999-01-01"}`, `{"provider":"fake"}`, `{"provider":"fake","date":"2026-11-01","x":1}`} {
		res, b := e.post(t, "/v1/reconciliation/runs", fin, "bad-"+bad, bad)
		wantProblem(t, res, b, 400, "validation_failed")
	}
	res, b = e.do(t, "GET", "/v1/reconciliation/runs/999999", fin, nil, nil)
	wantProblem(t, res, b, 404, "not_found")
	if n := e.count(t, `SELECT count(*) FROM reconciliation_runs`); n != 2 {
		t.Fatalf("%d runs", n)
	}

}

// Reconciliation dates outside 2000-01-01..9999-12-31 are the client's
// mistake (400 naming date), never a database error (500).
func TestReconciliationDatesOutOfRangeAreRefused(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	fin := e.keys[orchestrator.RoleFinance]
	for _, date := range []string{"0000-01-01", "0001-01-01", "1999-12-31"} {
		res, b := e.do(t, "GET", "/v1/reconciliation/runs?date="+date, fin, nil, nil)
		if p := wantProblem(t, res, b, 400, "validation_failed"); p.Param != "date" {
			t.Errorf("GET date=%s: param %q, want date", date, p.Param)
		}
		res, b = e.post(t, "/v1/reconciliation/runs", fin, "date-"+date, `{"provider":"fake","date":"`+date+`"}`)
		if p := wantProblem(t, res, b, 400, "validation_failed"); p.Param != "date" {
			t.Errorf("POST date %s: param %q, want date", date, p.Param)
		}
	}
	res, b := e.do(t, "GET", "/v1/reconciliation/runs?date=9999-12-31", fin, nil, nil)
	if res.StatusCode != 200 {
		t.Fatalf("GET date=9999-12-31: %d %s", res.StatusCode, b)
	}
	if n := e.count(t, `SELECT count(*) FROM reconciliation_runs`); n != 0 {
		t.Fatalf("%d runs recorded", n)
	}
}
