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

func TestRateLimiterAllowWaitAndRefund(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newSignInLimiter(Config{Clock: func() time.Time { return now }}) // 10 per 5 min
	if d := l.wait("a"); d != 0 {
		t.Fatalf("wait of an unknown client %v", d)
	}
	if l.size() != 0 {
		t.Fatal("wait made a bucket")
	}
	var refunds []func()
	for i := range 10 {
		refund, d := l.take("a")
		if refund == nil || d != 0 {
			t.Fatalf("attempt %d: refund %v, wait %v", i+1, refund != nil, d)
		}
		refunds = append(refunds, refund)
	}
	if d := l.wait("a"); d != 30*time.Second {
		t.Fatalf("wait after 10 attempts %v, want 30s", d)
	}
	// Refused attempts take nothing: the wait does not grow.
	for range 3 {
		if refund, d := l.take("a"); refund != nil || d != 30*time.Second {
			t.Fatalf("11th attempt: refund %v, wait %v, want refused for 30s", refund != nil, d)
		}
		if ok, d := l.allow("a"); ok || d != 30*time.Second {
			t.Fatalf("11th allow: %v %v, want refused for 30s", ok, d)
		}
	}
	// A refund gives one back, once however often it is called.
	refunds[4]()
	refunds[4]()
	if d := l.wait("a"); d != 0 {
		t.Fatalf("wait after a refund %v", d)
	}
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("the refunded token is not there")
	}
	if ok, _ := l.allow("a"); ok {
		t.Fatal("one refund, called twice, gave back two tokens")
	}
	// A refund never raises the allowance past the burst, even after the
	// bucket refilled.
	refund, _ := l.take("b")
	now = now.Add(29 * time.Second)
	if d := l.wait("a"); d != time.Second {
		t.Fatalf("wait after 29s %v, want 1s", d)
	}
	now = now.Add(time.Second)
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("no token after 30s")
	}
	refund()
	for i := range 10 {
		if ok, _ := l.allow("b"); !ok {
			t.Fatalf("b's attempt %d refused", i+1)
		}
	}
	if ok, _ := l.allow("b"); ok {
		t.Fatal("a refund raised b's allowance past the burst")
	}
}

// TestRateLimiterRefundAmidOtherAttempts: a refund gives back exactly the
// token its attempt took, whatever was taken after it and however long
// the check between them lasted.
func TestRateLimiterRefundAmidOtherAttempts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newSignInLimiter(Config{Clock: func() time.Time { return now }}) // 10 per 5 min: 1 per 30s
	first, _ := l.take("a")
	for range 5 {
		now = now.Add(time.Second)
		l.take("a")
	}
	now = now.Add(5 * time.Second) // 10s in all: a third of a token back
	first()
	// 10 - 6 + 1/3 + 1 = 5 1/3 tokens: 5 more attempts, then 20s to wait.
	for i := range 5 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("attempt %d after the refund refused", i+1)
		}
	}
	// (Fractions of tokens: exact to the float, so to the microsecond.)
	if ok, d := l.allow("a"); ok || d.Round(time.Microsecond) != 20*time.Second {
		t.Fatalf("6th attempt after the refund: %v %v, want refused for 20s", ok, d)
	}
}

func TestRateLimiterDropsIdleBuckets(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newSignInLimiter(Config{Clock: func() time.Time { return now }})
	for i := range sweepAbove {
		l.allow("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	for range 12 {
		l.allow("blocked")
	}
	// All but one refilled: the next new client sweeps them away.
	now = now.Add(31 * time.Second)
	l.allow("new")
	if n := l.size(); n != 2 {
		t.Fatalf("%d buckets after the sweep, want 2 (the blocked client and the new one)", n)
	}
	// The blocked client has one token back after 31s, not ten.
	if ok, _ := l.allow("blocked"); !ok {
		t.Fatal("no token back after 31s")
	}
	if d := l.wait("blocked"); d == 0 {
		t.Fatal("the sweep forgot a blocked client")
	}
}
