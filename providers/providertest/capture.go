package providertest

import (
	"testing"

	"github.com/payorch/payorch/providers"
)

func testCaptureFull(t *testing.T, s *suite) {
	h := s.authorize(t, 5000)
	key := s.key(OpCapture)
	got, err := s.p.Capture(s.ctx, providers.CaptureRequest{Key: key, Ref: h.Ref})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if got.Ref != h.Ref {
		t.Errorf("captured hold %s, want %s", got.Ref, h.Ref)
	}
	wantAmounts(t, "captured hold", got, providers.StatusCaptured, 5000, 5000, 0)
	s.executed(t, key, 1)
}

func testCapturePartialReleasesRest(t *testing.T, s *suite) {
	h := s.authorize(t, 5000)
	got := s.capture(t, h, 3000)
	wantAmounts(t, "partially captured hold", got, providers.StatusCaptured, 5000, 3000, 0)
	// The 2000 left were released: there is nothing more to capture.
	_, err := s.p.Capture(s.ctx, providers.CaptureRequest{Key: s.key(OpCapture), Ref: h.Ref, AmountMinor: 2000})
	wantError(t, err, providers.KindRejected, providers.CodeStateConflict)
	wantAmounts(t, "hold after a second capture", s.lookup(t, h.Ref), providers.StatusCaptured, 5000, 3000, 0)
}

func testCaptureMoreThanAuthorizedIsRejected(t *testing.T, s *suite) {
	h := s.authorize(t, 5000)
	key := s.key(OpCapture)
	_, err := s.p.Capture(s.ctx, providers.CaptureRequest{Key: key, Ref: h.Ref, AmountMinor: 5001})
	wantError(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
	wantAmounts(t, "hold after the refused capture", s.lookup(t, h.Ref), providers.StatusAuthorized, 5000, 0, 0)
	got := s.capture(t, h, 5000)
	wantAmounts(t, "hold captured in full", got, providers.StatusCaptured, 5000, 5000, 0)
}

func testCancelThenCaptureIsStateConflict(t *testing.T, s *suite) {
	h := s.authorize(t, 2500)
	key := s.key(OpCancel)
	got, err := s.p.Cancel(s.ctx, providers.CancelRequest{Key: key, Ref: h.Ref})
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	wantAmounts(t, "canceled hold", got, providers.StatusCanceled, 2500, 0, 0)
	s.executed(t, key, 1)
	_, err = s.p.Capture(s.ctx, providers.CaptureRequest{Key: s.key(OpCapture), Ref: h.Ref})
	wantError(t, err, providers.KindRejected, providers.CodeStateConflict)
	wantAmounts(t, "hold after capturing a canceled hold", s.lookup(t, h.Ref), providers.StatusCanceled, 2500, 0, 0)
}
