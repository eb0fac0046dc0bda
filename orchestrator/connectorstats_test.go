package orchestrator_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
)

// attemptRow is what a test makes of one payment's attempt: where it ran,
// how it ended, how long its call took and when it started.
type attemptRow struct {
	connector string
	outcome   any // nil: no answer yet
	latencyMS any // nil: no call answered
	startedAt time.Time
}

// seedAttempts makes one payment per row through the money path (pinned
// to the row's connector) and then sets its attempt's outcome, latency
// and start to the row's, so that the statistics have exact inputs.
func (e *moneyEnv) seedAttempts(t *testing.T, rows []attemptRow) {
	t.Helper()
	for i, r := range rows {
		key := fmt.Sprintf("stats-%s-%d", r.connector, i)
		a := e.authorize(t, key, fmt.Sprintf(`{"amount_minor":1000,"currency":"EUR","provider":%q}`, r.connector))
		if a.err != nil {
			t.Fatalf("authorize %s: %v", key, a.err)
		}
		tag, err := e.svc.Pool().Exec(context.Background(), `
			UPDATE payment_attempts SET outcome = $3, latency_ms = $4, started_at = $5
			WHERE tenant_id = $1 AND payment_id = $2 AND attempt = 1 AND connector = $6`,
			e.tenant, a.out.Payment.ID, r.outcome, r.latencyMS, r.startedAt, r.connector)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("set attempt of %s: %v (%d rows)", key, err, tag.RowsAffected())
		}
	}
}

func TestConnectorStats(t *testing.T) {
	t.Parallel()
	e := newConnectorWorld(t, 0, nil, "fake_a", "fake_b", "fake_c").newTenant(t)
	now := moneyStart // 10:00, the world's clock
	since := now.Add(-3 * time.Hour)
	at := func(d time.Duration) time.Time { return since.Add(d) }
	e.seedAttempts(t, []attemptRow{
		// fake_a, bucket 0 [07:00, 08:00)
		{"fake_a", "authorized", 100.0, at(time.Minute)},
		{"fake_a", "authorized", 200.0, at(10 * time.Minute)},
		{"fake_a", "declined", 300.0, at(20 * time.Minute)},
		{"fake_a", "not_executed", 400.0, at(time.Hour - time.Microsecond)},
		// fake_a, bucket 2 [09:00, 10:00)
		{"fake_a", "unknown", nil, at(2 * time.Hour)},
		{"fake_a", "authorized", 500.0, at(2*time.Hour + 30*time.Minute)},
		// fake_a, outside [since, now)
		{"fake_a", "not_executed", 9000.0, since.Add(-time.Microsecond)},
		{"fake_a", "not_executed", 9000.0, now},
		// fake_b, bucket 1 [08:00, 09:00), the first on its lower edge
		{"fake_b", "declined", 50.0, at(time.Hour)},
		{"fake_b", "rejected", 70.0, at(90 * time.Minute)},
		{"fake_b", nil, nil, at(100 * time.Minute)},
		// fake_c: nothing.
	})

	stats, err := e.svc.ConnectorStats(context.Background(), since, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 3 || stats[0].Connector != "fake_a" || stats[1].Connector != "fake_b" || stats[2].Connector != "fake_c" {
		t.Fatalf("connectors %+v, want fake_a, fake_b, fake_c", stats)
	}
	for _, cs := range stats {
		if len(cs.Buckets) != 3 || !cs.Total.Start.Equal(since) || !cs.Total.End.Equal(now) {
			t.Fatalf("%s: window %v–%v, %d buckets", cs.Connector, cs.Total.Start, cs.Total.End, len(cs.Buckets))
		}
		for i, b := range cs.Buckets {
			if !b.Start.Equal(at(time.Duration(i)*time.Hour)) || !b.End.Equal(at(time.Duration(i+1)*time.Hour)) {
				t.Fatalf("%s bucket %d: %v–%v", cs.Connector, i, b.Start, b.End)
			}
		}
	}

	type want struct {
		attempts, authorized, declined, errors int64
		rate, share, p50, p95                  float64 // -1: none
	}
	check := func(what string, got orchestrator.AttemptStats, w want) {
		t.Helper()
		if got.Attempts != w.attempts || got.Authorized != w.authorized || got.Declined != w.declined || got.Errors != w.errors {
			t.Errorf("%s: counts %d/%d/%d/%d, want %d/%d/%d/%d", what, got.Attempts, got.Authorized, got.Declined, got.Errors,
				w.attempts, w.authorized, w.declined, w.errors)
		}
		for _, f := range []struct {
			name string
			got  *float64
			want float64
		}{{"authorization rate", got.AuthorizationRate, w.rate}, {"error share", got.ErrorShare, w.share},
			{"p50", got.P50MS, w.p50}, {"p95", got.P95MS, w.p95}} {
			switch {
			case f.want < 0 && f.got != nil:
				t.Errorf("%s: %s %v, want none", what, f.name, *f.got)
			case f.want >= 0 && f.got == nil:
				t.Errorf("%s: %s none, want %v", what, f.name, f.want)
			case f.want >= 0 && math.Abs(*f.got-f.want) > 1e-9:
				t.Errorf("%s: %s %v, want %v", what, f.name, *f.got, f.want)
			}
		}
	}
	a, b, c := stats[0], stats[1], stats[2]
	// Latencies 100..500 (the unknown one has none): p95 = 400 + 0.8 × 100.
	check("fake_a total", a.Total, want{6, 3, 1, 2, 0.75, 2.0 / 6, 300, 480})
	check("fake_a 07h", a.Buckets[0], want{4, 2, 1, 1, 2.0 / 3, 0.25, 250, 385})
	check("fake_a 08h", a.Buckets[1], want{0, 0, 0, 0, -1, -1, -1, -1})
	check("fake_a 09h", a.Buckets[2], want{2, 1, 0, 1, 1, 0.5, 500, 500})
	// A rejection and an attempt without an answer count as attempts,
	// neither as an answer nor as an error.
	check("fake_b total", b.Total, want{3, 0, 1, 0, 0, 0, 60, 69})
	check("fake_b 08h", b.Buckets[1], want{3, 0, 1, 0, 0, 0, 60, 69})
	check("fake_b 07h", b.Buckets[0], want{0, 0, 0, 0, -1, -1, -1, -1})
	check("fake_c total", c.Total, want{0, 0, 0, 0, -1, -1, -1, -1})

	t.Run("ABadWindowIsRefused", func(t *testing.T) {
		_, err := e.svc.ConnectorStats(context.Background(), now, time.Hour)
		wantRefusal(t, err, orchestrator.CodeValidationFailed, "since")
		_, err = e.svc.ConnectorStats(context.Background(), since, time.Second)
		wantRefusal(t, err, orchestrator.CodeValidationFailed, "bucket")
		_, err = e.svc.ConnectorStats(context.Background(), since, 0)
		wantRefusal(t, err, orchestrator.CodeValidationFailed, "bucket")
	})
}
