package providertest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// testCheckPaymentMethodAcceptsOnlyItsShape: the suite's payment methods
// pass the provider's own check, and a malformed one is refused with a
// message for the merchant.
func testCheckPaymentMethodAcceptsOnlyItsShape(t *testing.T, s *suite) {
	for _, pm := range []string{s.h.ApprovedMethod, s.h.DeclinedMethod, s.h.InsufficientFundsMethod} {
		if err := s.p.CheckPaymentMethod(pm); err != nil {
			t.Errorf("CheckPaymentMethod(%q) = %v, want nil", pm, err)
		}
	}
	err := s.p.CheckPaymentMethod(s.h.InvalidMethod)
	if err == nil {
		t.Fatalf("CheckPaymentMethod(%q) = nil, want a refusal", s.h.InvalidMethod)
	}
	if msg := err.Error(); !strings.Contains(msg, "payment_method") {
		t.Errorf("CheckPaymentMethod(%q) = %q, which does not name payment_method for the merchant", s.h.InvalidMethod, msg)
	}
}

func testAuthorizeApprovesVisa(t *testing.T, s *suite) {
	before := time.Now()
	req := s.authorizeReq(1234)
	h, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	if h.Ref == "" {
		t.Error("hold has no Ref")
	}
	if h.PaymentID != req.PaymentID {
		t.Errorf("PaymentID %q, want %q", h.PaymentID, req.PaymentID)
	}
	if h.Currency != req.Currency {
		t.Errorf("Currency %q, want %q", h.Currency, req.Currency)
	}
	if h.DeclineCode != "" {
		t.Errorf("DeclineCode %q on an approved hold", h.DeclineCode)
	}
	wantAmounts(t, "authorized hold", h, providers.StatusAuthorized, 1234, 0, 0)
	if h.CreatedAt.Before(before.Add(-5*time.Minute)) || h.CreatedAt.After(time.Now().Add(5*time.Minute)) {
		t.Errorf("CreatedAt %s is not about now (%s)", h.CreatedAt, before)
	}
	if !h.CaptureBefore.After(h.CreatedAt) {
		t.Errorf("CaptureBefore %s is not after CreatedAt %s", h.CaptureBefore, h.CreatedAt)
	}
	s.executed(t, req.Key, 1)
}

func testDeclineIsKindDeclinedWithCode(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name, method, code string
	}{
		{"CardDeclined", s.h.DeclinedMethod, providers.CodeCardDeclined},
		{"InsufficientFunds", s.h.InsufficientFundsMethod, providers.CodeInsufficientFunds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := s.authorizeReq(2000)
			req.PaymentMethod = tc.method
			_, err := s.p.Authorize(s.ctx, req)
			wantError(t, err, providers.KindDeclined, tc.code)
			// A decline is the key's final answer: the retry replays it.
			_, err = s.p.Authorize(s.ctx, req)
			wantError(t, err, providers.KindDeclined, tc.code)
			s.executed(t, req.Key, 1)
		})
	}
}

func testSameKeySameParamsReturnsSameHold(t *testing.T, s *suite) {
	req := s.authorizeReq(4200)
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

func testSameKeyOtherParamsIsRejectedMismatch(t *testing.T, s *suite) {
	req := s.authorizeReq(1000)
	h, err := s.p.Authorize(s.ctx, req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	other := req
	other.AmountMinor = 2000
	_, err = s.p.Authorize(s.ctx, other)
	wantError(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
	s.executed(t, req.Key, 1)
	wantAmounts(t, "hold after the mismatch", s.lookup(t, h.Ref), providers.StatusAuthorized, 1000, 0, 0)
}

func testOnReferenceCalledBeforeReturn(t *testing.T, s *suite) {
	t.Run("Approved", func(t *testing.T) {
		t.Parallel()
		var refs []string
		var returned atomic.Bool
		req := s.authorizeReq(1500)
		req.OnReference = func(_ context.Context, ref string) error {
			if returned.Load() {
				t.Error("OnReference called after Authorize returned")
			}
			refs = append(refs, ref)
			return nil
		}
		h, err := s.p.Authorize(s.ctx, req)
		returned.Store(true)
		if err != nil {
			t.Fatalf("Authorize: %v", err)
		}
		if len(refs) != 1 || refs[0] != h.Ref {
			t.Errorf("OnReference got %q, want exactly [%q]", refs, h.Ref)
		}
	})
	t.Run("Declined", func(t *testing.T) {
		t.Parallel()
		var refs []string
		req := s.authorizeReq(1500)
		req.PaymentMethod = s.h.DeclinedMethod
		req.OnReference = func(_ context.Context, ref string) error {
			refs = append(refs, ref)
			return nil
		}
		_, err := s.p.Authorize(s.ctx, req)
		wantError(t, err, providers.KindDeclined, providers.CodeCardDeclined)
		if len(refs) != 1 || refs[0] == "" {
			t.Fatalf("OnReference got %q, want exactly one reference", refs)
		}
		if h := s.lookup(t, refs[0]); h.Status != providers.StatusDeclined {
			t.Errorf("declined hold %s reads as %s", refs[0], h.Status)
		}
	})
	t.Run("ErrorAbortsAndRetrySettles", func(t *testing.T) {
		t.Parallel()
		saveFailed := errors.New("saving the reference failed")
		var refs []string
		req := s.authorizeReq(1500)
		req.OnReference = func(_ context.Context, ref string) error {
			refs = append(refs, ref)
			return saveFailed
		}
		_, err := s.p.Authorize(s.ctx, req)
		if !errors.Is(err, saveFailed) {
			t.Fatalf("Authorize returned %v, want an error wrapping OnReference's", err)
		}
		if k := providers.KindOf(err); k != providers.KindUnknown && k != providers.KindNotExecuted {
			t.Fatalf("Authorize returned kind %s, want unknown or not_executed", k)
		}
		req.OnReference = nil
		h, err := s.p.Authorize(s.ctx, req)
		if err != nil {
			t.Fatalf("retried Authorize: %v", err)
		}
		if len(refs) != 1 || refs[0] != h.Ref {
			t.Errorf("retry settled on %s, but OnReference was given %q", h.Ref, refs)
		}
		s.executed(t, req.Key, 1)
	})
}

func testForwardedKeysNeverCollideAcrossTenants(t *testing.T, s *suite) {
	clientKey := "order-" + randHex()
	tenantA, tenantB := s.tenant, s.tenant+1
	keyA := providers.ForwardedKey(tenantA, string(OpAuthorize), clientKey)
	keyB := providers.ForwardedKey(tenantB, string(OpAuthorize), clientKey)
	if keyA == keyB {
		t.Fatalf("tenants %d and %d forward the same key %s", tenantA, tenantB, keyA)
	}
	if keyA == providers.ForwardedKey(tenantA, string(OpCapture), clientKey) {
		t.Fatal("two operations of one tenant forward the same key")
	}

	reqA := s.authorizeReq(1000)
	reqA.Key, reqA.TenantID = keyA, tenantA
	reqB := s.authorizeReq(2000)
	reqB.Key, reqB.TenantID = keyB, tenantB
	holdA, err := s.p.Authorize(s.ctx, reqA)
	if err != nil {
		t.Fatalf("tenant A Authorize: %v", err)
	}
	// Other parameters under the same client key: were the keys to
	// collide, this would be an idempotency mismatch or A's hold.
	holdB, err := s.p.Authorize(s.ctx, reqB)
	if err != nil {
		t.Fatalf("tenant B Authorize: %v", err)
	}
	if holdA.Ref == holdB.Ref {
		t.Fatalf("both tenants got hold %s", holdA.Ref)
	}
	wantAmounts(t, "tenant A's hold", holdA, providers.StatusAuthorized, 1000, 0, 0)
	wantAmounts(t, "tenant B's hold", holdB, providers.StatusAuthorized, 2000, 0, 0)
	for _, tc := range []struct {
		req  providers.AuthorizeRequest
		want providers.Hold
	}{{reqA, holdA}, {reqB, holdB}} {
		again, err := s.p.Authorize(s.ctx, tc.req)
		if err != nil {
			t.Fatalf("retried Authorize for tenant %d: %v", tc.req.TenantID, err)
		}
		sameHold(t, tc.want, again)
		s.executed(t, tc.req.Key, 1)
	}
}
