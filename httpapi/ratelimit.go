package httpapi

import (
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/payorch/payorch/orchestrator"
)

// rateLimiter keeps one token bucket per API key. Buckets live in this
// instance's memory: with N instances behind a balancer a key gets up to N
// times the limit, which is the usual trade for not paying a database round
// trip per request.
type rateLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	limit   rate.Limit
	burst   int
	now     func() time.Time
}

// sweepAbove is the bucket count past which full (idle) buckets are dropped.
const sweepAbove = 10000

func newRateLimiter(perSecond float64, burst int, now func() time.Time) *rateLimiter {
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{buckets: make(map[string]*rate.Limiter), limit: rate.Limit(perSecond), burst: burst, now: now}
}

// allow takes a token from key's bucket, or says how long until one is free.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= sweepAbove {
			for k, x := range l.buckets {
				if x.TokensAt(now) >= float64(l.burst) {
					delete(l.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
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
