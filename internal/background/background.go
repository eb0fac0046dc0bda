// Package background is the one shape of the work `serve` does besides
// answering requests: the resolver, the sweepers, webhook delivery,
// history maintenance, the reconciliation schedule and the key cache's
// listener. Each is a Job, made by the package that owns the work (for
// example orchestrator's Service.ResolverJob or reconcile's
// Reconciler.AbandonedRunsJob), and `serve` keeps one list of them: Start
// starts them in order, and the function it returns stops them in the
// reverse order, each waiting for its run in progress to end.
package background

import "context"

// Job is background work with a name, started once and stopped once.
type Job interface {
	// Name says what the job does, in logs ("resolver", "webhooks").
	Name() string
	// Start begins the job in the background; ctx bounds its life.
	Start(ctx context.Context)
	// Stop ends the job and returns once its current run has ended.
	Stop()
}

// Start starts jobs in order and returns what stops them, in the reverse
// order: a job started after another may rely on it until it is stopped.
func Start(ctx context.Context, jobs ...Job) (stop func()) {
	for _, j := range jobs {
		j.Start(ctx)
	}
	return func() {
		for i := len(jobs) - 1; i >= 0; i-- {
			jobs[i].Stop()
		}
	}
}

// funcJob is a Job from a function that starts something and returns
// what stops it.
type funcJob struct {
	name  string
	start func(context.Context) (stop func())
	stop  func()
}

// Func makes a Job of start, which begins the work and returns what ends
// it (a listener that runs until stopped, say).
func Func(name string, start func(context.Context) (stop func())) Job {
	return &funcJob{name: name, start: start}
}

func (j *funcJob) Name() string { return j.name }

func (j *funcJob) Start(ctx context.Context) {
	if j.stop == nil {
		j.stop = j.start(ctx)
	}
}

func (j *funcJob) Stop() {
	if j.stop != nil {
		j.stop()
		j.stop = nil
	}
}
