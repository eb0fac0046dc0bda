package httpapi

import (
	"strconv"
	"testing"
	"time"
)

func TestSignInClient(t *testing.T) {
	t.Parallel()
	for ip, want := range map[string]string{
		"203.0.113.7":               "203.0.113.7",
		"::ffff:203.0.113.7":        "203.0.113.7",
		"2001:db8:1:2:3:4:5:6":      "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1":      "2001:db8:1:2::/64",
		"fe80::1%eth0":              "fe80::/64",
		"":                          "",
		"not an address":            "not an address",
		"2001:db8:1:3:3:4:5:6":      "2001:db8:1:3::/64",
		"2001:0db8:0001:0002::0001": "2001:db8:1:2::/64",
	} {
		if got := signInClient(ip); got != want {
			t.Errorf("signInClient(%q) = %q, want %q", ip, got, want)
		}
	}
}

func TestRateLimiterWaitAndCharge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newSignInLimiter(Config{Clock: func() time.Time { return now }}) // 10 per 5 min
	if d := l.wait("a"); d != 0 {
		t.Fatalf("wait of an unknown client %v", d)
	}
	if l.size() != 0 {
		t.Fatal("wait made a bucket")
	}
	for i := range 10 {
		if d := l.wait("a"); d != 0 {
			t.Fatalf("wait before failure %d: %v", i+1, d)
		}
		l.charge("a")
	}
	if d := l.wait("a"); d != 30*time.Second {
		t.Fatalf("wait after 10 failures %v, want 30s", d)
	}
	// Failures that raced past wait count: the debt is repaid first.
	l.charge("a")
	l.charge("a")
	if d := l.wait("a"); d != 90*time.Second {
		t.Fatalf("wait after 12 failures %v, want 90s", d)
	}
	if d := l.wait("b"); d != 0 {
		t.Fatalf("another client waits %v", d)
	}
	now = now.Add(90 * time.Second)
	if d := l.wait("a"); d != 0 {
		t.Fatalf("wait after the debt is repaid %v", d)
	}
}

func TestRateLimiterDropsIdleBuckets(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newSignInLimiter(Config{Clock: func() time.Time { return now }})
	for i := range sweepAbove {
		l.charge("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	l.charge("blocked")
	for range 11 {
		l.charge("blocked")
	}
	// All but one refilled: the next new client sweeps them away.
	now = now.Add(31 * time.Second)
	l.charge("new")
	if n := l.size(); n != 2 {
		t.Fatalf("%d buckets after the sweep, want 2 (the blocked client and the new one)", n)
	}
	if d := l.wait("blocked"); d == 0 {
		t.Fatal("the sweep forgot a blocked client")
	}
}
