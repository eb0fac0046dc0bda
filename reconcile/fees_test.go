package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// TestFeeScheduleExpected: a charge's fee is its basis points of the
// gross rounded half up, plus the fixed fee; a currency without a rule
// takes the default, or agrees with anything when there is none.
func TestFeeScheduleExpected(t *testing.T) {
	t.Parallel()
	s := reconcile.FeeSchedule{
		Currencies:     map[string]reconcile.FeeRule{"EUR": {PercentBP: 140, FixedMinor: 25}, "JPY": {PercentBP: 360, FixedMinor: 0}},
		ToleranceMinor: 1,
	}
	for _, tc := range []struct {
		cur   string
		gross int64
		want  int64
		ok    bool
	}{
		{"EUR", 1000, 39, true}, // 14.00 + 25
		{"EUR", 1036, 40, true}, // 14.504 → 15 (half up) + 25
		{"EUR", 1035, 39, true}, // 14.49 → 14 + 25
		{"EUR", 0, 25, true},    // the fixed fee alone
		{"JPY", 1389, 50, true}, // 50.004 → 50
		{"EUR", orchestrator.MaxAmountMinor, 1_400_000_000 + 25, true}, // 1,399,999,999.986 → up
		{"USD", 1000, 0, false}, // no rule, no default
	} {
		got, ok := s.Expected(tc.cur, tc.gross)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Expected(%s, %d) = %d, %v; want %d, %v", tc.cur, tc.gross, got, ok, tc.want, tc.ok)
		}
	}
	if !s.Agrees("EUR", 1000, 40) || s.Agrees("EUR", 1000, 41) || !s.Agrees("USD", 1000, 999) {
		t.Error("Agrees ignores the tolerance or a currency without a rule")
	}
	s.Default = &reconcile.FeeRule{PercentBP: 290, FixedMinor: 30}
	if got, ok := s.Expected("USD", 1000); got != 59 || !ok {
		t.Errorf("the default rule: %d, %v", got, ok)
	}
	for _, bad := range []reconcile.FeeSchedule{
		{Currencies: map[string]reconcile.FeeRule{"EUR": {PercentBP: 10_001}}},
		{Currencies: map[string]reconcile.FeeRule{"eur": {}}},
		{Currencies: map[string]reconcile.FeeRule{"ZZZ": {}}},
		{Currencies: map[string]reconcile.FeeRule{"EUR": {FixedMinor: -1}}},
		{Default: &reconcile.FeeRule{PercentBP: -1}},
		{ToleranceMinor: -1},
		{PayoutDelayDays: days(-1)},
		{PayoutDelayDays: days(31)},
		{PayoutGraceDays: days(-1)},
		{PayoutGraceDays: days(8)},
	} {
		if err := bad.Validate(); orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed {
			t.Errorf("Validate(%+v) = %v, want validation_failed", bad, err)
		}
	}
	for _, good := range []reconcile.FeeSchedule{
		{PayoutDelayDays: days(0), PayoutGraceDays: days(0)},
		{PayoutDelayDays: days(30), PayoutGraceDays: days(7)},
	} {
		if err := good.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", good, err)
		}
	}
}

func days(n int) *int { return &n }

// TestFeeScheduleVersions: each change is a new version, the same
// schedule again stores nothing, concurrent changes each get their own
// number, and an unknown connector has none.
func TestFeeScheduleVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := reconcile.New(reconcile.Config{Pool: pgtest.DB(t),
		Providers: map[string]providers.Provider{"fake": fake.NewClient("http://127.0.0.1:9", nil)}})
	if _, err := rec.FeeSchedule(ctx, "fake"); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("none stored: %v", err)
	}
	s := reconcile.FeeSchedule{Currencies: map[string]reconcile.FeeRule{"EUR": {PercentBP: 140, FixedMinor: 25}}}
	v1, err := rec.SetFeeSchedule(ctx, "fake", s, "key_admin")
	if err != nil || v1.Version != 1 {
		t.Fatalf("first: %+v %v", v1, err)
	}
	if again, err := rec.SetFeeSchedule(ctx, "fake", s, "key_other"); err != nil || again.Version != 1 || again.CreatedBy != "key_admin" {
		t.Fatalf("the same schedule again: %+v %v", again, err)
	}
	var wg sync.WaitGroup
	versions := make(chan int, 8)
	for i := range 8 {
		wg.Go(func() {
			s := reconcile.FeeSchedule{Currencies: map[string]reconcile.FeeRule{"EUR": {PercentBP: 150 + int64(i)}}}
			v, err := rec.SetFeeSchedule(ctx, "fake", s, fmt.Sprintf("key_%d", i))
			switch orchestrator.ErrorCode(err) {
			case "":
				versions <- v.Version
			case orchestrator.CodeConflict: // retried by the caller; not stored
			default:
				t.Errorf("concurrent change %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(versions)
	seen := map[int]bool{}
	for v := range versions {
		if seen[v] || v < 2 {
			t.Fatalf("version %d given twice or below 2", v)
		}
		seen[v] = true
	}
	vs, more, err := rec.FeeScheduleVersions(ctx, "fake", 100, 0)
	if err != nil || more || len(vs) != 1+len(seen) || vs[len(vs)-1].Version != 1 {
		t.Fatalf("versions: %d %v %v", len(vs), more, err)
	}
	// Payout terms: the grace defaults to a day, stored as a number.
	terms, err := rec.SetFeeSchedule(ctx, "fake", reconcile.FeeSchedule{PayoutDelayDays: days(2)}, "key_admin")
	if err != nil || *terms.Schedule.PayoutDelayDays != 2 || terms.Schedule.PayoutGraceDays == nil ||
		*terms.Schedule.PayoutGraceDays != reconcile.DefaultPayoutGraceDays {
		t.Fatalf("payout terms: %+v %v", terms.Schedule, err)
	}
	if again, err := rec.SetFeeSchedule(ctx, "fake", reconcile.FeeSchedule{PayoutDelayDays: days(2), PayoutGraceDays: days(1)},
		"key_admin"); err != nil || again.Version != terms.Version {
		t.Fatalf("the default grace written out is the same schedule: %+v %v", again, err)
	}
	if _, err := rec.SetFeeSchedule(ctx, "nope", s, "key_admin"); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("unknown connector: %v", err)
	}
}
