package orchestrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// Service.ResolvePending settles money movements whose outcome was lost,
// by asking the provider again with the same forwarded key: what happened
// is recorded once, and nothing happens twice.
func TestResolvePending(t *testing.T) {
	t.Parallel()

	type moved struct {
		status          orchestrator.Status
		captured, refun int64
	}
	for _, tc := range []struct {
		name   string
		op     string
		target fake.Op
		verb   string
		// setup returns the payment the operation applies to.
		setup func(*testing.T, *moneyEnv) orchestrator.Payment
		send  func(*testing.T, *moneyEnv, string) answer
		want  moved
	}{
		{"LostCaptureIsCapturedOnce", orchestrator.OpCapture, fake.OpCapture, "capture",
			func(t *testing.T, e *moneyEnv) orchestrator.Payment { return e.authorized(t, "p1", 1000) },
			func(t *testing.T, e *moneyEnv, id string) answer {
				return e.capture(t, id, "op1", `{"amount_minor":800}`)
			},
			moved{orchestrator.StatusCaptured, 800, 0}},
		{"LostCancelIsCanceledOnce", orchestrator.OpCancel, fake.OpCancel, "cancel",
			func(t *testing.T, e *moneyEnv) orchestrator.Payment { return e.authorized(t, "p1", 1000) },
			func(t *testing.T, e *moneyEnv, id string) answer { return e.cancel(t, id, "op1") },
			moved{orchestrator.StatusCanceled, 0, 0}},
		{"LostRefundIsRefundedOnce", orchestrator.OpRefund, fake.OpRefund, "refund",
			func(t *testing.T, e *moneyEnv) orchestrator.Payment { return e.captured(t, "p1", 1000) },
			func(t *testing.T, e *moneyEnv, id string) answer {
				return e.refund(t, id, "op1", `{"amount_minor":250}`)
			},
			moved{orchestrator.StatusPartiallyRefunded, 1000, 250}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newMoneyEnv(t, time.Second)
			ctx := context.Background()
			p := tc.setup(t, e)
			before := e.history(t, p.ID)
			// The provider executes the operation and the answer is lost.
			e.arm(t, tc.op, "op1", fake.Fault{Operation: tc.target, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
			a := tc.send(t, e, p.ID)
			if a.err != nil || !a.out.Pending || a.stored != nil || a.out.Payment.Status != p.Status {
				t.Fatalf("lost answer: %+v %v stored %+v", a.out, a.err, a.stored)
			}
			sameJSON(t, "payment while the outcome is unknown", e.payment(t, p.ID), p)
			if ops := e.fakeOps(t, tc.op, "op1"); len(ops) != 1 || ops[0].Outcome != fake.OutcomeSucceeded {
				t.Fatalf("provider operations: %+v", ops)
			}

			if st, err := e.svc.ResolvePending(ctx, time.Minute, 10); err != nil || st != (orchestrator.ResolveStats{}) {
				t.Fatalf("early resolve: %+v %v", st, err)
			}
			e.clk.Add(2 * time.Minute)
			st, err := e.svc.ResolvePending(ctx, time.Minute, 10)
			if err != nil || st != (orchestrator.ResolveStats{Examined: 1, Settled: 1}) {
				t.Fatalf("resolve: %+v %v", st, err)
			}
			got := e.payment(t, p.ID)
			if got.Status != tc.want.status || got.CapturedMinor != tc.want.captured || got.RefundedMinor != tc.want.refun {
				t.Fatalf("settled payment: %+v, want %+v", got, tc.want)
			}
			// The resolver's retry was replayed by the provider, not run
			// again.
			if ops := e.fakeOps(t, tc.op, "op1"); len(ops) != 1 {
				t.Fatalf("provider operations after the resolver: %+v", ops)
			}
			e.wantHistory(t, p.ID, append(before, "provider_call "+tc.verb+" unknown", "provider_call "+tc.verb+" ok",
				"state_changed "+string(p.Status)+">"+string(tc.want.status))...)
			if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE status = 'pending'`); n != 0 {
				t.Fatalf("%d operations still pending", n)
			}

			// The client's retry gets the settled answer; nothing moves.
			retry := tc.send(t, e, p.ID)
			if retry.err != nil || retry.out.Pending || retry.stored == nil {
				t.Fatalf("retry: %+v %v", retry.out, retry.err)
			}
			sameJSON(t, "retry's payment", retry.out.Payment, got)
			if ops := e.fakeOps(t, tc.op, "op1"); len(ops) != 1 {
				t.Fatalf("provider operations after the retry: %+v", ops)
			}
		})
	}

	t.Run("UnansweredPaymentStaysPendingAndIsRetriedAfterBackoff", func(t *testing.T) {
		t.Parallel()
		e := newMoneyEnv(t, 0)
		ctx := context.Background()
		const key = "s1"
		// A 500 before the confirmation: the Service cannot know whether it
		// ran, so the payment stays pending (with its reference).
		e.arm(t, orchestrator.OpAuthorize, key, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute, Status: 500, Count: 1})
		a := e.authorize(t, key, `{"amount_minor":1200,"currency":"EUR"}`)
		p := a.out.Payment
		if a.err != nil || !a.out.Pending || p.ProviderRef == nil {
			t.Fatalf("unknown outcome: %+v %v", a.out, a.err)
		}
		// The provider cannot be asked: the payment is never failed for
		// want of an answer.
		if err := e.fake.InjectFault(ctx, fake.Fault{Operation: fake.OpLookup, Kind: fake.FaultErrorBeforeExecute}); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(2 * time.Minute)
		st, err := e.svc.ResolvePending(ctx, time.Minute, 10)
		if err != nil || st != (orchestrator.ResolveStats{Examined: 1, Pending: 1}) {
			t.Fatalf("resolve without the provider: %+v %v", st, err)
		}
		if got := e.payment(t, p.ID); got.Status != orchestrator.StatusPending {
			t.Fatalf("payment: %+v", got)
		}
		// It backs off: not picked again at once.
		if st, err := e.svc.ResolvePending(ctx, time.Minute, 10); err != nil || st.Examined != 0 {
			t.Fatalf("resolve during the backoff: %+v %v", st, err)
		}
		if err := e.fake.ClearFaults(ctx); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(2 * time.Minute)
		st, err = e.svc.ResolvePending(ctx, time.Minute, 10)
		if err != nil || st != (orchestrator.ResolveStats{Examined: 1, Settled: 1}) {
			t.Fatalf("resolve after the backoff: %+v %v", st, err)
		}
		got := e.payment(t, p.ID)
		if got.Status != orchestrator.StatusAuthorized {
			t.Fatalf("payment: %+v", got)
		}
		e.wantOneHold(t, got, providers.StatusAuthorized)
		if ops := e.fakeOps(t, orchestrator.OpAuthorize, key); len(ops) != 1 || ops[0].Outcome != fake.OutcomeSucceeded {
			t.Fatalf("provider operations: %+v", ops)
		}
		e.wantHistory(t, p.ID, "state_changed >pending", "provider_call authorize unknown", "provider_call lookup not_executed",
			"provider_call lookup ok", "provider_call authorize ok", "state_changed pending>authorized")
	})
}
