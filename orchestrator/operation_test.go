package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// Service.Capture, as httpapi calls it, against the fake provider.
func TestCapture(t *testing.T) {
	t.Parallel()
	shared := newMoneyWorld(t, 0)

	t.Run("FullCaptureTakesTheWholeHold", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		a := e.capture(t, p.ID, "c1", `{}`)
		got := a.out.Payment
		if a.err != nil || a.out.Pending || got.Status != orchestrator.StatusCaptured || got.CapturedMinor != 1000 ||
			got.AmountMinor != 1000 || got.RefundedMinor != 0 || a.stored == nil {
			t.Fatalf("capture: %+v %v", a.out, a.err)
		}
		sameJSON(t, "stored payment", e.payment(t, p.ID), got)
		if h := e.lookup(t, p); h.Status != providers.StatusCaptured || h.CapturedMinor != 1000 {
			t.Fatalf("hold at the provider: %+v", h)
		}
		if ops := e.fakeOps(t, orchestrator.OpCapture, "c1"); len(ops) != 1 || ops[0].AmountMinor != 1000 || ops[0].Outcome != fake.OutcomeSucceeded {
			t.Fatalf("provider operations: %+v", ops)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized",
			"provider_call capture ok", "state_changed authorized>captured")
		again := e.capture(t, p.ID, "c1", `{}`)
		if again.replay == nil || string(again.replay.Body) != string(a.stored.Body) {
			t.Fatalf("retry: %+v", again)
		}
	})

	t.Run("PartialCaptureReleasesTheRest", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		a := e.capture(t, p.ID, "c1", `{"amount_minor":400}`)
		if got := a.out.Payment; a.err != nil || got.Status != orchestrator.StatusCaptured || got.CapturedMinor != 400 || got.AmountMinor != 1000 {
			t.Fatalf("partial capture: %+v %v", a.out, a.err)
		}
		if h := e.lookup(t, p); h.Status != providers.StatusCaptured || h.CapturedMinor != 400 {
			t.Fatalf("hold at the provider: %+v", h)
		}
		// The rest is gone: no second capture, and refunds stop at 400.
		wantRefusal(t, e.capture(t, p.ID, "c2", `{"amount_minor":600}`).err, orchestrator.CodePaymentStateConflict, "")
		r := e.refund(t, p.ID, "r1", `{}`)
		if r.err != nil || r.out.Refund == nil || r.out.Refund.AmountMinor != 400 || r.out.Payment.Status != orchestrator.StatusRefunded ||
			r.out.Payment.RefundedMinor != 400 {
			t.Fatalf("refund of the rest: %+v %v", r.out, r.err)
		}
		if ops := e.fakeOps(t, orchestrator.OpCapture, "c2"); len(ops) != 0 {
			t.Fatalf("second capture reached the provider: %+v", ops)
		}
	})

	t.Run("OverCaptureIsAmountExceedsAuthorized", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		a := e.capture(t, p.ID, "c1", `{"amount_minor":1001}`)
		wantRefusal(t, a.err, orchestrator.CodeAmountExceedsAuthorized, "amount_minor")
		if a.stored == nil || a.out.Payment.Status != orchestrator.StatusAuthorized {
			t.Fatalf("a business refusal is a final answer on the authorized payment: %+v stored %+v", a.out, a.stored)
		}
		sameJSON(t, "payment after the refusal", e.payment(t, p.ID), p)
		if ops := e.fakeOps(t, orchestrator.OpCapture, "c1"); len(ops) != 0 {
			t.Fatalf("the refused capture reached the provider: %+v", ops)
		}
		// The refusal took nothing: the whole amount can still be captured.
		if b := e.capture(t, p.ID, "c2", `{"amount_minor":1000}`); b.err != nil || b.out.Payment.CapturedMinor != 1000 {
			t.Fatalf("capture after the refusal: %+v %v", b.out, b.err)
		}
	})

	t.Run("CaptureOfACanceledPaymentIsAStateConflict", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		if c := e.cancel(t, p.ID, "x1"); c.err != nil {
			t.Fatal(c.err)
		}
		a := e.capture(t, p.ID, "c1", `{}`)
		wantRefusal(t, a.err, orchestrator.CodePaymentStateConflict, "")
		if a.out.Payment.Status != orchestrator.StatusCanceled || a.stored == nil {
			t.Fatalf("refusal: %+v stored %+v", a.out, a.stored)
		}
		if ops := e.fakeOps(t, orchestrator.OpCapture, "c1"); len(ops) != 0 {
			t.Fatalf("the refused capture reached the provider: %+v", ops)
		}
		if h := e.lookup(t, p); h.Status != providers.StatusCanceled || h.CapturedMinor != 0 {
			t.Fatalf("hold at the provider: %+v", h)
		}
	})

	t.Run("ConcurrentCapturesAndCancelsUnderOtherKeysMoveTheHoldOnce", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		const n = 8 // even: captures, odd: cancels
		answers := make([]answer, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if i%2 == 0 {
					answers[i] = e.capture(t, p.ID, fmt.Sprint("k", i), `{}`)
				} else {
					answers[i] = e.cancel(t, p.ID, fmt.Sprint("k", i))
				}
			}()
		}
		close(start)
		wg.Wait()
		var winner *answer
		for i := range answers {
			a := &answers[i]
			switch {
			case a.err == nil && winner == nil:
				winner = a
			case a.err == nil:
				t.Fatalf("two requests moved the hold: %+v and %+v", winner.out.Payment, a.out.Payment)
			default:
				wantRefusal(t, a.err, orchestrator.CodePaymentStateConflict, "")
			}
		}
		if winner == nil {
			t.Fatal("no request moved the hold")
		}
		got := e.payment(t, p.ID)
		if got.Status != winner.out.Payment.Status || (got.Status != orchestrator.StatusCaptured && got.Status != orchestrator.StatusCanceled) {
			t.Fatalf("payment %+v, winner %+v", got, winner.out.Payment)
		}
		moved := 0
		for i := range n {
			op := orchestrator.OpCapture
			if i%2 == 1 {
				op = orchestrator.OpCancel
			}
			moved += len(e.fakeOps(t, op, fmt.Sprint("k", i)))
		}
		if moved != 1 {
			t.Fatalf("%d operations reached the provider, want 1", moved)
		}
		if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1`, p.ID); n != 1 {
			t.Fatalf("%d operations recorded, want 1", n)
		}
	})

	t.Run("BadAmountAndUnknownPaymentAreRefusedBeforeAnything", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		ctx := context.Background()
		_, err := e.svc.Capture(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: p.ID, Key: "c1", AmountMinor: -1})
		wantRefusal(t, err, orchestrator.CodeValidationFailed, "amount_minor")
		_, err = e.svc.Capture(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: orchestrator.PaymentID(e.tenant, "nope"), Key: "c2"})
		wantRefusal(t, err, orchestrator.CodeNotFound, "")
		// Another tenant's payment is not found either.
		_, err = e.svc.Capture(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant + 1, PaymentID: p.ID, Key: "c3"})
		wantRefusal(t, err, orchestrator.CodeNotFound, "")
		if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE tenant_id = $1`, e.tenant); n != 0 {
			t.Fatalf("%d operations recorded", n)
		}
		sameJSON(t, "payment", e.payment(t, p.ID), p)
	})
}

// A capture at or after the hold's capture_before is refused, and the
// payment becomes expired: the refusal is the answer, and the expiry it
// found is kept (the transaction that refuses commits it).
func TestCaptureOfALapsedHoldExpiresThePayment(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	p := e.authorized(t, "p1", 1000)
	e.clk.Set(*p.CaptureBefore)
	a := e.capture(t, p.ID, "c1", `{}`)
	wantRefusal(t, a.err, orchestrator.CodePaymentStateConflict, "")
	if a.stored == nil || a.stored.Status != 409 {
		t.Fatalf("the refusal is the final answer: stored %+v", a.stored)
	}
	if got := e.payment(t, p.ID); got.Status != orchestrator.StatusExpired || got.CapturedMinor != 0 {
		t.Fatalf("payment after the refused capture: %+v", got)
	}
	if ops := e.fakeOps(t, orchestrator.OpCapture, "c1"); len(ops) != 0 {
		t.Fatalf("refused capture reached the provider: %+v", ops)
	}
	e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized",
		"state_changed authorized>expired")
}

// Service.Cancel, as httpapi calls it, against the fake provider.
func TestCancel(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	p := e.authorized(t, "p1", 1000)
	a := e.cancel(t, p.ID, "x1")
	if a.err != nil || a.out.Payment.Status != orchestrator.StatusCanceled || a.out.Payment.CapturedMinor != 0 || a.stored == nil {
		t.Fatalf("cancel: %+v %v", a.out, a.err)
	}
	sameJSON(t, "stored payment", e.payment(t, p.ID), a.out.Payment)
	if h := e.lookup(t, p); h.Status != providers.StatusCanceled {
		t.Fatalf("hold at the provider: %+v", h)
	}
	if ops := e.fakeOps(t, orchestrator.OpCancel, "x1"); len(ops) != 1 || ops[0].Outcome != fake.OutcomeSucceeded || ops[0].AmountMinor != 1000 {
		t.Fatalf("provider operations: %+v", ops)
	}
	e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized",
		"provider_call cancel ok", "state_changed authorized>canceled")
	if again := e.cancel(t, p.ID, "x1"); again.replay == nil || string(again.replay.Body) != string(a.stored.Body) {
		t.Fatalf("retry: %+v", again)
	}
	// Another key is another request: the payment is canceled already.
	wantRefusal(t, e.cancel(t, p.ID, "x2").err, orchestrator.CodePaymentStateConflict, "")
	if ops := e.fakeOps(t, orchestrator.OpCancel, "x2"); len(ops) != 0 {
		t.Fatalf("second cancel reached the provider: %+v", ops)
	}
}

// Service.Refund, as httpapi calls it, against the fake provider.
func TestRefund(t *testing.T) {
	t.Parallel()
	shared := newMoneyWorld(t, 0)

	t.Run("PartialThenFull", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		a := e.refund(t, p.ID, "r1", `{"amount_minor":300}`)
		if a.err != nil || a.out.Payment.Status != orchestrator.StatusPartiallyRefunded || a.out.Payment.RefundedMinor != 300 ||
			a.out.Payment.CapturedMinor != 1000 {
			t.Fatalf("partial refund: %+v %v", a.out, a.err)
		}
		r := a.out.Refund
		if r == nil || r.PaymentID != p.ID || r.AmountMinor != 300 || r.Currency != "EUR" || r.Status != "succeeded" || r.ProviderRef == nil {
			t.Fatalf("refund: %+v", r)
		}
		b := e.refund(t, p.ID, "r2", `{}`) // the rest
		if b.err != nil || b.out.Payment.Status != orchestrator.StatusRefunded || b.out.Payment.RefundedMinor != 1000 ||
			b.out.Refund == nil || b.out.Refund.AmountMinor != 700 || b.out.Refund.ID == r.ID {
			t.Fatalf("refund of the rest: %+v %v", b.out, b.err)
		}
		sameJSON(t, "stored payment", e.payment(t, p.ID), b.out.Payment)
		wantRefusal(t, e.refund(t, p.ID, "r3", `{"amount_minor":1}`).err, orchestrator.CodePaymentStateConflict, "")
		if h := e.lookup(t, p); h.Status != providers.StatusRefunded || h.RefundedMinor != 1000 {
			t.Fatalf("hold at the provider: %+v", h)
		}
		for _, want := range []*orchestrator.Operation{r, b.out.Refund} {
			key := map[int64]string{300: "r1", 700: "r2"}[want.AmountMinor]
			if ops := e.fakeOps(t, orchestrator.OpRefund, key); len(ops) != 1 || ops[0].AmountMinor != want.AmountMinor ||
				ops[0].RefundRef != *want.ProviderRef {
				t.Fatalf("provider operations of %s: %+v, want refund %+v", key, ops, want)
			}
		}
		if ops := e.fakeOps(t, orchestrator.OpRefund, "r3"); len(ops) != 0 {
			t.Fatalf("refused refund reached the provider: %+v", ops)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized",
			"provider_call capture ok", "state_changed authorized>captured",
			"provider_call refund ok", "state_changed captured>partially_refunded",
			"provider_call refund ok", "state_changed partially_refunded>refunded")
	})

	t.Run("RefundOfAnUncapturedPaymentIsAStateConflict", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "p1", 1000)
		a := e.refund(t, p.ID, "r1", `{}`)
		wantRefusal(t, a.err, orchestrator.CodePaymentStateConflict, "")
		if a.stored == nil || a.out.Payment.Status != orchestrator.StatusAuthorized {
			t.Fatalf("refusal: %+v stored %+v", a.out, a.stored)
		}
		if ops := e.fakeOps(t, orchestrator.OpRefund, "r1"); len(ops) != 0 {
			t.Fatalf("refused refund reached the provider: %+v", ops)
		}
	})

	t.Run("MoreThanIsLeftIsAmountExceedsAuthorized", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		if a := e.refund(t, p.ID, "r1", `{"amount_minor":600}`); a.err != nil {
			t.Fatal(a.err)
		}
		wantRefusal(t, e.refund(t, p.ID, "r2", `{"amount_minor":401}`).err, orchestrator.CodeAmountExceedsAuthorized, "amount_minor")
		if got := e.payment(t, p.ID); got.RefundedMinor != 600 || got.Status != orchestrator.StatusPartiallyRefunded {
			t.Fatalf("payment: %+v", got)
		}
	})

	// A refund's next state is decided in Go from the payment as it was
	// read; when another refund settled meanwhile, it is decided again
	// from the payment as it is, and the provider call is recorded once.
	t.Run("ARefundSettlingAfterAnotherDecidesFromThePaymentAsItIsNow", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		open := e.gateOp(orchestrator.OpRefund, "r1")
		done := make(chan answer)
		go func() { done <- e.refund(t, p.ID, "r1", `{"amount_minor":400}`) }()
		// r1 is recorded (the payment read) and waits at the provider.
		testkit.WaitFor(t, 10*time.Second, "refund r1 recorded", testkit.Until(func() bool {
			return e.count(t, `SELECT count(*) FROM payment_operations WHERE tenant_id = $1 AND idempotency_key = 'r1'`, e.tenant) > 0
		}))
		if b := e.refund(t, p.ID, "r2", `{"amount_minor":600}`); b.err != nil || b.out.Payment.Status != orchestrator.StatusPartiallyRefunded {
			t.Fatalf("refund r2: %+v %v", b.out, b.err)
		}
		open()
		a := <-done
		if a.err != nil || a.out.Payment.Status != orchestrator.StatusRefunded || a.out.Payment.RefundedMinor != 1000 ||
			a.out.Refund == nil || a.out.Refund.Status != "succeeded" {
			t.Fatalf("refund r1: %+v %v", a.out, a.err)
		}
		sameJSON(t, "stored payment", e.payment(t, p.ID), a.out.Payment)
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize ok", "state_changed pending>authorized",
			"provider_call capture ok", "state_changed authorized>captured",
			"provider_call refund ok", "state_changed captured>partially_refunded",
			"provider_call refund ok", "state_changed partially_refunded>refunded")
	})

	t.Run("ConcurrentRefundsNeverExceedTheCapturedAmount", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "p1", 1000)
		// Eight refunds of 300 under eight keys: exactly three fit.
		const n = 8
		answers := make([]answer, n)
		keys := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers[i] = e.refund(t, p.ID, keys[i], `{"amount_minor":300}`)
			}()
		}
		close(start)
		wg.Wait()
		var refunded int64
		succeeded := 0
		for i, a := range answers {
			switch {
			case a.err == nil:
				if a.out.Refund == nil || a.out.Refund.AmountMinor != 300 || a.out.Refund.Status != "succeeded" {
					t.Fatalf("refund %s: %+v", keys[i], a.out)
				}
				succeeded++
				refunded += a.out.Refund.AmountMinor
			case a.code() == orchestrator.CodeAmountExceedsAuthorized:
				if ops := e.fakeOps(t, orchestrator.OpRefund, keys[i]); len(ops) != 0 {
					t.Fatalf("refused refund %s reached the provider: %+v", keys[i], ops)
				}
			default:
				t.Fatalf("refund %s: %v", keys[i], a.err)
			}
		}
		if succeeded != 3 || refunded != 900 {
			t.Fatalf("%d refunds succeeded for %d, want 3 for 900", succeeded, refunded)
		}
		got := e.payment(t, p.ID)
		if got.RefundedMinor != 900 || got.CapturedMinor != 1000 || got.Status != orchestrator.StatusPartiallyRefunded {
			t.Fatalf("payment: %+v", got)
		}
		if h := e.lookup(t, p); h.RefundedMinor != 900 {
			t.Fatalf("hold at the provider: %+v", h)
		}
		var atProvider int64
		for _, key := range keys {
			for _, op := range e.fakeOps(t, orchestrator.OpRefund, key) {
				if op.Outcome == fake.OutcomeSucceeded {
					atProvider += op.AmountMinor
				}
			}
		}
		if atProvider != 900 {
			t.Fatalf("the provider refunded %d, want 900", atProvider)
		}
	})
}
