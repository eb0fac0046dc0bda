package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// vaultedID stands for the id of the vaulted method a card comes from: it
// is in AuthorizeRequest.PaymentMethod and must never reach the provider,
// which would refuse it as a method it does not know.
const vaultedID = "vpm_providertest000000000000"

// cardReq is a fresh authorization of amount charging number, with a CVC
// and an expiry two years ahead.
func (s *suite) cardReq(amount int64, number string) providers.AuthorizeRequest {
	req := s.authorizeReq(amount)
	req.PaymentMethod = vaultedID
	req.Card = &providers.Card{Number: number, ExpMonth: 12, ExpYear: time.Now().Year() + 2, CVC: "123",
		HolderName: "Provider Test", Brand: "visa", Last4: number[len(number)-4:]}
	return req
}

// withoutCVC is req as a resumed attempt sends it once the vault erased
// the CVC.
func withoutCVC(req providers.AuthorizeRequest) providers.AuthorizeRequest {
	c := *req.Card
	c.CVC = ""
	req.Card = &c
	return req
}

func testCardApproves(t *testing.T, s *suite) {
	req := s.cardReq(2300, s.h.ApprovedCard)
	var refs []string
	req.OnReference = func(_ context.Context, ref string) error { refs = append(refs, ref); return nil }
	h, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("Authorize with a card: %v", err)
	}
	wantAmounts(t, "card hold", h, providers.StatusAuthorized, 2300, 0, 0)
	if h.PaymentID != req.PaymentID || h.DeclineCode != "" {
		t.Errorf("card hold: payment %q decline %q, want %q and none", h.PaymentID, h.DeclineCode, req.PaymentID)
	}
	if len(refs) != 1 || refs[0] != h.Ref {
		t.Errorf("OnReference got %q, want exactly [%q]", refs, h.Ref)
	}
	wantAmounts(t, "card hold looked up", s.lookup(t, h.Ref), providers.StatusAuthorized, 2300, 0, 0)
	s.executed(t, req.Key, 1)
}

func testCardDeclineIsKindDeclinedWithCode(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name, number, code string
	}{
		{"CardDeclined", s.h.DeclinedCard, providers.CodeCardDeclined},
		{"InsufficientFunds", s.h.InsufficientFundsCard, providers.CodeInsufficientFunds},
		{"SoftDecline", s.h.SoftDeclineCard, s.h.SoftDeclineCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := s.cardReq(2000, tc.number)
			h, err := s.p.Authorize(s.ctx, req)
			wantError(t, err, providers.KindDeclined, tc.code)
			if h.Status != providers.StatusDeclined || h.DeclineCode != tc.code || h.Ref == "" {
				t.Errorf("declined hold %q: %s %q, want declined %q", h.Ref, h.Status, h.DeclineCode, tc.code)
			}
			// The key's final answer: the retry, with or without the
			// CVC, replays it.
			for _, retry := range []providers.AuthorizeRequest{req, withoutCVC(req)} {
				again, err := s.p.Authorize(s.ctx, retry)
				wantError(t, err, providers.KindDeclined, tc.code)
				if again.Ref != h.Ref {
					t.Errorf("retry declined hold %q, want %q", again.Ref, h.Ref)
				}
			}
			s.executed(t, req.Key, 1)
		})
	}
}

func testCardRetryReturnsSameHold(t *testing.T, s *suite) {
	req := s.cardReq(4100, s.h.ApprovedCard)
	first, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("first Authorize: %v", err)
	}
	second, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("retried Authorize: %v", err)
	}
	sameHold(t, first, second)
	s.executed(t, req.Key, 1)
}

func testCardRetryWithoutCVCReturnsSameHold(t *testing.T, s *suite) {
	req := s.cardReq(4200, s.h.ApprovedCard)
	first, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("first Authorize: %v", err)
	}
	for i := range 2 {
		again, err := s.p.Authorize(s.ctx, withoutCVC(req))
		if err != nil {
			t.Fatalf("retry %d without the CVC: %v", i+1, err)
		}
		sameHold(t, first, again)
	}
	s.executed(t, req.Key, 1)
	wantAmounts(t, "hold after the retries", s.lookup(t, first.Ref), providers.StatusAuthorized, 4200, 0, 0)
}

func testCardOtherCardSameKeyIsRejectedMismatch(t *testing.T, s *suite) {
	req := s.cardReq(1700, s.h.ApprovedCard)
	h, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	const other = "5555555555554444"
	for name, retry := range map[string]providers.AuthorizeRequest{
		"OtherNumber":              s.withCard(req, func(c *providers.Card) { c.Number, c.Last4 = other, other[12:] }),
		"OtherNumberWithoutCVC":    withoutCVC(s.withCard(req, func(c *providers.Card) { c.Number, c.Last4 = other, other[12:] })),
		"OtherExpiryWithoutCVC":    withoutCVC(s.withCard(req, func(c *providers.Card) { c.ExpYear++ })),
		"OtherAmountSameCardNoCVC": func() providers.AuthorizeRequest { r := withoutCVC(req); r.AmountMinor++; return r }(),
	} {
		_, err := s.p.Authorize(s.ctx, retry)
		if providers.KindOf(err) != providers.KindRejected || providers.CodeOf(err) != providers.CodeIdempotencyMismatch {
			t.Errorf("%s under the same key: %v, want rejected idempotency_key_mismatch", name, err)
		}
	}
	s.executed(t, req.Key, 1)
	wantAmounts(t, "hold after the mismatches", s.lookup(t, h.Ref), providers.StatusAuthorized, 1700, 0, 0)
}

// withCard is req with a copy of its card changed by edit.
func (s *suite) withCard(req providers.AuthorizeRequest, edit func(*providers.Card)) providers.AuthorizeRequest {
	c := *req.Card
	edit(&c)
	req.Card = &c
	return req
}

func testCardDataThatCannotBeRightIsDeclined(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name string
		edit func(*providers.Card)
		code string
	}{
		{"ExpiryInThePast", func(c *providers.Card) { c.ExpYear = time.Now().Year() - 1 }, "invalid_expiry_year"},
		{"CVCOfTwoDigits", func(c *providers.Card) { c.CVC = "12" }, "invalid_cvc"},
		{"NotLuhnValid", func(c *providers.Card) { c.Number = "4242424242424241" }, "incorrect_number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := s.withCard(s.cardReq(1200, s.h.ApprovedCard), tc.edit)
			h, err := s.p.Authorize(s.ctx, req)
			wantError(t, err, providers.KindDeclined, tc.code)
			if h.Status == providers.StatusAuthorized {
				t.Errorf("card data refused, yet hold %s is authorized", h.Ref)
			}
			if h.Ref != "" {
				if got := s.lookup(t, h.Ref); got.Status == providers.StatusAuthorized {
					t.Errorf("card data refused, yet hold %s reads as authorized", h.Ref)
				}
			}
		})
	}
}
