package orchestrator

import (
	"strconv"
	"time"
)

// The routing cache spares each authorization the read of its tenant's
// active routing. Like the API key cache (keycache.go), whose listener
// connection it shares, it is on only while that listener LISTENs, here on
// payorch_routing (migration 00008: sent with the tenant id after each new
// routing version); whenever the listener is down, the cache is off and
// empty, and every authorization reads the database. The generation
// protocol of notifiedCache (notifiedcache.go) closes the race between a
// read and a new version heard before the read is cached.
const (
	routingCacheChannel = "payorch_routing"
	// routingCacheMaxEntries bounds the cache (tenants); past it an
	// arbitrary entry goes.
	routingCacheMaxEntries = 10_000
	// routingCacheMaxAge is a backstop: a tenant's routing is read again
	// at least this often even if no notification ever came.
	routingCacheMaxAge = 60 * time.Second
)

// routingCache maps tenant ids to their active routing. It is off (empty,
// refusing entries) until enabled.
type routingCache struct {
	*notifiedCache[int64, RoutingVersion]
}

func newRoutingCache(maxEntries int, maxAge time.Duration) *routingCache {
	return &routingCache{newNotifiedCache[int64, RoutingVersion](maxEntries, maxAge)}
}

// invalidatePayload handles a payorch_routing notification: its payload is
// the tenant id; anything else drops every entry.
func (c *routingCache) invalidatePayload(payload string) {
	id, err := strconv.ParseInt(payload, 10, 64)
	c.invalidate(id, err != nil)
}
