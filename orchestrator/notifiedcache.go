package orchestrator

import (
	"sync"
	"time"
)

// notifiedCache is a bounded, in-memory map whose entries are only
// trustworthy while a listener hears the notifications that invalidate
// them (the API key cache and the routing cache, on StartKeyCache's
// listener). It is off (empty, refusing entries) until enabled, and
// setEnabled(false) empties it whenever the listener is down. Past
// maxEntries an arbitrary entry goes; an entry older than maxAge is a miss
// (a backstop should a notification never come).
//
// The generation protocol closes the race between a reader and an
// invalidation: a reader that misses calls generation before its database
// read and offers the result to put with that generation. Every
// invalidate and setEnabled advances the generation, so put refuses what
// was read before a change that was heard (or before the listener went down
// or came back) after the read began: nothing stale is cached after its
// invalidation.
type notifiedCache[K comparable, V any] struct {
	maxEntries int
	maxAge     time.Duration
	now        func() time.Time // for maxAge; time.Now

	mu      sync.Mutex
	enabled bool
	gen     uint64
	entries map[K]*listenedEntry[V]
}

// listenedEntry is a cached value and when it was stored, on the cache's
// clock.
type listenedEntry[V any] struct {
	v     V
	added time.Time
}

func newNotifiedCache[K comparable, V any](maxEntries int, maxAge time.Duration) *notifiedCache[K, V] {
	return &notifiedCache[K, V]{maxEntries: maxEntries, maxAge: maxAge, now: time.Now, entries: make(map[K]*listenedEntry[V])}
}

// lookup returns k's value when the cache is on and holds a fresh entry.
func (c *notifiedCache[K, V]) lookup(k K) (V, bool) {
	return c.lookupFunc(k, nil)
}

// lookupFunc is lookup that, on a hit, first calls hit (unless nil) with
// the stored value, under the cache's lock: what hit changes is kept and
// returned.
func (c *notifiedCache[K, V]) lookupFunc(k K, hit func(*V)) (V, bool) {
	var zero V
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled {
		return zero, false
	}
	e := c.entries[k]
	if e == nil {
		return zero, false
	}
	if c.now().Sub(e.added) >= c.maxAge {
		delete(c.entries, k)
		return zero, false
	}
	if hit != nil {
		hit(&e.v)
	}
	return e.v, true
}

// generation returns the current generation, to be read before the
// database read whose result is then offered to put.
func (c *notifiedCache[K, V]) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put stores v under k if the cache is on and nothing was invalidated
// since gen was read; it reports whether it did.
func (c *notifiedCache[K, V]) put(gen uint64, k K, v V) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || gen != c.gen {
		return false
	}
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.maxEntries {
		for old := range c.entries { // map order: an arbitrary victim
			delete(c.entries, old)
			break
		}
	}
	c.entries[k] = &listenedEntry[V]{v: v, added: c.now()}
	return true
}

// invalidate drops k's entry (every entry when all) and advances the
// generation, so no read that began before it is cached after it.
func (c *notifiedCache[K, V]) invalidate(k K, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if all {
		clear(c.entries)
		return
	}
	delete(c.entries, k)
}

// setEnabled turns the cache on or off; either way it is emptied and the
// generation advances.
func (c *notifiedCache[K, V]) setEnabled(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
	c.enabled = on
}

// isEnabled reports whether the cache is on (its listener is healthy).
func (c *notifiedCache[K, V]) isEnabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enabled
}

// len returns the number of entries.
func (c *notifiedCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
