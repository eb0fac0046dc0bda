package httpapi

import (
	"math"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/payorch/payorch/orchestrator"
)

// rateLimiter keeps one token bucket per key: an API key for the API's
// rate limit, a client address for the console's sign-in limit. Buckets
// live in this instance's memory: with N instances behind a balancer a key
// gets up to N times the limit, which is the usual trade for not paying a
// database round trip per request.
type rateLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	limit   rate.Limit
	burst   int
	now     func() time.Time
	// nextSweep bounds how often a full map is scanned for idle buckets.
	nextSweep time.Time
}

// sweepAbove is the bucket count past which full (idle) buckets are
// dropped, at most once a second.
const sweepAbove = 10000

func newRateLimiter(perSecond float64, burst int, now func() time.Time) *rateLimiter {
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{buckets: make(map[string]*rate.Limiter), limit: rate.Limit(perSecond), burst: burst, now: now}
}

// bucket returns key's bucket, making it if need be. A full bucket is the
// same as none, so once there are many, full ones are dropped first: the
// map holds only keys that used some of their burst lately. Call with l.mu
// held.
func (l *rateLimiter) bucket(key string, now time.Time) *rate.Limiter {
	b, ok := l.buckets[key]
	if ok {
		return b
	}
	if len(l.buckets) >= sweepAbove && !now.Before(l.nextSweep) {
		l.nextSweep = now.Add(time.Second)
		for k, x := range l.buckets {
			if x.TokensAt(now) >= float64(l.burst) {
				delete(l.buckets, k)
			}
		}
	}
	b = rate.NewLimiter(l.limit, l.burst)
	l.buckets[key] = b
	return b
}

// allow takes a token from key's bucket, or says how long until one is free.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
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
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - tokens) / float64(l.limit) * float64(time.Second)))
}

// charge takes a token from key's bucket even when it holds none: the
// debt is repaid (at the bucket's rate) before wait says 0 again, so
// attempts that passed wait together and all failed all count.
func (l *rateLimiter) charge(key string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bucket(key, now).ReserveN(now, 1)
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
// refills over ConsoleSignInWindow. Once it is empty, the sign-in form
// answers 429 with Retry-After without looking at the key, so a correct key
// is refused too until a token is back. A successful sign-in takes nothing
// and gives nothing back: a valid key of one's own does not reset the
// count. Per instance, like the API's rate limit.
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
// it may try now.
func (s *Server) signInWait(client string) time.Duration {
	if s.signInLimiter == nil {
		return 0
	}
	return s.signInLimiter.wait(client)
}

// signInFailed counts a rejected key against client.
func (s *Server) signInFailed(client string) {
	if s.signInLimiter != nil {
		s.signInLimiter.charge(client)
	}
}

// retryAfter is the Retry-After value of d: whole seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
