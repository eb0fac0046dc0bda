package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers/fake"
)

// keyID is the public id of an API key: pok_<hex>_<secret> is key_<hex>.
func keyID(t *testing.T, apiKey string) string {
	t.Helper()
	parts := strings.Split(apiKey, "_")
	if len(parts) < 3 || parts[0] != "pok" {
		t.Fatalf("not an API key: %q", apiKey)
	}
	return "key_" + parts[1]
}

// TestStaffIdempotencyKeysAreScopedToTheirAPIKey: staff have no tenant, so
// their keys used to share one scope (tenant 0): an admin reusing the
// Idempotency-Key a finance analyst had used got the analyst's run replayed
// (nothing executed for the admin), or a 409 naming the fields the analyst
// sent. Each staff API key now has a scope of its own, in the database and
// in the replay cache (on here, so both are checked).
func TestStaffIdempotencyKeysAreScopedToTheirAPIKey(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{}, orchestrator.Config{ReplayCache: 100})
	ctx := context.Background()
	_, fin2, err := e.svc.CreateAPIKey(ctx, orchestrator.RoleFinance, 0, "second analyst")
	if err != nil {
		t.Fatal(err)
	}
	staff := []struct{ name, key string }{
		{"finance", e.keys[orchestrator.RoleFinance]},
		{"admin", e.keys[orchestrator.RoleAdmin]},
		{"finance2", fin2},
	}
	// One discrepancy per staff key to resolve, and one more.
	for i := range len(staff) + 1 {
		p := e.authorizeOK(t, fmt.Sprintf("scope-%d", i), 1000)
		if err := e.fake.Drift(ctx, fake.Drift{Kind: fake.DriftAmount, Ref: *p.ProviderRef, Field: fake.AmountAuthorized, AmountMinor: 1100}); err != nil {
			t.Fatal(err)
		}
	}
	today := time.Now().UTC().Format(time.DateOnly)
	runBody := `{"provider":"fake","date":"` + today + `"}`
	const shared = "same-key-for-everyone"

	// Every staff key starts a run with the same key and body: each gets a
	// run of its own, executed for it, not a replay of another's.
	runs := map[string][]byte{}
	var last runJSON
	for _, s := range staff {
		res, b := e.post(t, "/v1/reconciliation/runs", s.key, shared, runBody)
		if res.StatusCode != 202 || res.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%s starts a run: %d replayed=%q %s", s.name, res.StatusCode, res.Header.Get("Idempotent-Replayed"), b)
		}
		run := decode[struct {
			runJSON
			RequestedBy string `json:"requested_by"`
		}](t, b)
		if run.RequestedBy != keyID(t, s.key) {
			t.Fatalf("%s's run was requested by %q, want its own key %s", s.name, run.RequestedBy, keyID(t, s.key))
		}
		runs[s.name] = b
		last = e.waitRun(t, run.ID)
	}
	if n := e.count(t, `SELECT count(*) FROM reconciliation_runs`); n != len(staff) {
		t.Fatalf("%d runs, want one per staff key (%d)", n, len(staff))
	}
	// A different body under the same key is another key's business too.
	res, b := e.post(t, "/v1/reconciliation/runs", fin2, "first-used-by-finance", runBody)
	if res.StatusCode != 202 {
		t.Fatalf("finance2 run: %d %s", res.StatusCode, b)
	}
	e.waitRun(t, decode[runJSON](t, b).ID)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	res, b = e.post(t, "/v1/reconciliation/runs", e.keys[orchestrator.RoleAdmin], "first-used-by-finance",
		`{"provider":"fake","date":"`+yesterday+`"}`)
	if res.StatusCode != 202 {
		t.Fatalf("admin reusing finance2's key with another body: %d %s", res.StatusCode, b)
	}
	e.waitRun(t, decode[runJSON](t, b).ID)

	// Each staff key resolves its own discrepancy with the same key and
	// note: the path differs, so a shared scope made every one after the
	// first a 409 idempotency_key_reused.
	res, b = e.do(t, "GET", fmt.Sprintf("/v1/reconciliation/runs/%d/discrepancies?type=amount_mismatch", last.ID),
		e.keys[orchestrator.RoleFinance], nil, nil)
	list := decode[struct {
		Data []struct {
			ID int64 `json:"id"`
		} `json:"data"`
	}](t, b)
	if res.StatusCode != 200 || len(list.Data) != len(staff)+1 {
		t.Fatalf("discrepancies of run %d: %d %s", last.ID, res.StatusCode, b)
	}
	resolved := map[string][]byte{}
	for i, s := range staff {
		path := fmt.Sprintf("/v1/reconciliation/discrepancies/%d/resolve", list.Data[i].ID)
		res, b := e.post(t, path, s.key, shared, `{"note":"checked with the provider"}`)
		if res.StatusCode != 200 || res.Header.Get("Idempotent-Replayed") != "" ||
			!strings.Contains(string(b), `"resolved_by":"`+keyID(t, s.key)+`"`) {
			t.Fatalf("%s resolves discrepancy %d: %d replayed=%q %s", s.name, list.Data[i].ID, res.StatusCode, res.Header.Get("Idempotent-Replayed"), b)
		}
		resolved[s.name] = b
	}
	// One discrepancy, one key, one note, two staff keys: the second is
	// executed for the admin (already resolved: 409 conflict), not the
	// analyst's answer replayed to it.
	path := fmt.Sprintf("/v1/reconciliation/discrepancies/%d/resolve", list.Data[len(staff)].ID)
	res, b = e.post(t, path, e.keys[orchestrator.RoleFinance], "one-discrepancy", `{"note":"same"}`)
	if res.StatusCode != 200 {
		t.Fatalf("finance resolves: %d %s", res.StatusCode, b)
	}
	res, b = e.post(t, path, e.keys[orchestrator.RoleAdmin], "one-discrepancy", `{"note":"same"}`)
	wantProblem(t, res, b, 409, "conflict")

	// Each key's own retry still replays its own answer.
	for i, s := range staff {
		res, b := e.post(t, "/v1/reconciliation/runs", s.key, shared, runBody)
		if res.StatusCode != 202 || res.Header.Get("Idempotent-Replayed") != "true" || string(b) != string(runs[s.name]) {
			t.Fatalf("%s retries its run: %d replayed=%q %s, want %s", s.name, res.StatusCode, res.Header.Get("Idempotent-Replayed"), b, runs[s.name])
		}
		path := fmt.Sprintf("/v1/reconciliation/discrepancies/%d/resolve", list.Data[i].ID)
		res, b = e.post(t, path, s.key, shared, `{"note":"checked with the provider"}`)
		if res.StatusCode != 200 || res.Header.Get("Idempotent-Replayed") != "true" || string(b) != string(resolved[s.name]) {
			t.Fatalf("%s retries its resolve: %d %s", s.name, res.StatusCode, b)
		}
	}
}
