package reconcile

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// leaseFor is how long a running run is presumed alive without a heartbeat.
const leaseFor = 2 * time.Minute

// leaseBeat is how often the leases of held runs are renewed.
const leaseBeat = leaseFor / 4

// leases keeps alive the lease of every run this Reconciler holds, queued
// or executing, with one short UPDATE per beat whatever their number, so
// that a hundred queued runs cost the back-office pool no more than one.
// Its goroutine runs while at least one run is held.
type leases struct {
	r       *Reconciler
	mu      sync.Mutex
	ids     map[int64]struct{}
	beating bool
}

// hold keeps run id's lease alive until the returned function is called.
func (l *leases) hold(id int64) (release func()) {
	l.mu.Lock()
	l.ids[id] = struct{}{}
	if !l.beating {
		l.beating = true
		go l.beat()
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.ids, id)
		l.mu.Unlock()
	}
}

func (l *leases) beat() {
	t := time.NewTicker(leaseBeat)
	defer t.Stop()
	for range t.C {
		l.mu.Lock()
		if len(l.ids) == 0 {
			l.beating = false
			l.mu.Unlock()
			return
		}
		ids := slices.Collect(maps.Keys(l.ids))
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), leaseBeat)
		_, err := l.r.pool.Exec(ctx, `UPDATE reconciliation_runs SET lease_until = $2 WHERE id = ANY($1) AND status = 'running'`,
			ids, l.r.now().Add(leaseFor))
		cancel()
		if err != nil {
			l.r.logger.Warn("reconciliation heartbeat", "runs", len(ids), "error", err)
		}
	}
}
