package background

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Worker is a Job that runs a function every interval, each run under a
// timeout, until Stop; the first run is at Start. Several instances may
// run the same Worker at once: the work it calls makes that safe (SKIP
// LOCKED, advisory locks, leases).
type Worker struct {
	name     string
	interval time.Duration
	timeout  time.Duration
	run      func(context.Context) error
	logger   *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewWorker returns a stopped Worker.
func NewWorker(name string, interval, timeout time.Duration, logger *slog.Logger, run func(context.Context) error) *Worker {
	return &Worker{name: name, interval: interval, timeout: timeout, run: run, logger: logger}
}

// Name is the worker's name, as its errors are logged.
func (w *Worker) Name() string { return w.name }

// Start runs the worker in the background; the first run is immediate.
func (w *Worker) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return
	}
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			rctx, cancel := context.WithTimeout(ctx, w.timeout)
			if err := w.run(rctx); err != nil && !errors.Is(err, context.Canceled) {
				w.logger.ErrorContext(ctx, "background run failed", "worker", w.name, "error", err)
			}
			cancel()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop cancels the current run and waits for the worker to end.
func (w *Worker) Stop() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}
