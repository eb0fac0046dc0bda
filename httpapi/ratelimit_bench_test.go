package httpapi

import (
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRateLimiter measures allow under parallel load: every goroutine
// on one hot key (one API key taking all the traffic), and spread over
// many keys (many API keys, or many client addresses). The limit is high
// enough that every call is allowed, as in normal traffic.
func BenchmarkRateLimiter(b *testing.B) {
	benchLimiter(b, func() func(string) (bool, time.Duration) { return newRateLimiter(1e9, 1e9, time.Now).allow })
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLimiter runs the hot-key and many-keys cases on fresh limiters
// made by newAllow.
func benchLimiter(b *testing.B, newAllow func() func(string) (bool, time.Duration)) {
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = "key_" + strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name string
		key  func(i int) string
	}{
		{"HotKey", func(int) string { return "key_hot" }},
		{"ManyKeys", func(i int) string { return keys[i%len(keys)] }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			allow := newAllow()
			var seq atomic.Int64
			cpu0 := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1000003))
				for pb.Next() {
					i++
					if ok, _ := allow(tc.key(i)); !ok {
						b.Fatal("refused")
					}
				}
			})
			// CPU time, unlike ns/op, hardly depends on what else the
			// machine runs meanwhile.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
