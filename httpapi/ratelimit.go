package httpapi

import (
	"math"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// rateLimiter keeps one token bucket per key: an API key for the API's
// rate limit, a client address for the console's sign-in limit. Buckets
// live in this instance's memory: with N instances behind a balancer a key
// gets up to N times the limit, which is the usual trade for not paying a
// database round trip per request.
type rateLimiter struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	perSecond float64
	burst     float64
	now       func() time.Time
	// nextSweep bounds how often a full map is scanned for idle buckets.
	nextSweep time.Time
}

// bucket holds tokens as of at; it refills at the limiter's rate up to
// its burst.
type bucket struct {
	tokens float64
	at     time.Time
}

// sweepAbove is the bucket count past which full (idle) buckets are
// dropped, at most once a second.
const sweepAbove = 10000

func newRateLimiter(perSecond float64, burst int, now func() time.Time) *rateLimiter {
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{buckets: make(map[string]*bucket), perSecond: perSecond, burst: float64(burst), now: now}
}

// tokensAt is what b holds at now.
func (l *rateLimiter) tokensAt(b *bucket, now time.Time) float64 {
	t := b.tokens
	if now.After(b.at) {
		t += now.Sub(b.at).Seconds() * l.perSecond
	}
	return min(t, l.burst)
}

// refill brings b up to now. Call with l.mu held.
func (l *rateLimiter) refill(b *bucket, now time.Time) {
	b.tokens = l.tokensAt(b, now)
	if now.After(b.at) {
		b.at = now
	}
}

// untilToken is how long b takes to hold a whole token again, rounded up
// to the nanosecond.
func (l *rateLimiter) untilToken(tokens float64) time.Duration {
	return time.Duration(math.Ceil((1 - tokens) / l.perSecond * float64(time.Second)))
}

// bucket returns key's bucket, refilled to now, making a full one if need
// be. A full bucket is the same as none, so once there are many, full ones
// are dropped first: the map holds only keys that used some of their burst
// lately. Call with l.mu held.
func (l *rateLimiter) bucket(key string, now time.Time) *bucket {
	if b, ok := l.buckets[key]; ok {
		l.refill(b, now)
		return b
	}
	if len(l.buckets) >= sweepAbove && !now.Before(l.nextSweep) {
		l.nextSweep = now.Add(time.Second)
		for k, x := range l.buckets {
			if l.tokensAt(x, now) >= l.burst {
				delete(l.buckets, k)
			}
		}
	}
	b := &bucket{tokens: l.burst, at: now}
	l.buckets[key] = b
	return b
}

// allow takes a token from key's bucket, or says how long until one is
// free and takes nothing.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	if b.tokens < 1 {
		return false, l.untilToken(b.tokens)
	}
	b.tokens--
	return true, 0
}

// refund gives back a token allow took (up to the burst: a refund never
// raises the allowance).
func (l *rateLimiter) refund(key string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	b.tokens = min(b.tokens+1, l.burst)
}

// wait says how long until key's bucket holds a whole token: 0 when it
// holds one now. It takes nothing.
func (l *rateLimiter) wait(key string) time.Duration {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		return 0
	}
	if tokens := l.tokensAt(b, now); tokens < 1 {
		return l.untilToken(tokens)
	}
	return 0
}

// size is the number of buckets held.
func (l *rateLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// rateLimit answers 429 rate_limited with Retry-After once a key exceeds its
// rate. Runs behind authenticate.
func (s *Server) rateLimit(next echo.HandlerFunc) echo.HandlerFunc {
	if s.limiter == nil {
		return next
	}
	return func(c echo.Context) error {
		if ok, wait := s.limiter.allow(principal(c).KeyID); !ok {
			return &orchestrator.Error{Code: orchestrator.CodeRateLimited, RetryAfter: wait,
				Message: "rate limit exceeded for this API key; retry after the Retry-After delay"}
		}
		return next(c)
	}
}

// Console sign-in limit (SPEC: Web console): failed sign-ins are counted
// per client address in a token bucket of ConsoleSignInLimit tokens that
// refills over ConsoleSignInWindow. Each sign-in that is about to check a
// key takes a token first (so concurrent attempts cannot all pass the
// check before any is counted) and gets it back when the key is accepted:
// a successful sign-in neither counts nor resets the count. Once the
// bucket is empty the sign-in form answers 429 with Retry-After without
// looking at the key, so a correct key is refused too until a token is
// back. Per instance, like the API's rate limit.
const (
	defaultSignInLimit  = 10
	defaultSignInWindow = 5 * time.Minute
)

func newSignInLimiter(cfg Config) *rateLimiter {
	if cfg.ConsoleSignInLimit < 0 {
		return nil
	}
	n, window := cfg.ConsoleSignInLimit, cfg.ConsoleSignInWindow
	if n == 0 {
		n = defaultSignInLimit
	}
	if window <= 0 {
		window = defaultSignInWindow
	}
	return newRateLimiter(float64(n)/window.Seconds(), n, cfg.Clock)
}

// signInClient is the bucket key of a client address: the IPv4 address,
// or the /64 an IPv6 address is in (one host usually holds a whole /64).
func signInClient(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// signInWait is how long client must wait before its next sign-in: 0 when
// it may try now. It takes nothing.
func (s *Server) signInWait(client string) time.Duration {
	if s.signInLimiter == nil {
		return 0
	}
	return s.signInLimiter.wait(client)
}

// signInAttempt reserves client's next sign-in attempt before its key is
// checked: it takes a token, counting the attempt as failed until refund
// is called (when the key is accepted, or could not be checked). Without a
// token left it takes nothing and says how long to wait.
func (s *Server) signInAttempt(client string) (refund func(), wait time.Duration) {
	if s.signInLimiter == nil {
		return func() {}, 0
	}
	if ok, wait := s.signInLimiter.allow(client); !ok {
		return nil, wait
	}
	return func() { s.signInLimiter.refund(client) }, 0
}

// retryAfter is the Retry-After value of d: whole seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
