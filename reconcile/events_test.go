package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/orchestrator/webhooksig"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// runSummary is the data of a reconciliation.run.… event.
type runSummary struct {
	ID               int64            `json:"id"`
	Object           string           `json:"object"`
	Provider         string           `json:"provider"`
	BusinessDate     string           `json:"business_date"`
	Version          int              `json:"version"`
	Status           string           `json:"status"`
	LocalCount       int64            `json:"local_count"`
	ProviderCount    int64            `json:"provider_count"`
	MatchedCount     int64            `json:"matched_count"`
	DiscrepancyCount int64            `json:"discrepancy_count"`
	CategoryCounts   map[string]int64 `json:"category_counts"`
	Error            *string          `json:"error"`
}

// staffEvents lists the staff events of type typ, as finance reads them.
func (e *env) staffEvents(t *testing.T, typ string) []orchestrator.WebhookEvent {
	t.Helper()
	evs, _, err := e.svc.ListEvents(context.Background(), orchestrator.Scope{Staff: true},
		orchestrator.EventFilter{Type: typ, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A finished run writes exactly one event in the transaction of its final
// status: completed with its counts when it succeeds, failed when its
// transaction rolls back (and no completed event then). Its deliveries go
// to the staff endpoints that want it, never to a merchant's; finance
// reads it, a merchant and support get a 404.
func TestReconciliationRunEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	e.aDay(t)
	dropped := e.pay(t, 2000, "EUR", "", "capture:0")
	if err := e.fc.Drift(ctx, fake.Drift{Kind: fake.DriftDrop, Ref: *dropped.ProviderRef}); err != nil {
		t.Fatal(err)
	}
	in := func(types ...string) webhooks.WebhookEndpointInput {
		return webhooks.WebhookEndpointInput{URL: "https://example.com/hooks", EventTypes: types}
	}
	hooks := webhooks.New(webhooks.Config{Pool: e.pool, Clock: e.clk.Now})
	merchantEP, err := hooks.CreateWebhookEndpoint(ctx, e.tenant, in("*"), "key_merchant")
	if err != nil {
		t.Fatal(err)
	}
	allEP, err := hooks.CreateWebhookEndpoint(ctx, 0, in("*"), "key_finance")
	if err != nil {
		t.Fatal(err)
	}
	failuresEP, err := hooks.CreateWebhookEndpoint(ctx, 0, in("reconciliation.run.failed"), "key_finance")
	if err != nil {
		t.Fatal(err)
	}

	// The first run's transaction fails at its commit, after the status
	// (and its event) were written: nothing of it stays but the failure.
	if _, err := e.pool.Exec(ctx, `
		CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
		CREATE CONSTRAINT TRIGGER refuse_commit AFTER UPDATE ON reconciliation_runs
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.status = 'succeeded')
			EXECUTE FUNCTION refuse_commit()`); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(runTime)
	if _, err := e.rec.Reconcile(ctx, "fake", day, reconcile.TriggerAPI, "test"); err == nil {
		t.Fatal("the run did not fail")
	}
	if evs := e.staffEvents(t, "reconciliation.run.completed"); len(evs) != 0 {
		t.Fatalf("a rolled back run wrote %+v", evs)
	}
	failed := e.staffEvents(t, "reconciliation.run.failed")
	if len(failed) != 1 {
		t.Fatalf("%d failed events, want 1", len(failed))
	}
	var fs runSummary
	if err := json.Unmarshal(failed[0].Data, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Status != "failed" || fs.Version != 1 || fs.Error == nil || *fs.Error == "" || fs.Object != "reconciliation_run" {
		t.Fatalf("failed run's event %s", failed[0].Data)
	}
	if _, err := e.pool.Exec(ctx, `DROP TRIGGER refuse_commit ON reconciliation_runs`); err != nil {
		t.Fatal(err)
	}

	run, _ := e.run(t)
	completed := e.staffEvents(t, "reconciliation.run.completed")
	if len(completed) != 1 {
		t.Fatalf("%d completed events, want 1", len(completed))
	}
	ev := completed[0]
	if ev.TenantID != nil || ev.PaymentID != nil || ev.Sequence != nil || ev.Object != "event" {
		t.Fatalf("event %+v", ev)
	}
	var got runSummary
	if err := json.Unmarshal(ev.Data, &got); err != nil {
		t.Fatal(err)
	}
	want := runSummary{ID: run.ID, Object: "reconciliation_run", Provider: "fake", BusinessDate: run.BusinessDate,
		Version: 2, Status: "succeeded", LocalCount: run.LocalCount, ProviderCount: run.ProviderCount,
		MatchedCount: run.MatchedCount, DiscrepancyCount: run.DiscrepancyCount, CategoryCounts: run.CategoryCounts}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Fatalf("event data:\n got  %s\n want %s", g, w)
	}
	if run.LocalCount == 0 || run.DiscrepancyCount == 0 {
		t.Fatalf("the day proves little: %+v", run)
	}

	// Deliveries: both events to the "*" staff endpoint, the failure to
	// the other, none to the merchant's.
	rows, err := e.pool.Query(ctx, `
		SELECT e.type || ' ' || d.endpoint_id FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
		WHERE e.tenant_id IS NULL OR d.endpoint_id <> $1 ORDER BY 1`, merchantEP.ID)
	if err != nil {
		t.Fatal(err)
	}
	var deliveries []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		deliveries = append(deliveries, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantDeliveries := []string{"reconciliation.run.completed " + allEP.ID, "reconciliation.run.failed " + allEP.ID,
		"reconciliation.run.failed " + failuresEP.ID}
	slices.Sort(wantDeliveries)
	if !slices.Equal(deliveries, wantDeliveries) {
		t.Fatalf("deliveries:\n got  %q\n want %q", deliveries, wantDeliveries)
	}

	// Finance reads it; a merchant and support do not see it.
	if got, err := e.svc.GetEvent(ctx, orchestrator.Scope{Staff: true}, ev.ID); err != nil || got.ID != ev.ID {
		t.Fatalf("finance reads %+v %v", got, err)
	}
	for who, sc := range map[string]orchestrator.Scope{"merchant": {TenantID: e.tenant}, "support": {}} {
		if _, err := e.svc.GetEvent(ctx, sc, ev.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("%s reads a staff event: %v", who, err)
		}
		evs, _, err := e.svc.ListEvents(ctx, sc, orchestrator.EventFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.TenantID == nil {
				t.Fatalf("%s lists a staff event %+v", who, ev)
			}
		}
		if len(evs) == 0 {
			t.Fatalf("%s lists no payment events", who)
		}
	}
	// Finance lists the payments' events too, and the staff events.
	all, _, err := e.svc.ListEvents(ctx, orchestrator.Scope{Staff: true}, orchestrator.EventFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	staffN := 0
	for _, ev := range all {
		if ev.TenantID == nil {
			staffN++
		}
	}
	if staffN != 2 || staffN == len(all) {
		t.Fatalf("finance lists %d staff events of %d", staffN, len(all))
	}
}

// A staff event is delivered like any other: signed, with tenant_id null.
func TestReconciliationRunEventDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	var mu sync.Mutex
	var bodies [][]byte
	var sigs []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, sigs = append(bodies, b), append(sigs, r.Header.Get(webhooksig.Header))
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	svc := orchestrator.NewService(orchestrator.Config{Pool: e.pool, Clock: e.clk.Now})
	hooks := webhooks.New(webhooks.Config{Pool: e.pool, Clock: e.clk.Now, AllowPrivate: true})
	ep, err := hooks.CreateWebhookEndpoint(ctx, 0, webhooks.WebhookEndpointInput{URL: recv.URL,
		EventTypes: []string{"reconciliation.run.completed"}}, "key_finance")
	if err != nil {
		t.Fatal(err)
	}
	e.pay(t, 1000, "EUR", "")
	run, _ := e.run(t)
	st, err := hooks.DeliverWebhooks(ctx)
	if err != nil || st.Delivered != 1 {
		t.Fatalf("delivered %+v %v", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("%d requests", len(bodies))
	}
	if err := webhooksig.Verify(sigs[0], bodies[0], ep.Secret, 5*time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Type     string     `json:"type"`
		TenantID *int64     `json:"tenant_id"`
		Data     runSummary `json:"data"`
	}
	if err := json.Unmarshal(bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "reconciliation.run.completed" || got.TenantID != nil || got.Data.ID != run.ID || got.Data.LocalCount != run.LocalCount {
		t.Fatalf("body %s", bodies[0])
	}
	mu.Unlock()

	// Finance reads the staff event's deliveries and redelivers it; a
	// merchant and support do not see them, and finance does not see a
	// merchant's deliveries.
	var evID string
	if err := json.Unmarshal(bodies[0], &struct {
		ID *string `json:"id"`
	}{&evID}); err != nil {
		t.Fatal(err)
	}
	staff := orchestrator.Scope{Staff: true}
	ds, err := hooks.EventDeliveries(ctx, staff, evID)
	if err != nil || len(ds) != 1 || ds[0].EndpointID != ep.ID || ds[0].Status != "delivered" || len(ds[0].Tries) != 1 {
		t.Fatalf("finance reads deliveries %+v %v", ds, err)
	}
	ds, err = hooks.RedeliverEvent(ctx, staff, evID)
	if err != nil || len(ds) != 1 || ds[0].Status != "pending" {
		t.Fatalf("finance redelivers %+v %v", ds, err)
	}
	if st, err := hooks.DeliverWebhooks(ctx); err != nil || st.Delivered != 1 {
		t.Fatalf("redelivered %+v %v", st, err)
	}
	for who, sc := range map[string]orchestrator.Scope{"merchant": {TenantID: e.tenant}, "support": {}} {
		if _, err := hooks.EventDeliveries(ctx, sc, evID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("%s reads a staff event's deliveries: %v", who, err)
		}
		if _, err := hooks.RedeliverEvent(ctx, sc, evID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("%s redelivers a staff event: %v", who, err)
		}
	}
	merchantEvs, _, err := svc.ListEvents(ctx, orchestrator.Scope{TenantID: e.tenant}, orchestrator.EventFilter{Limit: 1})
	if err != nil || len(merchantEvs) != 1 {
		t.Fatalf("merchant events %+v %v", merchantEvs, err)
	}
	if _, err := hooks.EventDeliveries(ctx, staff, merchantEvs[0].ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("finance reads a merchant's deliveries: %v", err)
	}
	if _, err := hooks.RedeliverEvent(ctx, staff, merchantEvs[0].ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("finance redelivers a merchant's event: %v", err)
	}
	mu.Lock()
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) {
		t.Fatalf("%d requests after the redelivery", len(bodies))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A run whose instance died (its lease ran out) is recorded failed by
// FailAbandoned, once, with its reconciliation.run.failed event; if its
// executor was only slow and finishes afterwards, what it found is
// refused, and the run stays failed with no completed event.
func TestAbandonedRunIsRecordedFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	e.aDay(t)
	e.clk.Set(runTime)
	run, err := e.rec.Begin(ctx, "fake", day, reconcile.TriggerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.rec.FailAbandoned(ctx); err != nil || n != 0 {
		t.Fatalf("a live run was recorded abandoned: %d %v", n, err)
	}
	e.clk.Set(runTime.Add(3 * time.Minute)) // past its 2-minute lease
	if n, err := e.rec.FailAbandoned(ctx); err != nil || n != 1 {
		t.Fatalf("FailAbandoned = %d, %v; want 1", n, err)
	}
	if n, err := e.rec.FailAbandoned(ctx); err != nil || n != 0 {
		t.Fatalf("FailAbandoned again = %d, %v; want 0", n, err)
	}
	var status string
	if err := e.pool.QueryRow(ctx, `SELECT status FROM reconciliation_runs WHERE id = $1`, run.ID).Scan(&status); err != nil || status != "failed" {
		t.Fatalf("stored status %q %v", status, err)
	}
	failed := e.staffEvents(t, "reconciliation.run.failed")
	if len(failed) != 1 {
		t.Fatalf("%d failed events, want 1", len(failed))
	}
	var fs runSummary
	if err := json.Unmarshal(failed[0].Data, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.ID != run.ID || fs.Status != "failed" || fs.Error == nil || *fs.Error != "abandoned: the instance running it stopped; re-run it" {
		t.Fatalf("event %s", failed[0].Data)
	}

	// The executor was only slow: it works now, and its finish is refused.
	if _, err := e.rec.Execute(ctx, run); err == nil {
		t.Fatal("an abandoned run finished")
	}
	got, err := e.rec.GetRun(ctx, run.ID)
	if err != nil || got.Status != "failed" {
		t.Fatalf("run after its late finish: %+v %v", got, err)
	}
	if evs := e.staffEvents(t, "reconciliation.run.completed"); len(evs) != 0 {
		t.Fatalf("an abandoned run announced completion: %+v", evs)
	}
	if evs := e.staffEvents(t, "reconciliation.run.failed"); len(evs) != 1 {
		t.Fatalf("%d failed events after the late finish, want 1", len(evs))
	}
}
