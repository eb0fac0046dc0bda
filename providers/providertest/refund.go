package providertest

import (
	"testing"

	"github.com/payorch/payorch/providers"
)

func testRefundsAddUpToCaptured(t *testing.T, s *suite) {
	h := s.authorize(t, 10000)
	s.capture(t, h, 6000)

	refs := map[string]bool{}
	for i, step := range []struct {
		amount, refunded int64
		status           providers.Status
	}{
		{2000, 2000, providers.StatusPartiallyRefunded},
		{4000, 6000, providers.StatusRefunded},
	} {
		key := s.key(OpRefund)
		rf, err := s.p.Refund(s.ctx, providers.RefundRequest{Key: key, Ref: h.Ref, AmountMinor: step.amount})
		if err != nil {
			t.Fatalf("refund %d of %d: %v", i+1, step.amount, err)
		}
		if rf.Ref == "" || refs[rf.Ref] {
			t.Errorf("refund %d has reference %q, want a new one", i+1, rf.Ref)
		}
		refs[rf.Ref] = true
		if rf.HoldRef != h.Ref || rf.AmountMinor != step.amount || rf.Currency != h.Currency {
			t.Errorf("refund %d: %+v, want hold %s amount %d %s", i+1, rf, h.Ref, step.amount, h.Currency)
		}
		s.executed(t, key, 1)
		wantAmounts(t, "hold after a refund", s.lookup(t, h.Ref), step.status, 10000, 6000, step.refunded)
	}
	_, err := s.p.Refund(s.ctx, providers.RefundRequest{Key: s.key(OpRefund), Ref: h.Ref, AmountMinor: 1})
	wantError(t, err, providers.KindRejected, providers.CodeStateConflict, providers.CodeAmountTooLarge)
	wantAmounts(t, "hold after refunding too much", s.lookup(t, h.Ref), providers.StatusRefunded, 10000, 6000, 6000)
}

func testRefundOverCapturedIsRejected(t *testing.T, s *suite) {
	h := s.authorize(t, 8000)
	s.capture(t, h, 3000)
	_, err := s.p.Refund(s.ctx, providers.RefundRequest{Key: s.key(OpRefund), Ref: h.Ref, AmountMinor: 3001})
	wantError(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
	wantAmounts(t, "hold after the refused refund", s.lookup(t, h.Ref), providers.StatusCaptured, 8000, 3000, 0)
	if _, err := s.p.Refund(s.ctx, providers.RefundRequest{Key: s.key(OpRefund), Ref: h.Ref, AmountMinor: 3000}); err != nil {
		t.Fatalf("refunding all that was captured: %v", err)
	}
	wantAmounts(t, "hold refunded in full", s.lookup(t, h.Ref), providers.StatusRefunded, 8000, 3000, 3000)
}
