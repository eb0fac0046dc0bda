package orchestrator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/providers/fake"
)

// historyTables are the partitioned history tables (migrations 00013,
// 00017); the first two follow the payments' retention, the rest the
// outbox's.
var historyTables = []string{"payment_events", "provider_webhook_events", "events", "webhook_deliveries",
	"webhook_delivery_attempts"}

// partitionOf names table's partition of t's month.
func partitionOf(table string, t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%s_y%04dm%02d", table, t.Year(), int(t.Month()))
}

// exists reports whether the table name exists.
func (e *moneyEnv) exists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	if err := e.svc.Pool().QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// MaintainHistory makes the months ahead of every history table, and with
// a retention drops the months past it, whole, each table by its own
// retention: an old payment keeps its row and loses its history and
// events, a recent one keeps both, and the months kept are untouched.
// The outbox's ids are time-ordered, so an event, its deliveries and
// their attempts fall in the partition of the event's month.
func TestMaintainHistory(t *testing.T) {
	t.Parallel()
	e := newInboundWorld(t, 0).newTenant(t)
	ctx := context.Background()
	now := e.clk.Now()
	if _, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{}); err != nil {
		t.Fatal(err)
	}
	for _, table := range historyTables {
		for i := range orchestrator.HistoryMonthsAhead + 1 {
			if name := partitionOf(table, now.AddDate(0, i, 0)); !e.exists(t, name) {
				t.Fatalf("%s missing after MaintainHistory", name)
			}
		}
	}
	if m, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{}); err != nil || m != (orchestrator.HistoryMaintenance{}) {
		t.Fatalf("a second run did %+v %v", m, err)
	}
	e.endpoint(t)

	// A payment two years ago, its history, events, deliveries, a
	// delivery attempt and a provider webhook in that month's partitions.
	old := now.AddDate(-2, 0, 0)
	for _, table := range historyTables {
		if _, err := e.svc.Pool().Exec(ctx, `SELECT history_ensure_partitions($1, $2, $3)`, table, old, now); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Set(old)
	oldPay := e.authorized(t, "history-old", 500)
	e.deliverEvent(t, event(oldPay, fake.EventHoldExpired, 500), orchestrator.InboundApplied)
	e.clk.Set(now)
	recent := e.authorized(t, "history-recent", 700)
	var oldEvent string
	if err := e.svc.Pool().QueryRow(ctx, `SELECT id FROM events WHERE payment_id = $1 ORDER BY sequence LIMIT 1`,
		oldPay.ID).Scan(&oldEvent); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pool().Exec(ctx, `INSERT INTO webhook_delivery_attempts (event_id, endpoint_id, attempt, started_at,
		latency_ms, status_code) SELECT event_id, endpoint_id, 1, $2, 12.5, 200 FROM webhook_deliveries WHERE event_id = $1`,
		oldEvent, old); err != nil {
		t.Fatal(err)
	}
	for _, table := range historyTables {
		if n := e.count(t, `SELECT count(*) FROM `+partitionOf(table, old)); n == 0 {
			t.Fatalf("the old payment's rows are not in %s", partitionOf(table, old))
		}
	}
	// The id says when: 12 hex digits of the event's millisecond.
	ms, err := strconv.ParseInt(oldEvent[4:16], 16, 64)
	if err != nil || ms != old.UnixMilli() {
		t.Fatalf("event id %s: time %d, want %d (%v)", oldEvent, ms, old.UnixMilli(), err)
	}
	sc := orchestrator.Scope{TenantID: e.tenant}
	if _, err := e.svc.GetEvent(ctx, sc, oldEvent); err != nil {
		t.Fatalf("the old event before the retention: %v", err)
	}
	// Events from before 00017 have random ids and sit in the default
	// partition; those older than the retention go with it.
	legacy := func(at time.Time) string {
		id := fmt.Sprintf("evt_f%031x", at.UnixNano())
		if _, err := e.svc.Pool().Exec(ctx, `INSERT INTO events (id, tenant_id, type, object, created_at)
			VALUES ($1, $2, 'payment.authorized', '{}', $3)`, id, e.tenant, at); err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldLegacy, recentLegacy := legacy(old), legacy(now)
	recentRows := make(map[string]int, len(historyTables))
	for _, table := range historyTables {
		recentRows[table] = e.count(t, `SELECT count(*) FROM `+partitionOf(table, now))
	}

	// The outbox kept 12 months, the payments' history everything: the
	// outbox's old months go (12 a table, from two years ago on), the
	// timeline and provider webhooks stay.
	m, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{Events: 12})
	if err != nil || m.Dropped != 3*12 {
		t.Fatalf("outbox retention 12 months: %+v %v", m, err)
	}
	for _, table := range historyTables {
		gone := !e.exists(t, partitionOf(table, old))
		if outbox := table != "payment_events" && table != "provider_webhook_events"; gone != outbox {
			t.Fatalf("%s: dropped %v with the outbox's retention only", partitionOf(table, old), gone)
		}
	}
	if _, err := e.svc.GetEvent(ctx, sc, oldEvent); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("the old event after the retention: %v", err)
	}
	if n := e.count(t, `SELECT count(*) FROM events WHERE id = ANY ($1)`, []string{oldLegacy, recentLegacy}); n != 1 {
		t.Fatalf("%d of the two legacy events are left, want the recent one", n)
	}

	// Both kept 12 months: the rest of the old months go.
	m, err = e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{Payments: 12, Events: 12})
	if err != nil || m.Dropped != 2*12 {
		t.Fatalf("retention 12 months: %+v %v", m, err)
	}
	for _, table := range historyTables {
		for _, gone := range []time.Time{old, now.AddDate(0, -13, 0)} {
			if e.exists(t, partitionOf(table, gone)) {
				t.Fatalf("%s kept past the retention", partitionOf(table, gone))
			}
		}
		for _, keep := range []time.Time{now.AddDate(0, -12, 0), now} {
			if !e.exists(t, partitionOf(table, keep)) {
				t.Fatalf("%s dropped within the retention", partitionOf(table, keep))
			}
		}
		if n := e.count(t, `SELECT count(*) FROM `+partitionOf(table, now)); n != recentRows[table] {
			t.Fatalf("%s: %d rows, had %d", partitionOf(table, now), n, recentRows[table])
		}
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1`, oldPay.ID); n != 0 {
		t.Fatalf("the old payment keeps %d history rows", n)
	}
	if _, err := e.svc.GetPayment(ctx, sc, oldPay.ID); err != nil {
		t.Fatalf("the old payment itself: %v", err)
	}
	if got := e.eventTypes(t, recent.ID); !slices.Equal(got, []string{"payment.pending", "payment.authorized"}) {
		t.Fatalf("the recent payment's events: %v", got)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events_default`); n != 0 {
		t.Fatalf("%d rows fell to the default partition", n)
	}
}

// Making a partition waits for its table's lock, and every writer of the
// table queues behind that wait; MaintainHistory waits at most
// historyLockTimeout (100 ms) at a time, so a payment made while a long
// transaction keeps the outbox busy is not held up until it ends, and the
// partition is made once the transaction is gone.
func TestMaintainHistoryDoesNotStallPayments(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	ctx := context.Background()
	if _, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{}); err != nil {
		t.Fatal(err)
	}
	ahead := partitionOf("events", e.clk.Now().AddDate(0, orchestrator.HistoryMonthsAhead, 0))
	if _, err := e.svc.Pool().Exec(ctx, `DROP TABLE `+ahead); err != nil {
		t.Fatal(err)
	}
	// A long reader of events (a finance export, a delivery pass).
	long, err := e.svc.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Rollback(ctx) }()
	if _, err := long.Exec(ctx, `SELECT count(*) FROM events`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{})
		done <- err
	}()
	var slowest time.Duration
	for i := range 20 {
		start := time.Now()
		e.authorized(t, fmt.Sprintf("during-%d", i), 100)
		slowest = max(slowest, time.Since(start))
		// Pacing, not waiting: the authorizes are spread over the two
		// seconds the partition waits for its lock.
		time.Sleep(100 * time.Millisecond)
	}
	// Without the lock timeout every authorize queues behind the
	// partition's lock until the long transaction ends (not before this
	// test does); with it, one waits at most about 100 ms. 3 s tells the
	// two apart even on a machine loaded twenty-fold (1 s did not, once).
	if slowest > 3*time.Second {
		t.Fatalf("an authorize took %v while a partition waited for its lock", slowest)
	}
	if e.exists(t, ahead) {
		t.Fatalf("%s made under the long transaction", ahead)
	}
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("MaintainHistory once the transaction ended: %v", err)
	}
	if !e.exists(t, ahead) {
		t.Fatalf("%s not made", ahead)
	}
}

// The delivery worker holds no transaction while an endpoint takes its
// time to answer, so a partition change of the outbox goes while a send
// is in flight, payments go on, and the attempt is recorded when it ends.
// While a change holds outboxPassLock, a pass claims nothing (it would
// read the outbox the change is waiting to lock) and the next one does.
func TestMaintainHistoryDuringDeliveries(t *testing.T) {
	t.Parallel()
	e := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate).newTenant(t)
	ctx := context.Background()
	if _, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{}); err != nil {
		t.Fatal(err)
	}
	ahead := partitionOf("webhook_deliveries", e.clk.Now().AddDate(0, orchestrator.HistoryMonthsAhead, 0))
	if _, err := e.svc.Pool().Exec(ctx, `DROP TABLE `+ahead); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	rcv := newReceiver(t)
	var arrived atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		arrived.Add(1)
		<-release
		rcv.Config.Handler.ServeHTTP(w, req)
	}))
	t.Cleanup(slow.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	e.rawEndpoint(t, slow.URL, "whsec_slow", "payment.authorized")
	e.authorized(t, "first", 100)
	passed := make(chan webhooks.DeliveryStats, 1)
	go func() {
		st, err := e.hooks.DeliverWebhooks(ctx)
		if err != nil {
			t.Error(err)
		}
		passed <- st
	}()
	testkit.WaitFor(t, 30*time.Second, "the delivery reached the slow endpoint",
		testkit.Until(func() bool { return arrived.Load() > 0 }))

	start := time.Now()
	if _, err := e.svc.MaintainHistory(ctx, orchestrator.HistoryRetention{}); err != nil {
		t.Fatalf("MaintainHistory during a send: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("MaintainHistory took %v while a send was in flight", took)
	}
	if !e.exists(t, ahead) {
		t.Fatalf("%s not made", ahead)
	}
	start = time.Now()
	second := e.authorized(t, "second", 100)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("an authorize took %v while a send was in flight", took)
	}

	// A partition change in progress: no claim.
	change, err := e.svc.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = change.Rollback(ctx) }()
	if _, err := change.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('history_partitions:outbox', 0))`); err != nil {
		t.Fatal(err)
	}
	if st := e.deliver(t); st.Sent != 0 {
		t.Fatalf("a pass sent %+v while a partition change held the lock", st)
	}
	if err := change.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// The pass in flight records its attempt, and it or the next pass
	// sends the second payment's event.
	open()
	st := <-passed
	next := e.deliver(t)
	if st.Delivered+next.Delivered != 2 || e.count(t, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`) != 2 {
		t.Fatalf("the pass in flight %+v, the next %+v (the second payment %s's event)", st, next, second.ID)
	}
}
