package orchestrator

import (
	"sync"
	"time"

	"github.com/payorch/payorch/providers"
)

// A health breaker per connector, in each instance's memory: it opens when
// the share of a connector's provider calls that failed (not executed, or
// an unknown outcome: the connector, not the card) over the last Window
// reaches ErrorPercent, with at least MinCalls calls; while open, new
// payments and failovers skip the connector when their route has another;
// after Cooldown one call is let through as a probe (half-open), which
// closes the breaker when it succeeds and opens it again when it fails.
//
// Declines and rejections are answers, not failures. Each instance learns
// on its own from its own calls: nothing is shared, so a breaker never
// waits on the database, and an instance that cannot reach a connector
// stops sending to it even when others can.

// BreakerConfig tunes the connectors' health breakers. Zero fields take
// the defaults (DefaultBreaker).
type BreakerConfig struct {
	Window       time.Duration
	MinCalls     int
	ErrorPercent int
	Cooldown     time.Duration
}

// DefaultBreaker is the breaker used when Config.Breaker leaves a field
// zero.
var DefaultBreaker = BreakerConfig{Window: time.Minute, MinCalls: 10, ErrorPercent: 50, Cooldown: 30 * time.Second}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Window <= 0 {
		c.Window = DefaultBreaker.Window
	}
	if c.MinCalls <= 0 {
		c.MinCalls = DefaultBreaker.MinCalls
	}
	if c.ErrorPercent <= 0 || c.ErrorPercent > 100 {
		c.ErrorPercent = DefaultBreaker.ErrorPercent
	}
	if c.Cooldown <= 0 {
		c.Cooldown = DefaultBreaker.Cooldown
	}
	return c
}

// BreakerState is a breaker's state.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
)

// breakerBuckets is how many slices the window is counted in: the error
// share forgets a slice at a time.
const breakerBuckets = 10

// breaker is one connector's breaker.
type breaker struct {
	cfg BreakerConfig

	mu       sync.Mutex
	state    BreakerState
	openedAt time.Time
	probeAt  time.Time // when the half-open probe was let through
	buckets  [breakerBuckets]breakerBucket
}

// breakerBucket counts the calls of one slice of the window.
type breakerBucket struct {
	start         time.Time
	calls, failed int
}

func newBreaker(cfg BreakerConfig) *breaker {
	return &breaker{cfg: cfg, state: BreakerClosed}
}

// allow reports whether a call may go to the connector now; in half-open,
// it lets one probe through at a time (again after Cooldown, should the
// probe never report).
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		if now.Sub(b.openedAt) < b.cfg.Cooldown {
			return false
		}
		b.state, b.probeAt = BreakerHalfOpen, now
		return true
	case BreakerHalfOpen:
		if now.Sub(b.probeAt) < b.cfg.Cooldown {
			return false
		}
		b.probeAt = now
		return true
	}
	return true
}

// record counts one call's result.
func (b *breaker) record(now time.Time, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerHalfOpen:
		if failed {
			b.state, b.openedAt = BreakerOpen, now
		} else {
			b.state = BreakerClosed
			b.buckets = [breakerBuckets]breakerBucket{}
		}
		return
	case BreakerOpen:
		return // a call let through before the breaker opened
	}
	width := b.cfg.Window / breakerBuckets
	start := now.Truncate(width)
	bk := &b.buckets[int(start.UnixNano()/int64(width))%breakerBuckets]
	if !bk.start.Equal(start) {
		bk.start, bk.calls, bk.failed = start, 0, 0
	}
	bk.calls++
	if failed {
		bk.failed++
	}
	calls, fails := 0, 0
	for _, x := range b.buckets {
		if now.Sub(x.start) < b.cfg.Window {
			calls += x.calls
			fails += x.failed
		}
	}
	if calls >= b.cfg.MinCalls && fails*100 >= b.cfg.ErrorPercent*calls {
		b.state, b.openedAt = BreakerOpen, now
	}
}

// current returns the breaker's state as a reader would see it now.
func (b *breaker) current(now time.Time) BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && now.Sub(b.openedAt) >= b.cfg.Cooldown {
		return BreakerHalfOpen // the next call is the probe
	}
	return b.state
}

// breakerFailure reports whether a provider call's error counts against
// its connector's health: the connector did not take the call, or its
// outcome is unknown.
func breakerFailure(err error) bool {
	k := providers.KindOf(err)
	return err != nil && (k == providers.KindNotExecuted || k == providers.KindUnknown)
}

// breakerAllows reports whether the breaker of connector name lets a call
// through now (see breaker.allow).
func (s *Service) breakerAllows(name string) bool {
	b := s.breakers[name]
	return b == nil || b.allow(s.now())
}

// breakerRecord counts a provider call's result on its connector's
// breaker.
func (s *Service) breakerRecord(name string, err error) {
	if b := s.breakers[name]; b != nil {
		b.record(s.now(), breakerFailure(err))
	}
}

// ConnectorHealth is one connector as the console and metrics show it.
type ConnectorHealth struct {
	Name     string       `json:"name"`
	Adapter  string       `json:"adapter"`
	Disabled bool         `json:"disabled"`
	Breaker  BreakerState `json:"breaker"`
}

// ConnectorHealth returns every configured connector with its breaker's
// state in this instance, by name.
func (s *Service) ConnectorHealth() []ConnectorHealth {
	out := make([]ConnectorHealth, 0, len(s.providers))
	for _, name := range s.connectorNames() {
		h := ConnectorHealth{Name: name, Adapter: s.providers[name].Name(), Disabled: s.connectors[name].Disabled,
			Breaker: BreakerClosed}
		if b := s.breakers[name]; b != nil {
			h.Breaker = b.current(s.now())
		}
		out = append(out, h)
	}
	return out
}
