package reconcile_test

import (
	"context"
	"flag"
	"testing"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// payoutN is how many items the payout of BenchmarkPayoutPage has (go
// test -run '^$' -bench PayoutPage ./reconcile/ -args -payout-n 1000000).
var payoutN = flag.Int("payout-n", 100_000, "items of BenchmarkPayoutPage's payout")

// BenchmarkPayoutPage reads one page of 100 items of a payout of
// -payout-n items (a day of captures paid out at once by the in-process
// fake over loopback HTTP), with its payments: each page reads the
// provider's whole listing of the payout once.
func BenchmarkPayoutPage(b *testing.B) {
	n := *payoutN
	e := newEnv(b, fake.Config{})
	seedDay(b, e, n)
	e.clk.Set(day.AddDate(0, 0, fake.DefaultPayoutDelayDays+1))
	ctx := context.Background()
	var id string
	err := e.fc.Payouts(ctx, providers.ReportRequest{From: day, To: day.AddDate(0, 0, 5)}, func(p providers.Payout) error {
		id = p.ID
		return nil
	})
	if err != nil || id == "" {
		b.Fatalf("payout %q: %v", id, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		v, err := e.rec.Payout(ctx, reconcile.PayoutQuery{Connector: "fake", PayoutID: id, Limit: 100})
		if err != nil || v.ItemCount != int64(n) || len(v.Items) != 100 || v.Items[0].Payment == nil || *v.DifferenceMinor != 0 {
			b.Fatalf("page %+v: %v", v.Payout, err)
		}
	}
	b.ReportMetric(float64(n), "items/payout")
}
