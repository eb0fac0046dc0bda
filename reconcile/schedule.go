package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// DefaultSchedule runs yesterday's reconciliation at 03:00 (SPEC).
const DefaultSchedule = "0 3 * * *"

// Scheduler fires the daily reconciliation of yesterday for every
// provider on a cron schedule. Every instance runs one; the runs table
// (one scheduled run per provider and day) makes exactly one of them do
// the work.
type Scheduler struct {
	r       *Reconciler
	cron    *cron.Cron
	timeout time.Duration

	mu      sync.Mutex
	running sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// NewScheduler parses spec (standard 5-field cron, in the reconciler's
// time zone). Errors: a bad spec.
func NewScheduler(r *Reconciler, spec string, timeout time.Duration) (*Scheduler, error) {
	c := cron.New(cron.WithLocation(r.loc))
	s := &Scheduler{r: r, cron: c, timeout: timeout}
	if _, err := c.AddFunc(spec, s.fire); err != nil {
		return nil, fmt.Errorf("reconcile: schedule %q: %w", spec, err)
	}
	return s, nil
}

// Start begins firing on schedule.
func (s *Scheduler) Start(ctx context.Context) {
	s.mu.Lock()
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.mu.Unlock()
	s.cron.Start()
}

// Stop stops the schedule, cancels a run in progress (it is recorded as
// failed and can be re-run) and waits for it.
func (s *Scheduler) Stop() {
	<-s.cron.Stop().Done()
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.running.Wait()
}

func (s *Scheduler) fire() {
	s.mu.Lock()
	ctx := s.ctx
	s.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	s.running.Add(1)
	defer s.running.Done()
	s.RunOnce(ctx)
}

// RunOnce reconciles yesterday for every provider, as the schedule does,
// and returns the runs this instance executed.
func (s *Scheduler) RunOnce(ctx context.Context) []Run {
	date := s.r.Yesterday()
	names := make([]string, 0, len(s.r.providers))
	for name := range s.r.providers {
		names = append(names, name)
	}
	sort.Strings(names)
	var done []Run
	for _, name := range names {
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		run, err := s.r.Reconcile(rctx, name, date, TriggerSchedule, "schedule")
		cancel()
		switch {
		case errors.Is(err, ErrAlreadyScheduled):
			s.r.logger.InfoContext(ctx, "scheduled reconciliation already ran elsewhere", "provider", name, "business_date", date.Format(time.DateOnly))
		case err != nil:
			s.r.logger.ErrorContext(ctx, "scheduled reconciliation failed", "provider", name, "error", err)
		default:
			done = append(done, run)
		}
	}
	return done
}
