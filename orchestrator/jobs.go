package orchestrator

import (
	"context"
	"time"

	"github.com/payorch/payorch/internal/background"
)

// The domain's background jobs, each a background.Worker that `serve`
// starts. Every one is safe on several instances at once: the rows a pass
// works on are taken with SKIP LOCKED or under an advisory lock.

// ResolverJob settles, every interval, the payments and operations left
// pending longer than minAge (a request that died with its instance, a
// provider that timed out), 100 at a time. providerTimeout bounds each
// provider lookup; a pass may make a few in a row.
func (s *Service) ResolverJob(interval, minAge, providerTimeout time.Duration) *background.Worker {
	return background.NewWorker("resolver", interval, interval+providerTimeout*4, s.logger,
		func(ctx context.Context) error {
			st, err := s.ResolvePending(ctx, minAge, 100)
			if st.Examined > 0 {
				s.logger.InfoContext(ctx, "resolver pass", "examined", st.Examined, "settled", st.Settled,
					"still_pending", st.Pending, "errors", st.Errors)
			}
			return err
		})
}

// HistoryJob makes the next months' partitions of the append-only
// history ahead of time and drops those past the retention, hourly (every
// instance; serialised in the database).
func (s *Service) HistoryJob(retention HistoryRetention) *background.Worker {
	return background.NewWorker("history", time.Hour, time.Minute, s.logger,
		func(ctx context.Context) error {
			m, err := s.MaintainHistory(ctx, retention)
			if m != (HistoryMaintenance{}) {
				s.logger.InfoContext(ctx, "history partitions", "created", m.Created, "dropped", m.Dropped)
			}
			return err
		})
}

// HoldSweeperJob watches authorized holds every interval: it warns
// before a hold's deadline, acts on it as the payment asked (capture or
// cancel), and expires it at the deadline. providerTimeout bounds each
// provider call a pass makes.
func (s *Service) HoldSweeperJob(interval, providerTimeout time.Duration) *background.Worker {
	return background.NewWorker("hold-sweeper", interval, interval+providerTimeout*4, s.logger,
		func(ctx context.Context) error {
			st, err := s.SweepHolds(ctx)
			if st != (HoldStats{}) {
				s.logger.InfoContext(ctx, "hold sweeper pass", "warned", st.Warned, "acted", st.Acted,
					"expired", st.Expired, "extended", st.Extended, "errors", st.Errors)
			}
			return err
		})
}

// KeySweeperJob purges expired idempotency keys every interval, a
// thousand at a time until none is left.
func (s *Service) KeySweeperJob(interval time.Duration) *background.Worker {
	return background.NewWorker("key-sweeper", interval, time.Minute, s.logger,
		func(ctx context.Context) error {
			total := 0
			for {
				n, err := s.PurgeExpiredKeys(ctx, 1000)
				total += n
				if err != nil || n < 1000 {
					if total > 0 {
						s.logger.InfoContext(ctx, "expired idempotency keys purged", "count", total)
					}
					return err
				}
			}
		})
}

// KeyCacheJob is the API key cache's listener (StartKeyCache): the cache
// is on while it hears revocations, off otherwise.
func (s *Service) KeyCacheJob() background.Job {
	return background.Func("key-cache", s.StartKeyCache)
}
