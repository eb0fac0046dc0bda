package providertest

import (
	"testing"

	"github.com/payorch/payorch/providers"
)

func testLookupUnknownRefIsRejectedNotFound(t *testing.T, s *suite) {
	_, err := s.p.Lookup(s.ctx, s.h.UnknownRef)
	wantError(t, err, providers.KindRejected, providers.CodeNotFound)
}

func testLookupReflectsCapture(t *testing.T, s *suite) {
	req := s.authorizeReq(4000)
	h, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	wantAmounts(t, "hold before capture", s.lookup(t, h.Ref), providers.StatusAuthorized, 4000, 0, 0)
	s.capture(t, h, 2500)
	got := s.lookup(t, h.Ref)
	if got.Ref != h.Ref || got.PaymentID != req.PaymentID || got.Currency != req.Currency {
		t.Errorf("Lookup: ref %s payment %s currency %s, want %s %s %s",
			got.Ref, got.PaymentID, got.Currency, h.Ref, req.PaymentID, req.Currency)
	}
	if !got.CreatedAt.Equal(h.CreatedAt) {
		t.Errorf("Lookup: CreatedAt %s, want %s", got.CreatedAt, h.CreatedAt)
	}
	wantAmounts(t, "hold after capture", got, providers.StatusCaptured, 4000, 2500, 0)
}
