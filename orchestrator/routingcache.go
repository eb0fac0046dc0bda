package orchestrator

import (
	"strconv"
	"sync"
	"time"
)

// The routing cache spares each authorization the read of its tenant's
// active routing. Like the API key cache (keycache.go), whose listener
// connection it shares, it is on only while that listener LISTENs, here on
// payorch_routing (migration 00008: sent with the tenant id after each new
// routing version); whenever the listener is down, the cache is off and
// empty, and every authorization reads the database. A generation counter
// closes the race between a read and a new version heard before the read
// is cached: every invalidation advances the generation, and a read is
// only cached if the generation is the one read before it.
const (
	routingCacheChannel = "payorch_routing"
	// routingCacheMaxEntries bounds the cache (tenants); past it an
	// arbitrary entry goes.
	routingCacheMaxEntries = 10_000
	// routingCacheMaxAge is a backstop: a tenant's routing is read again
	// at least this often even if no notification ever came.
	routingCacheMaxAge = 60 * time.Second
)

// routingEntry is a cached active routing.
type routingEntry struct {
	v     RoutingVersion
	added time.Time
}

// routingCache maps tenant ids to their active routing. It is off (empty,
// refusing entries) until enabled.
type routingCache struct {
	maxEntries int
	maxAge     time.Duration
	now        func() time.Time // for maxAge; time.Now

	mu      sync.Mutex
	enabled bool
	gen     uint64
	entries map[int64]routingEntry
}

func newRoutingCache(maxEntries int, maxAge time.Duration) *routingCache {
	return &routingCache{maxEntries: maxEntries, maxAge: maxAge, now: time.Now, entries: make(map[int64]routingEntry)}
}

// lookup returns the tenant's routing when the cache is on and holds a
// fresh entry.
func (c *routingCache) lookup(tenantID int64) (RoutingVersion, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled {
		return RoutingVersion{}, false
	}
	e, ok := c.entries[tenantID]
	if !ok {
		return RoutingVersion{}, false
	}
	if c.now().Sub(e.added) >= c.maxAge {
		delete(c.entries, tenantID)
		return RoutingVersion{}, false
	}
	return e.v, true
}

// generation returns the current generation, to be read before the
// database read whose result is then offered to put.
func (c *routingCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put stores v for tenantID if the cache is on and nothing was
// invalidated since gen was read; it reports whether it did.
func (c *routingCache) put(gen uint64, tenantID int64, v RoutingVersion) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || gen != c.gen {
		return false
	}
	if _, ok := c.entries[tenantID]; !ok && len(c.entries) >= c.maxEntries {
		for old := range c.entries { // map order: an arbitrary victim
			delete(c.entries, old)
			break
		}
	}
	c.entries[tenantID] = routingEntry{v: v, added: c.now()}
	return true
}

// invalidate drops tenantID's entry (every entry when all) and advances
// the generation, so no read that began before it is cached after it.
func (c *routingCache) invalidate(tenantID int64, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if all {
		clear(c.entries)
		return
	}
	delete(c.entries, tenantID)
}

// invalidatePayload handles a payorch_routing notification: its payload is
// the tenant id; anything else drops every entry.
func (c *routingCache) invalidatePayload(payload string) {
	id, err := strconv.ParseInt(payload, 10, 64)
	c.invalidate(id, err != nil)
}

// setEnabled turns the cache on or off; either way it is emptied and the
// generation advances.
func (c *routingCache) setEnabled(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
	c.enabled = on
}

// isEnabled reports whether the cache is on (its listener is healthy).
func (c *routingCache) isEnabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enabled
}

// len returns the number of entries.
func (c *routingCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
