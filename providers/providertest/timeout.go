package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

func testTimeoutAfterExecuteIsUnknownAndRetrySettles(t *testing.T, s *suite) {
	if s.h.TimeoutAfterExecute == nil {
		t.Skip("the harness cannot make this provider time out after executing")
	}
	t.Run("Authorize", func(t *testing.T) {
		t.Parallel()
		req := s.authorizeReq(2100)
		s.h.TimeoutAfterExecute(t, OpAuthorize, req.Key)
		s.timedOut(t, func(ctx context.Context) error { _, err := s.p.Authorize(ctx, req); return err })
		s.executed(t, req.Key, 1)
		first, err := s.p.Authorize(s.ctx, req)
		if err != nil {
			t.Fatalf("retried Authorize: %v", err)
		}
		wantAmounts(t, "settled hold", first, providers.StatusAuthorized, 2100, 0, 0)
		second, err := s.p.Authorize(s.ctx, req)
		if err != nil {
			t.Fatalf("second retried Authorize: %v", err)
		}
		sameHold(t, first, second)
		s.executed(t, req.Key, 1)
	})
	t.Run("Capture", func(t *testing.T) {
		t.Parallel()
		h := s.authorize(t, 3000)
		req := providers.CaptureRequest{Key: s.key(OpCapture), Ref: h.Ref, AmountMinor: 1500}
		s.h.TimeoutAfterExecute(t, OpCapture, req.Key)
		s.timedOut(t, func(ctx context.Context) error { _, err := s.p.Capture(ctx, req); return err })
		s.executed(t, req.Key, 1)
		got, err := s.p.Capture(s.ctx, req)
		if err != nil {
			t.Fatalf("retried Capture: %v", err)
		}
		wantAmounts(t, "settled capture", got, providers.StatusCaptured, 3000, 1500, 0)
		s.executed(t, req.Key, 1)
	})
	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		h := s.authorize(t, 3000)
		req := providers.CancelRequest{Key: s.key(OpCancel), Ref: h.Ref}
		s.h.TimeoutAfterExecute(t, OpCancel, req.Key)
		s.timedOut(t, func(ctx context.Context) error { _, err := s.p.Cancel(ctx, req); return err })
		s.executed(t, req.Key, 1)
		got, err := s.p.Cancel(s.ctx, req)
		if err != nil {
			t.Fatalf("retried Cancel: %v", err)
		}
		wantAmounts(t, "settled cancel", got, providers.StatusCanceled, 3000, 0, 0)
		s.executed(t, req.Key, 1)
	})
	t.Run("Refund", func(t *testing.T) {
		t.Parallel()
		h := s.authorize(t, 3000)
		s.capture(t, h, 0)
		req := providers.RefundRequest{Key: s.key(OpRefund), Ref: h.Ref, AmountMinor: 1000}
		s.h.TimeoutAfterExecute(t, OpRefund, req.Key)
		s.timedOut(t, func(ctx context.Context) error { _, err := s.p.Refund(ctx, req); return err })
		s.executed(t, req.Key, 1)
		first, err := s.p.Refund(s.ctx, req)
		if err != nil {
			t.Fatalf("retried Refund: %v", err)
		}
		second, err := s.p.Refund(s.ctx, req)
		if err != nil {
			t.Fatalf("second retried Refund: %v", err)
		}
		if first.Ref == "" || first.Ref != second.Ref {
			t.Errorf("retries settled on refunds %q and %q, want one", first.Ref, second.Ref)
		}
		// The money moved once, not once per attempt.
		wantAmounts(t, "refunded hold", s.lookup(t, h.Ref), providers.StatusPartiallyRefunded, 3000, 3000, 1000)
		s.executed(t, req.Key, 1)
	})
}

// timedOut runs call bounded by the harness's Timeout and checks that it
// fails as KindUnknown, without waiting much longer than that.
func (s *suite) timedOut(t *testing.T, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, s.h.Timeout)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	if elapsed := time.Since(start); elapsed > s.h.Timeout+5*time.Second {
		t.Errorf("the call gave up after %s, want about %s", elapsed, s.h.Timeout)
	}
	wantError(t, err, providers.KindUnknown)
}
