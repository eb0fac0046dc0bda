package orchestrator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
)

// partitionOf names the payment_events partition of t's month.
func partitionOf(t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("payment_events_y%04dm%02d", t.Year(), int(t.Month()))
}

// MaintainHistory makes the months ahead, and with a retention drops
// the months past it, whole: an old payment keeps its row and loses its
// history, a recent one keeps both, and the months kept are untouched.
func TestMaintainHistory(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	ctx := context.Background()
	exists := func(name string) bool {
		t.Helper()
		var ok bool
		if err := e.svc.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	now := e.clk.Now()
	if _, err := e.svc.MaintainHistory(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i := range orchestrator.HistoryMonthsAhead + 1 {
		if name := partitionOf(now.AddDate(0, i, 0)); !exists(name) {
			t.Fatalf("%s missing after MaintainHistory", name)
		}
	}
	if m, err := e.svc.MaintainHistory(ctx, 0); err != nil || m != (orchestrator.HistoryMaintenance{}) {
		t.Fatalf("a second run did %+v %v", m, err)
	}

	// A payment two years ago, its history in that month's partition.
	old := now.AddDate(-2, 0, 0)
	if _, err := e.svc.Pool().Exec(ctx, `SELECT payment_events_ensure_partitions($1, $2)`, old, now); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(old)
	oldPay := e.authorized(t, "history-old", 500)
	e.clk.Set(now)
	recent := e.authorized(t, "history-recent", 700)
	if n := e.count(t, `SELECT count(*) FROM `+partitionOf(old)); n == 0 {
		t.Fatalf("the old payment's history is not in %s", partitionOf(old))
	}
	recentHistory := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1`, recent.ID)

	// Kept: the 12 months before this one, and this one; dropped: the 12
	// before those (a partition a month from two years ago on).
	m, err := e.svc.MaintainHistory(ctx, 12)
	if err != nil || m.Dropped != 12 {
		t.Fatalf("retention 12 months: %+v %v", m, err)
	}
	for _, gone := range []time.Time{old, now.AddDate(0, -13, 0)} {
		if exists(partitionOf(gone)) {
			t.Fatalf("%s kept past the retention", partitionOf(gone))
		}
	}
	for _, keep := range []time.Time{now.AddDate(0, -12, 0), now} {
		if !exists(partitionOf(keep)) {
			t.Fatalf("%s dropped within the retention", partitionOf(keep))
		}
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1`, oldPay.ID); n != 0 {
		t.Fatalf("the old payment keeps %d history rows", n)
	}
	if _, err := e.svc.GetPayment(ctx, orchestrator.Scope{TenantID: e.tenant}, oldPay.ID); err != nil {
		t.Fatalf("the old payment itself: %v", err)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1`, recent.ID); n != recentHistory || n == 0 {
		t.Fatalf("the recent payment's history: %d rows, had %d", n, recentHistory)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events_default`); n != 0 {
		t.Fatalf("%d rows fell to the default partition", n)
	}
}
