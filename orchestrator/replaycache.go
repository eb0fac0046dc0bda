package orchestrator

import (
	"sync"
	"time"
)

// The replay cache answers retries of completed keys from memory. A
// completed key's stored response never changes: no statement rewrites a
// completed key before it expires (a takeover needs in_progress, a renewal
// needs the key expired), so an entry is exact until the key's expires_at,
// and is never used from then on. Each instance fills its own cache from
// the keys it completes and the completed keys it reads; nothing needs
// invalidating across instances.
const (
	// maxReplayBody is the largest stored body kept in memory; larger
	// ones are read from the database each time.
	maxReplayBody = 16 << 10
)

// replayEntry is a completed key as BeginIdempotent needs it.
type replayEntry struct {
	requestHash string
	fieldHashes map[string]string
	response    *StoredResponse
	expiresAt   time.Time
}

// replayKey names a key: tenant, scope, operation, key (the primary key
// of idempotency_keys).
type replayKey struct {
	tenantID  int64
	scope     string
	operation string
	key       string
}

// replayCache is a bounded map of completed keys; a nil *replayCache is
// off.
type replayCache struct {
	max     int
	mu      sync.Mutex
	entries map[replayKey]*replayEntry
}

func newReplayCache(maxEntries int) *replayCache {
	if maxEntries <= 0 {
		return nil
	}
	return &replayCache{max: maxEntries, entries: make(map[replayKey]*replayEntry)}
}

// get returns k's entry if it is held and the key has not expired at now.
func (c *replayCache) get(k replayKey, now time.Time) (*replayEntry, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		return nil, false
	}
	if !e.expiresAt.After(now) {
		delete(c.entries, k)
		return nil, false
	}
	return e, true
}

// put keeps a completed key until it expires. Bodies over maxReplayBody
// are not kept. When full, an arbitrary entry makes room.
func (c *replayCache) put(k replayKey, e *replayEntry) {
	if c == nil || len(e.response.Body) > maxReplayBody {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.max {
		for old := range c.entries { // map order: an arbitrary victim
			delete(c.entries, old)
			break
		}
	}
	c.entries[k] = e
}

// len returns the number of entries held.
func (c *replayCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
