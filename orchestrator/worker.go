package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Worker runs a function every interval, each run under a timeout, until
// Stop. It is how the resolver and the key sweeper run inside `serve`.
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
