package orchestrator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// flexBody is an authorization of amount EUR asking for the flexible-hold
// features named (incremental, multicapture, overcapture).
func flexBody(amount int64, features ...string) string {
	b := fmt.Sprintf(`{"amount_minor":%d,"currency":"EUR"`, amount)
	for _, f := range features {
		switch f {
		case "incremental":
			b += `,"request_incremental_authorization":true`
		case "multicapture":
			b += `,"request_multicapture":true`
		case "overcapture":
			b += `,"request_overcapture":true`
		}
	}
	return b + "}"
}

// flexAuthorized authorizes with features and fails the test unless the
// payment is authorized with each of them granted.
func (e *moneyEnv) flexAuthorized(t *testing.T, key string, amount int64, features ...string) orchestrator.Payment {
	t.Helper()
	a := e.authorize(t, key, flexBody(amount, features...))
	p := a.out.Payment
	if a.err != nil || p.Status != orchestrator.StatusAuthorized {
		t.Fatalf("authorize %s: %+v %v", key, p, a.err)
	}
	for _, f := range features {
		g := map[string]*orchestrator.Grant{"incremental": p.IncrementalAuthorization, "multicapture": p.Multicapture,
			"overcapture": p.Overcapture}[f]
		if g == nil || *g != orchestrator.GrantAvailable {
			t.Fatalf("%s not granted: %+v", f, p)
		}
	}
	return p
}

func (e *moneyEnv) increment(t *testing.T, id, key string, total int64) answer {
	return e.operation(t, orchestrator.OpIncrement, (*orchestrator.Service).Increment, id, key,
		fmt.Sprintf(`{"amount_minor":%d}`, total))
}

// fakeHold is payment p's hold as the fake reports it.
func (e *moneyEnv) fakeHold(t *testing.T, p orchestrator.Payment) providers.Hold {
	t.Helper()
	return e.lookup(t, p)
}

func TestFlexibleHolds(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t, 0)

	t.Run("WhatWasAskedIsWhatIsAnswered", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "g1", 1000, "incremental", "multicapture", "overcapture")
		if p.MaxCapturableMinor == nil || *p.MaxCapturableMinor <= p.AmountMinor {
			t.Fatalf("overcapture maximum %v", p.MaxCapturableMinor)
		}
		plain := e.authorized(t, "g2", 1000)
		if plain.IncrementalAuthorization != nil || plain.Multicapture != nil || plain.Overcapture != nil ||
			plain.MaxCapturableMinor != nil {
			t.Fatalf("a payment that asked nothing: %+v", plain)
		}
	})

	t.Run("AnIncrementIsOnceAndRefusedBeforeTheProvider", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "i1", 1000, "incremental")
		a := e.increment(t, p.ID, "i1-up", 1500)
		if a.err != nil || a.out.Payment.AmountMinor != 1500 || a.out.Payment.Status != orchestrator.StatusAuthorized {
			t.Fatalf("increment: %+v %v", a.out.Payment, a.err)
		}
		if again := e.increment(t, p.ID, "i1-up", 1500); again.replay == nil || string(again.replay.Body) != string(a.stored.Body) {
			t.Fatalf("replay: %+v", again)
		}
		if h := e.fakeHold(t, p); h.AmountMinor != 1500 {
			t.Fatalf("the provider holds %d", h.AmountMinor)
		}
		if n := len(e.fakeOps(t, orchestrator.OpIncrement, "i1-up")); n != 1 {
			t.Fatalf("%d increments at the provider", n)
		}
		if n := e.eventsOf(t, p.ID, orchestrator.EventAmountIncreased); n != 1 {
			t.Fatalf("%d %s events", n, orchestrator.EventAmountIncreased)
		}
		// Refused before any provider call.
		wantRefusal(t, e.increment(t, p.ID, "i1-lower", 1500).err, orchestrator.CodeValidationFailed, "amount_minor")
		plain := e.authorized(t, "i2", 1000)
		wantRefusal(t, e.increment(t, plain.ID, "i2-up", 2000).err, orchestrator.CodeNotSupported, "")
		cap := e.flexAuthorized(t, "i3", 1000, "incremental")
		if c := e.capture(t, cap.ID, "i3-cap", `{}`); c.err != nil {
			t.Fatal(c.err)
		}
		wantRefusal(t, e.increment(t, cap.ID, "i3-up", 2000).err, orchestrator.CodePaymentStateConflict, "")
		for _, key := range []string{"i1-lower", "i2-up", "i3-up"} {
			if ops := e.fakeOps(t, orchestrator.OpIncrement, key); len(ops) != 0 {
				t.Fatalf("%s reached the provider: %+v", key, ops)
			}
		}
		if lim := e.payment(t, p.ID).MaxAmountMinor; lim != nil {
			wantRefusal(t, e.increment(t, p.ID, "i1-over", *lim+1).err, orchestrator.CodeAmountExceedsLimit, "amount_minor")
		} else {
			t.Fatal("the fake states the most a hold may be raised to; the payment lost it")
		}
	})

	t.Run("ConcurrentIncrementsApplyOneAfterTheOther", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "c1", 1000, "incremental")
		totals := make([]int64, 20)
		for i := range totals {
			totals[i] = 1020 + int64(i)*20
		}
		rand.Shuffle(len(totals), func(i, j int) { totals[i], totals[j] = totals[j], totals[i] })
		var wg sync.WaitGroup
		answers := make([]answer, len(totals))
		for i, total := range totals {
			wg.Go(func() { answers[i] = e.increment(t, p.ID, fmt.Sprintf("c1-%d", total), total) })
		}
		wg.Wait()
		var highest int64
		applied := 0
		for i, a := range answers {
			key := fmt.Sprintf("c1-%d", totals[i])
			ops := e.fakeOps(t, orchestrator.OpIncrement, key)
			switch {
			case a.err == nil:
				highest, applied = max(highest, totals[i]), applied+1
				if len(ops) != 1 {
					t.Fatalf("%s applied, %d increments at the provider", key, len(ops))
				}
			case orchestrator.ErrorCode(a.err) == orchestrator.CodeValidationFailed:
				// Not above the hold a later-admitted, higher one left.
				if len(ops) != 0 {
					t.Fatalf("%s refused but sent: %+v", key, ops)
				}
			default:
				t.Fatalf("%s: %v", key, a.err)
			}
		}
		got := e.payment(t, p.ID)
		if got.AmountMinor != highest || e.fakeHold(t, p).AmountMinor != highest {
			t.Fatalf("amount %d, the provider's %d, want the highest applied %d", got.AmountMinor,
				e.fakeHold(t, p).AmountMinor, highest)
		}
		t.Logf("%d of 20 increments applied, the others refused as not above the total before them", applied)
		// The same key twenty times: one increment.
		var same sync.WaitGroup
		for range 20 {
			same.Go(func() { e.increment(t, p.ID, "c1-same", highest+100) })
		}
		same.Wait()
		if n := len(e.fakeOps(t, orchestrator.OpIncrement, "c1-same")); n != 1 {
			t.Fatalf("one key twenty times: %d increments at the provider", n)
		}
	})

	t.Run("ConcurrentIncreasesAllApply", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "d1", 1000, "incremental")
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if a := e.operation(t, orchestrator.OpIncrement, (*orchestrator.Service).Increment, p.ID,
					fmt.Sprintf("d1-%d", i), `{"increase_minor":25}`); a.err != nil {
					t.Errorf("increase %d: %v", i, a.err)
				}
			})
		}
		wg.Wait()
		for i := range 20 {
			if n := len(e.fakeOps(t, orchestrator.OpIncrement, fmt.Sprintf("d1-%d", i))); n != 1 {
				t.Fatalf("increase %d: %d increments at the provider", i, n)
			}
		}
		if got, h := e.payment(t, p.ID), e.fakeHold(t, p); got.AmountMinor != 1500 || h.AmountMinor != 1500 {
			t.Fatalf("amount %d, the provider's %d, want 1500", got.AmountMinor, h.AmountMinor)
		}
		if n := e.eventsOf(t, p.ID, orchestrator.EventAmountIncreased); n != 20 {
			t.Fatalf("%d %s events, want 20", n, orchestrator.EventAmountIncreased)
		}
	})

	t.Run("CapturedInParts", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "m1", 1000, "multicapture")
		for i, part := range []int64{300, 300} {
			a := e.capture(t, p.ID, fmt.Sprintf("m1-part-%d", i), fmt.Sprintf(`{"amount_minor":%d,"final_capture":false}`, part))
			if a.err != nil || a.out.Payment.Status != orchestrator.StatusAuthorized || a.out.Payment.CapturedMinor != int64(i+1)*300 {
				t.Fatalf("part %d: %+v %v", i, a.out.Payment, a.err)
			}
		}
		wantRefusal(t, e.capture(t, p.ID, "m1-too-much", `{"amount_minor":500,"final_capture":false}`).err,
			orchestrator.CodeAmountExceedsAuthorized, "amount_minor")
		wantRefusal(t, e.cancel(t, p.ID, "m1-cancel").err, orchestrator.CodePaymentStateConflict, "")
		last := e.capture(t, p.ID, "m1-last", `{}`)
		if last.err != nil || last.out.Payment.Status != orchestrator.StatusCaptured || last.out.Payment.CapturedMinor != 1000 {
			t.Fatalf("final capture: %+v %v", last.out.Payment, last.err)
		}
		if h := e.fakeHold(t, p); h.Status != providers.StatusCaptured || h.CapturedMinor != 1000 {
			t.Fatalf("the provider's hold: %+v", h)
		}
		if n := e.eventsOf(t, p.ID, "capture.succeeded"); n != 3 {
			t.Fatalf("%d capture.succeeded events, want one per part", n)
		}
		if r := e.refund(t, p.ID, "m1-refund", `{}`); r.err != nil || r.out.Payment.RefundedMinor != 1000 {
			t.Fatalf("refund: %+v %v", r.out.Payment, r.err)
		}
		// Without multicapture a capture is final.
		plain := e.authorized(t, "m2", 1000)
		wantRefusal(t, e.capture(t, plain.ID, "m2-part", `{"amount_minor":300,"final_capture":false}`).err,
			orchestrator.CodeNotSupported, "final_capture")
	})

	t.Run("APartRacingACancel", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		for i := range 5 {
			p := e.flexAuthorized(t, fmt.Sprintf("r%d", i), 1000, "multicapture")
			var part, cancel answer
			var wg sync.WaitGroup
			wg.Go(func() {
				part = e.capture(t, p.ID, fmt.Sprintf("r%d-part", i), `{"amount_minor":400,"final_capture":false}`)
			})
			wg.Go(func() { cancel = e.cancel(t, p.ID, fmt.Sprintf("r%d-cancel", i)) })
			wg.Wait()
			got, h := e.payment(t, p.ID), e.fakeHold(t, p)
			switch {
			case part.err == nil && cancel.err != nil:
				if got.Status != orchestrator.StatusAuthorized || got.CapturedMinor != 400 || h.CapturedMinor != 400 ||
					h.Status != providers.StatusAuthorized {
					t.Fatalf("part won: payment %+v, provider %+v", got, h)
				}
			case cancel.err == nil && part.err != nil:
				if got.Status != orchestrator.StatusCanceled || h.Status != providers.StatusCanceled || h.CapturedMinor != 0 {
					t.Fatalf("cancel won: payment %+v, provider %+v", got, h)
				}
			default:
				t.Fatalf("part %v and cancel %v: exactly one must win", part.err, cancel.err)
			}
		}
	})

	t.Run("Overcapture", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "o1", 1000, "overcapture")
		most := *p.MaxCapturableMinor
		wantRefusal(t, e.capture(t, p.ID, "o1-over", fmt.Sprintf(`{"amount_minor":%d}`, most+1)).err,
			orchestrator.CodeAmountExceedsLimit, "amount_minor")
		if ops := e.fakeOps(t, orchestrator.OpCapture, "o1-over"); len(ops) != 0 {
			t.Fatalf("refused capture reached the provider: %+v", ops)
		}
		a := e.capture(t, p.ID, "o1-cap", fmt.Sprintf(`{"amount_minor":%d}`, most))
		if a.err != nil || a.out.Payment.CapturedMinor != most || a.out.Payment.Status != orchestrator.StatusCaptured {
			t.Fatalf("capture at the maximum: %+v %v", a.out.Payment, a.err)
		}
		plain := e.authorized(t, "o2", 1000)
		wantRefusal(t, e.capture(t, plain.ID, "o2-over", `{"amount_minor":1001}`).err,
			orchestrator.CodeAmountExceedsAuthorized, "amount_minor")
	})

	t.Run("PartsUpToTheOvercaptureMaximum", func(t *testing.T) {
		t.Parallel()
		e := w.newTenant(t)
		p := e.flexAuthorized(t, "s1", 1000, "multicapture", "overcapture")
		most := *p.MaxCapturableMinor
		first := e.capture(t, p.ID, "s1-a", fmt.Sprintf(`{"amount_minor":%d,"final_capture":false}`, most/2))
		if first.err != nil {
			t.Fatal(first.err)
		}
		wantRefusal(t, e.capture(t, p.ID, "s1-b", fmt.Sprintf(`{"amount_minor":%d}`, most-most/2+1)).err,
			orchestrator.CodeAmountExceedsLimit, "amount_minor")
		last := e.capture(t, p.ID, "s1-c", fmt.Sprintf(`{"amount_minor":%d}`, most-most/2))
		if last.err != nil || last.out.Payment.CapturedMinor != most || last.out.Payment.Status != orchestrator.StatusCaptured {
			t.Fatalf("to the maximum: %+v %v", last.out.Payment, last.err)
		}
	})
}

// TestLostIncrementIsSettledByLookup: the provider raised the hold and
// the answer was lost; the resolver sees the hold at the new total and
// settles the increment without sending it again, and the client's retry
// gets the settled answer.
func TestLostIncrementIsSettledByLookup(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, time.Second)
	ctx := context.Background()
	p := e.flexAuthorized(t, "p1", 1000, "incremental")
	e.arm(t, orchestrator.OpIncrement, "op1", fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
	a := e.increment(t, p.ID, "op1", 1500)
	if a.err != nil || !a.out.Pending || a.stored != nil || a.out.Payment.AmountMinor != 1000 {
		t.Fatalf("lost answer: %+v %v", a.out, a.err)
	}
	if h := e.fakeHold(t, p); h.AmountMinor != 1500 {
		t.Fatalf("the provider holds %d", h.AmountMinor)
	}
	e.clk.Add(2 * time.Minute)
	st, err := e.svc.ResolvePending(ctx, time.Minute, 10)
	if err != nil || st != (orchestrator.ResolveStats{Examined: 1, Settled: 1}) {
		t.Fatalf("resolve: %+v %v", st, err)
	}
	if got := e.payment(t, p.ID); got.AmountMinor != 1500 || got.Status != orchestrator.StatusAuthorized {
		t.Fatalf("settled payment: %+v", got)
	}
	if ops := e.fakeOps(t, orchestrator.OpIncrement, "op1"); len(ops) != 1 {
		t.Fatalf("increments at the provider: %+v", ops)
	}
	h := e.history(t, p.ID)
	if n := slices.Index(h, "provider_call increment unknown"); n < 0 || !slices.Contains(h[n:], "provider_call lookup ok") ||
		slices.Contains(h[n+1:], "provider_call increment ok") {
		t.Fatalf("history: %q", h)
	}
	retry := e.increment(t, p.ID, "op1", 1500)
	if retry.err != nil || retry.out.Pending || retry.stored == nil || retry.out.Payment.AmountMinor != 1500 {
		t.Fatalf("retry: %+v %v", retry.out, retry.err)
	}
	if ops := e.fakeOps(t, orchestrator.OpIncrement, "op1"); len(ops) != 1 {
		t.Fatalf("increments at the provider after the retry: %+v", ops)
	}
}

// TestDeclinedIncrementLeavesTheHold: a declined increment is 402 and
// changes nothing of the hold.
func TestDeclinedIncrementLeavesTheHold(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	p := e.flexAuthorized(t, "p1", 1000, "incremental")
	e.arm(t, orchestrator.OpIncrement, "up", fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultDecline, Count: 1})
	a := e.increment(t, p.ID, "up", 1500)
	wantRefusal(t, a.err, orchestrator.CodePaymentDeclined, "")
	if a.stored == nil || a.stored.Status != 402 {
		t.Fatalf("stored answer %+v", a.stored)
	}
	if got, h := e.payment(t, p.ID), e.fakeHold(t, p); got.AmountMinor != 1000 || h.AmountMinor != 1000 {
		t.Fatalf("amount %d, the provider's %d", got.AmountMinor, h.AmountMinor)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1 AND kind = 'increment' AND status = 'failed'`,
		p.ID); n != 1 {
		t.Fatalf("%d failed increments recorded", n)
	}
}
