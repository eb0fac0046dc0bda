package httpapi

import (
	"hash/maphash"
	"math"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/payorch/payorch/orchestrator"
)

// rateLimiter keeps one token bucket (a rate.Limiter) per key: an API key
// for the API's rate limit, a client address for the console's sign-in
// limit and the API's limit on failed authentications. Buckets live in
// this instance's memory: with N instances behind a balancer a key gets up
// to N times the limit, which is the usual trade for not paying a database
// round trip per request.
//
// The map is split into shards, each with its own lock, so keys in
// different shards do not wait for each other; a key's bucket is only used
// under its shard's lock, so dropping an idle bucket can never lose a
// token taken from it at the same moment.
type rateLimiter struct {
	shards [limiterShards]limiterShard
	seed   maphash.Seed
	limit  rate.Limit
	burst  int
	now    func() time.Time
	// buckets counts the buckets of every shard.
	buckets atomic.Int64
	// nextSweep (Unix nanoseconds) bounds how often the map is scanned
	// for idle buckets.
	nextSweep atomic.Int64
}

type limiterShard struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// limiterShards is a power of two, well above the cores a server has.
const limiterShards = 64

// sweepAbove is the bucket count past which full (idle) buckets are
// dropped, at most once a second.
const sweepAbove = 10000

func newRateLimiter(perSecond float64, burst int, now func() time.Time) *rateLimiter {
	if burst < 1 {
		burst = 1
	}
	l := &rateLimiter{seed: maphash.MakeSeed(), limit: rate.Limit(perSecond), burst: burst, now: now}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*rate.Limiter)
	}
	return l
}

// untilToken is how long a bucket holding tokens takes to hold a whole
// token again, rounded up to the nanosecond (never 0: it is asked only of
// a bucket found short of a token).
func (l *rateLimiter) untilToken(tokens float64) time.Duration {
	return max(time.Duration(math.Ceil((1-tokens)/float64(l.limit)*float64(time.Second))), 1)
}

// bucket returns key's bucket with its shard locked (the caller unlocks
// sh.mu, then calls made if made), making a full bucket if there is none.
func (l *rateLimiter) bucket(key string) (sh *limiterShard, b *rate.Limiter, made bool) {
	sh = &l.shards[maphash.String(l.seed, key)&(limiterShards-1)]
	sh.mu.Lock()
	if b = sh.m[key]; b == nil {
		b, made = rate.NewLimiter(l.limit, l.burst), true
		sh.m[key] = b
	}
	return sh, b, made
}

// made counts a new bucket. A full bucket is the same as none, so once
// there are many, full ones are dropped: the map holds only keys that used
// some of their burst lately.
func (l *rateLimiter) made(now time.Time) {
	if l.buckets.Add(1) > sweepAbove {
		l.sweep(now)
	}
}

// sweep drops every full bucket, unless a sweep ran less than a second
// ago.
func (l *rateLimiter) sweep(now time.Time) {
	next := l.nextSweep.Load()
	if now.UnixNano() < next || !l.nextSweep.CompareAndSwap(next, now.Add(time.Second).UnixNano()) {
		return
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, b := range sh.m {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(sh.m, k)
				l.buckets.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// allow takes a token from key's bucket, or says how long until one is
// free and takes nothing.
func (l *rateLimiter) allow(key string) (ok bool, wait time.Duration) {
	now := l.now()
	sh, b, made := l.bucket(key)
	if ok = b.AllowN(now, 1); !ok {
		wait = l.untilToken(b.TokensAt(now))
	}
	sh.mu.Unlock()
	if made {
		l.made(now)
	}
	return ok, wait
}

// take is allow that can be undone: refund (safe to call more than once)
// gives the token back, up to the burst (a refund never raises the
// allowance). Without a token left it takes nothing, returns a nil refund
// and says how long to wait.
func (l *rateLimiter) take(key string) (refund func(), wait time.Duration) {
	now := l.now()
	sh, b, made := l.bucket(key)
	var r *rate.Reservation
	if tokens := b.TokensAt(now); tokens < 1 {
		wait = l.untilToken(tokens)
	} else {
		// Immediate: the bucket holds a token and nobody else uses it
		// while the shard is locked.
		r = b.ReserveN(now, 1)
	}
	sh.mu.Unlock()
	if made {
		l.made(now)
	}
	if r == nil {
		return nil, wait
	}
	// Cancelled as of the moment it was made, the reservation gives its
	// token back exactly: CancelAt takes off what was reserved since and
	// winds the bucket's clock back to then, which refills the same again.
	var once sync.Once
	return func() { once.Do(func() { r.CancelAt(now) }) }, 0
}

// wait says how long until key's bucket holds a whole token: 0 when it
// holds one now (or there is none). It takes nothing and makes no bucket.
func (l *rateLimiter) wait(key string) time.Duration {
	now := l.now()
	sh := &l.shards[maphash.String(l.seed, key)&(limiterShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m[key]
	if !ok {
		return 0
	}
	if tokens := b.TokensAt(now); tokens < 1 {
		return l.untilToken(tokens)
	}
	return 0
}

// size is the number of buckets held.
func (l *rateLimiter) size() int {
	return int(l.buckets.Load())
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

// API authentication limit: a key that is not accepted cost a database
// read (a repeated one is remembered for a while, but a client can make up
// a new key for each request), so failed authentications are counted per
// client address in a token bucket of AuthFailureLimit tokens that refills
// over AuthFailureWindow. Once it is empty, every /v1 request from that
// address is answered 429 with Retry-After before its key is looked at, so
// it costs nothing. Only keys shaped like API keys count: anything else is
// refused without a read. Failures are counted after the fact, not
// reserved before the check as sign-ins are: a reservation per request
// would cap the concurrent requests of one address (every client behind
// one proxy, if it is not trusted) at the bucket's size. So up to the
// concurrent requests of one address may get through the check at the
// moment its bucket empties. Per instance, like the API's rate limit.
const (
	defaultAuthFailureLimit  = 30
	defaultAuthFailureWindow = time.Minute
)

func newAuthFailureLimiter(cfg Config) *rateLimiter {
	if cfg.AuthFailureLimit < 0 {
		return nil
	}
	n, window := cfg.AuthFailureLimit, cfg.AuthFailureWindow
	if n == 0 {
		n = defaultAuthFailureLimit
	}
	if window <= 0 {
		window = defaultAuthFailureWindow
	}
	return newRateLimiter(float64(n)/window.Seconds(), n, cfg.Clock)
}

// authFailureWait is how long client must wait before its next API
// request: 0 when it may send one now.
func (s *Server) authFailureWait(client string) time.Duration {
	if s.authFailures == nil {
		return 0
	}
	return s.authFailures.wait(client)
}

// authFailed counts a failed authentication of a key shaped like an API
// key from client.
func (s *Server) authFailed(client, key string) {
	if s.authFailures != nil && orchestrator.KeyShaped(key) {
		s.authFailures.allow(client)
	}
}

// signInClient is the bucket key of a client address, for the sign-in and
// authentication limits: the IPv4 address, or the /64 an IPv6 address is in
// (one host usually holds a whole /64).
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
	return s.signInLimiter.take(client)
}

// retryAfter is the Retry-After value of d: whole seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
