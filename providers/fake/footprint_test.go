package fake_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// payLikePayorch authorizes and captures one hold the way payorch does:
// the create and the confirmation under one forwarded key, then the
// capture under another, with the payment's id and tenant in metadata.
func payLikePayorch(ctx context.Context, c *fake.Client, i int) (providers.Hold, error) {
	pid := fmt.Sprintf("pay_%032d", i)
	h, err := c.Authorize(ctx, providers.AuthorizeRequest{
		Key: providers.ForwardedKey(1, "authorize", pid), PaymentID: pid, TenantID: 1,
		AmountMinor: 1000 + int64(i%5000), Currency: "EUR", PaymentMethod: "pm_card_visa",
	})
	if err != nil {
		return h, err
	}
	return c.Capture(ctx, providers.CaptureRequest{Key: providers.ForwardedKey(1, "capture", pid), Ref: h.Ref})
}

// heapProfile, when set, is where BenchmarkHoldFootprint writes a heap
// profile taken once the server compacted its payments (a -memprofile is
// written after the server is gone).
var heapProfile = flag.String("footprint.heapprofile", "", "write the live heap profile of BenchmarkHoldFootprint here")

// liveHeap is the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkHoldFootprint reports the live heap a fake keeps per payment
// (authorize + capture through the HTTP API, as payorch makes them):
// b.N payments on one server, heap measured after a full GC, live
// (heapB/hold) and once Compact packed them all (packedB/hold, the
// codec's own ~1 MB included), with what packing (packns/hold) and a
// day's report (livereportns/hold, reportns/hold) cost per hold.
//
//	go test -run '^$' -bench HoldFootprint -benchtime 20000x ./providers/fake/
func BenchmarkHoldFootprint(b *testing.B) {
	// Compacted only when the benchmark says so: nothing is retained
	// past a nanosecond, and the loop never runs by itself.
	r, err := fake.Start("", fake.Config{Token: testToken, HoldRetention: time.Nanosecond, CompactEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	c := r.Client(nil)
	ctx := context.Background()
	if _, err := payLikePayorch(ctx, c, -1); err != nil { // warm the connection
		b.Fatal(err)
	}
	before := liveHeap()
	b.ResetTimer()
	for i := range b.N {
		if _, err := payLikePayorch(ctx, c, i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := liveHeap()
	b.ReportMetric(float64(int64(after)-int64(before))/float64(b.N), "heapB/hold")
	b.ReportMetric(reportNanos(b, c, b.N+1), "livereportns/hold")
	start := time.Now()
	packed := r.Server().Compact()
	took := time.Since(start)
	compacted := liveHeap()
	if packed != b.N+1 {
		b.Fatalf("Compact packed %d holds, want %d", packed, b.N+1)
	}
	b.ReportMetric(float64(int64(compacted)-int64(before))/float64(b.N), "packedB/hold")
	b.ReportMetric(float64(took.Nanoseconds())/float64(packed), "packns/hold")
	// The day's report reads every packed hold.
	b.ReportMetric(reportNanos(b, c, packed), "reportns/hold")
	if *heapProfile != "" {
		f, err := os.Create(*heapProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
	}
	runtime.KeepAlive(r)
}

// reportNanos is how long the report of the last day takes per row, which
// must be rows.
func reportNanos(b *testing.B, c *fake.Client, rows int) float64 {
	start, n, now := time.Now(), 0, time.Now()
	err := c.Report(context.Background(), providers.ReportRequest{From: now.Add(-24 * time.Hour), To: now.Add(time.Hour)},
		func(providers.ReportRow) error { n++; return nil })
	if err != nil || n != rows {
		b.Fatalf("Report: %d rows, %v; want %d", n, err, rows)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}
