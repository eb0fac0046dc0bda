package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

// replicaReads sums payorch_read_replica_reads_total for servedBy and
// reason on srv's /metrics.
func replicaReads(t *testing.T, srv *server, servedBy, reason string) int {
	t.Helper()
	st, body := call(t, "GET", srv.base+"/metrics", "", "", "")
	if st != 200 {
		t.Fatalf("/metrics: %d", st)
	}
	re := regexp.MustCompile(`(?m)^payorch_read_replica_reads_total\{([^}]*)\} (\d+)`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		if regexp.MustCompile(`reason="`+reason+`"`).MatchString(m[1]) && regexp.MustCompile(`served_by="`+servedBy+`"`).MatchString(m[1]) {
			v, _ := strconv.Atoi(m[2])
			n += v
		}
	}
	return n
}

// TestServeReadsFinanceListsFromTheReplica runs `payorch serve` with
// DATABASE_READ_URL naming a real streaming standby of its primary:
// finance's list is served by the standby; with the standby's replay
// paused, a run started over the API is found at once by its id and in
// the list (the reads wait PAYORCH_READ_REPLICA_MAX_WAIT, then ask the
// primary, counted), and the run, paired on the primary, succeeds.
func TestServeReadsFinanceListsFromTheReplica(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewCluster(t)
	standby := pgtest.NewStandby(t, primary)
	w := newWorld(t, primary.ConnString("postgres"))
	_, finance, err := orchestrator.NewService(orchestrator.Config{Pool: w.pool}).CreateAPIKey(context.Background(),
		orchestrator.RoleFinance, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, w.env(map[string]string{"DATABASE_READ_URL": standby.ConnString("postgres"),
		"PAYORCH_READ_REPLICA_MAX_WAIT": "300ms", "PAYORCH_RECONCILE_SCHEDULE": "off"}))
	if a := authorize(srv.base, w.key, "replica-1", `{"amount_minor":1500,"currency":"EUR"}`); a.status != 201 {
		t.Fatalf("authorize: %d %s", a.status, a.body)
	}

	deadline := time.Now().Add(10 * time.Second)
	for replicaReads(t, srv, "replica", "caught_up") == 0 {
		if st, body := call(t, "GET", srv.base+"/v1/reconciliation/runs", finance, "", ""); st != 200 {
			t.Fatalf("runs: %d %s", st, body)
		}
		if time.Now().After(deadline) {
			t.Fatal("no finance read was served by the standby")
		}
	}

	replica := pgtest.Pool(t, standby.ConnString("postgres"))
	if _, err := replica.Exec(context.Background(), `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	lagging := replicaReads(t, srv, "primary", "lagging")
	date := time.Now().UTC().Format(time.DateOnly)
	st, body := call(t, "POST", srv.base+"/v1/reconciliation/runs", finance, "run-1", fmt.Sprintf(`{"provider":"fake","date":%q}`, date))
	var run struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &run); st != 202 || err != nil || run.ID == 0 {
		t.Fatalf("start a run: %d %s", st, body)
	}
	for deadline := time.Now().Add(30 * time.Second); run.Status != "succeeded"; {
		st, body := call(t, "GET", fmt.Sprintf("%s/v1/reconciliation/runs/%d", srv.base, run.ID), finance, "", "")
		if err := json.Unmarshal(body, &run); st != 200 || err != nil {
			t.Fatalf("the run right after it started: %d %s", st, body)
		}
		if run.Status == "failed" || time.Now().After(deadline) {
			t.Fatalf("run: %s", body)
		}
	}
	st, body = call(t, "GET", srv.base+"/v1/reconciliation/runs", finance, "", "")
	var list struct {
		Data []struct {
			ID int64 `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); st != 200 || err != nil || len(list.Data) != 1 || list.Data[0].ID != run.ID {
		t.Fatalf("runs right after one: %d %s", st, body)
	}
	if n := replicaReads(t, srv, "primary", "lagging"); n < lagging+3 { // the run by id, its pairing, the list
		t.Fatalf("%d reads fell back for the paused standby, want at least %d", n, lagging+3)
	}
}
