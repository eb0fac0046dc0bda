package orchestrator

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The API key cache spares Authenticate its database round trip. It holds
// valid, non-revoked keys only, and only while a listener on a dedicated
// connection hears NOTIFY payorch_api_keys (migration 00005: sent after
// anything authentication reads changes, and on delete; 00020: and on
// insert), so a revocation
// anywhere reaches every instance within the notification's delivery time.
// Whenever the listener is down the cache is off and empty: every
// Authenticate reads the database, as without the cache. The same
// connection LISTENs on payorch_routing for the routing cache
// (routingcache.go), which is on and off with this one.
//
// The generation protocol of notifiedCache (notifiedcache.go) closes the
// race between a request that read a key and a revocation that commits (and
// is heard) before the request caches what it read.
const (
	keyCacheChannel = "payorch_api_keys"
	// keyCacheMaxEntries bounds the cache; past it an arbitrary entry goes.
	keyCacheMaxEntries = 10_000
	// keyCacheMaxAge is a backstop: an entry is re-read at least this often
	// even if no notification ever came.
	keyCacheMaxAge = 60 * time.Second

	// unknownKeyMaxEntries bounds the ids remembered as authenticating
	// nobody; past it an arbitrary one goes.
	unknownKeyMaxEntries = 10_000
	// unknownKeyMaxAge is how long such an id is remembered: how long a key
	// created with it could be refused, were its notification lost.
	unknownKeyMaxAge = 30 * time.Second

	keyListenerMinBackoff = 100 * time.Millisecond
	keyListenerMaxBackoff = 10 * time.Second
	// keyListenerPingEvery: after this long without a notification the
	// listener pings its connection, so a silently dead one is noticed.
	keyListenerPingEvery = 30 * time.Second
	keyListenerTimeout   = 10 * time.Second
)

// cachedKey is what Authenticate needs of a valid key.
type cachedKey struct {
	role     Role
	tenantID int64
	hash     [sha256.Size]byte
	// lastUsed is the key's last_used_at as this instance knows it; zero
	// when never used.
	lastUsed time.Time
}

// keyCache maps key ids to valid keys. It is off (empty, refusing
// entries) until enabled.
type keyCache struct {
	*notifiedCache[string, cachedKey]
}

func newKeyCache(maxEntries int, maxAge time.Duration) *keyCache {
	return &keyCache{newNotifiedCache[string, cachedKey](maxEntries, maxAge)}
}

// unknownKeys remembers key ids that authenticated nobody (no such key, or
// a revoked one), so that a client repeating a made-up or revoked key is
// refused without a database read each time. Unlike keyCache it is on
// whether or not the listener runs: a stale entry can only refuse a key
// for unknownKeyMaxAge, never accept one. The notifications (migration
// 00020: key creation notifies too), a key's creation on this instance and
// the listener's coming up or going down drop entries; the generation
// protocol keeps a read from before a key's creation out of it after.
type unknownKeys struct {
	*notifiedCache[string, struct{}]
}

func newUnknownKeys(maxEntries int, maxAge time.Duration) *unknownKeys {
	c := &unknownKeys{newNotifiedCache[string, struct{}](maxEntries, maxAge)}
	c.setEnabled(true)
	return c
}

// invalidate drops id ("" drops every entry) and advances the generation.
func (c *unknownKeys) invalidate(id string) {
	c.notifiedCache.invalidate(id, id == "")
}

// lastUsedDue reports whether a key last used at lastUsed (zero: never) is
// due a last_used_at write at now.
func lastUsedDue(lastUsed, now time.Time) bool {
	return lastUsed.IsZero() || now.Sub(lastUsed) >= lastUsedGranularity
}

// lookup returns id's entry when the cache is on and holds a fresh one. If
// the key is due a last_used_at write at now, the entry's lastUsed becomes
// now and touch is true: the caller writes it (so one request a minute per
// key does, not every concurrent one).
func (c *keyCache) lookup(id string, now time.Time) (e cachedKey, touch, ok bool) {
	e, ok = c.lookupFunc(id, func(p *cachedKey) {
		if lastUsedDue(p.lastUsed, now) {
			p.lastUsed, touch = now, true
		}
	})
	return e, touch, ok
}

// invalidate drops id ("" drops every entry) and advances the generation,
// so no read that began before it is cached after it.
func (c *keyCache) invalidate(id string) {
	c.notifiedCache.invalidate(id, id == "")
}

// StartKeyCache turns on the in-process API key cache and routing cache: a
// dedicated connection (not one of the pool's) listens for payorch_api_keys
// and payorch_routing notifications, and while it does, Authenticate
// serves keys it has already verified once from memory (still comparing
// the presented secret's hash), and routingFor tenants' routing it has
// read once. When the connection fails, both caches are turned off and
// emptied until the listener has reconnected (with backoff) and listens
// again. The caches stay off until this is called. stop ends the listener, turns the cache off and
// waits; so does ctx being done. One listener per Service: a second call
// while one runs starts nothing and returns a no-op stop.
func (s *Service) StartKeyCache(ctx context.Context) (stop func()) {
	s.keyListenerMu.Lock()
	defer s.keyListenerMu.Unlock()
	if s.keyListenerOn {
		s.logger.WarnContext(ctx, "api key cache already started")
		return func() {}
	}
	s.keyListenerOn = true
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.listenForKeys(ctx)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			s.keyListenerMu.Lock()
			s.keyListenerOn = false
			s.keyListenerMu.Unlock()
		})
	}
}

// setCachesEnabled turns the caches that live on the listener's
// notifications (API keys, routing) on or off, emptying them. The unknown
// keys stay on but are emptied too: notifications may have been missed.
func (s *Service) setCachesEnabled(on bool) {
	s.keys.setEnabled(on)
	s.routes.setEnabled(on)
	s.unknownKeys.invalidate("")
}

// listenForKeys keeps a listener connection up until ctx is done; the
// caches are on exactly while one listens.
func (s *Service) listenForKeys(ctx context.Context) {
	defer s.setCachesEnabled(false)
	dial := s.keyListenerConn
	if s.keyListenerDial != nil {
		dial = s.keyListenerDial
	}
	backoff := keyListenerMinBackoff
	reconnect := false
	for {
		conn, err := dial(ctx)
		if err == nil {
			// Listening: every change committed from now on will be heard,
			// and setEnabled advances the generations, so nothing read while
			// the listener was down can be cached.
			s.setCachesEnabled(true)
			if reconnect {
				s.logger.InfoContext(ctx, "api key cache listener reconnected; cache on")
			} else {
				s.logger.DebugContext(ctx, "api key cache listener started; cache on")
			}
			backoff = keyListenerMinBackoff
			err = s.keyNotifications(ctx, conn)
			s.setCachesEnabled(false)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		reconnect = true
		s.logger.WarnContext(ctx, "api key cache off: its notification listener failed; authenticating against the database until it reconnects",
			"error", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, keyListenerMaxBackoff)
	}
}

// keyCreatedPrefix marks the notification of a new key id (migration
// 00020); other payloads are the id of a changed or deleted key, or "" for
// all of them.
const keyCreatedPrefix = "new:"

// keyNotification drops what this instance holds about the key a
// payorch_api_keys notification names. A new id can make no cached key
// stale, only its memory as unknown.
func (s *Service) keyNotification(payload string) {
	if id, created := strings.CutPrefix(payload, keyCreatedPrefix); created {
		s.unknownKeys.invalidate(id)
		return
	}
	s.keys.invalidate(payload)
	s.unknownKeys.invalidate(payload)
}

// keyListenerConn opens the listener's own connection, configured by
// Config.ListenConfig or else like the pool's, and LISTENs on it on both
// channels.
func (s *Service) keyListenerConn(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, keyListenerTimeout)
	defer cancel()
	cc := s.listenConfig
	if cc == nil {
		cc = s.pool.Config().ConnConfig
	}
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return nil, err
	}
	for _, ch := range []string{keyCacheChannel, routingCacheChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return conn, nil
}

// keyNotifications evicts the key (cached, or remembered as unknown), or
// the tenant's routing, of each
// notification on conn until conn fails (its error is returned) or ctx is
// done.
func (s *Service) keyNotifications(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, keyListenerPingEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case n == nil:
		case n.Channel == keyCacheChannel:
			s.keyNotification(n.Payload)
		case n.Channel == routingCacheChannel:
			s.routes.invalidatePayload(n.Payload)
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if pgconn.Timeout(err) && !conn.IsClosed() {
			// Quiet, not necessarily dead: make sure.
			pctx, cancel := context.WithTimeout(ctx, keyListenerTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
		}
		return err
	}
}
