package reconcile

import (
	"context"
	"time"

	"github.com/payorch/payorch/internal/background"
)

// AbandonedRunsJob records failed, every interval, the runs whose
// instance died (their lease ran out), and announces them.
func (r *Reconciler) AbandonedRunsJob(interval time.Duration) *background.Worker {
	return background.NewWorker("abandoned-runs", interval, time.Minute, r.logger,
		func(ctx context.Context) error {
			n, err := r.FailAbandoned(ctx)
			if n > 0 {
				r.logger.WarnContext(ctx, "abandoned reconciliation runs recorded failed", "count", n)
			}
			return err
		})
}

// Name is the schedule's name as a background job.
func (s *Scheduler) Name() string { return "reconcile-schedule" }
