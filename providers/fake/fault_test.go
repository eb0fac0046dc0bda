package fake_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

func TestErrorBeforeExecuteRunsNothing(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	for _, tc := range []struct {
		name   string
		status int
		kind   providers.Kind
		code   string
	}{
		{"Default503IsNotExecuted", 0, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"429IsNotExecuted", http.StatusTooManyRequests, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"500IsUnknown", http.StatusInternalServerError, providers.KindUnknown, providers.CodeProviderInternalError},
		{"504IsUnknown", http.StatusGatewayTimeout, providers.KindUnknown, providers.CodeProviderTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := authReq(t, 1000)
			inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute,
				Count: 1, Status: tc.status, IdempotencyKey: req.Key})
			_, err := c.Authorize(t.Context(), req)
			wantKind(t, err, tc.kind, tc.code)
			if ops := operations(t, c, req.Key); len(ops) != 0 {
				t.Fatalf("the fault executed %d operations, want none", len(ops))
			}
			h, err := c.Authorize(t.Context(), req)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if ops := operations(t, c, req.Key); len(ops) != 1 || ops[0].Ref != h.Ref {
				t.Fatalf("after the retry the log holds %+v, want one authorize of %s", ops, h.Ref)
			}
		})
	}
	t.Run("Capture", func(t *testing.T) {
		t.Parallel()
		h := authorize(t, c, 1000)
		req := providers.CaptureRequest{Key: newKey(t), Ref: h.Ref}
		inject(t, c, fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultErrorBeforeExecute, Count: 1, IdempotencyKey: req.Key})
		_, err := c.Capture(t.Context(), req)
		wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
		if got, _ := c.Lookup(t.Context(), h.Ref); got.Status != providers.StatusAuthorized {
			t.Fatalf("hold is %s after a capture that ran nothing", got.Status)
		}
		if got, err := c.Capture(t.Context(), req); err != nil || got.Status != providers.StatusCaptured {
			t.Fatalf("retried capture: %v, %s", err, got.Status)
		}
	})
}

func TestTimeoutAfterExecuteExecutesOnceAndReplays(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	req := authReq(t, 2500)
	inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1, IdempotencyKey: req.Key})

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := c.Authorize(ctx, req)
	wantKind(t, err, providers.KindUnknown, providers.CodeProviderTimeout)
	if elapsed := time.Since(begin); elapsed > 3*time.Second {
		t.Errorf("the client gave up after %s, want about 300ms", elapsed)
	}
	ops := operations(t, c, req.Key)
	if len(ops) != 1 || ops[0].Operation != fake.OpAuthorize || ops[0].Outcome != fake.OutcomeSucceeded {
		t.Fatalf("log %+v, want one successful authorize", ops)
	}
	h, err := c.Authorize(t.Context(), req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if h.Ref != ops[0].Ref {
		t.Errorf("retry returned hold %s, the lost answer was %s", h.Ref, ops[0].Ref)
	}
	if n := len(operations(t, c, req.Key)); n != 1 {
		t.Errorf("%d operations after the retry, want 1", n)
	}
}

func TestTimeoutHangAbortsTheConnection(t *testing.T) {
	t.Parallel()
	r, _ := start(t, fake.Config{TimeoutHang: 200 * time.Millisecond})
	// A fresh connection per request: Go's transport re-sends a keyed
	// request on its own when a reused connection breaks.
	c := r.Client(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
	h := authorize(t, c, 1000)
	inject(t, c, fake.Fault{Operation: fake.OpLookup, Kind: fake.FaultTimeoutAfterExecute, Count: 1})

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := c.Lookup(ctx, h.Ref)
	wantKind(t, err, providers.KindUnknown, "")
	if ctx.Err() != nil || time.Since(begin) > 10*time.Second {
		t.Fatalf("the server held the connection %s; want it aborted after TimeoutHang", time.Since(begin))
	}
	if _, err := c.Lookup(t.Context(), h.Ref); err != nil {
		t.Fatalf("Lookup after the fault: %v", err)
	}
}

func TestLatencyFaultDelaysOnce(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	h := authorize(t, c, 1000)
	inject(t, c, fake.Fault{Operation: fake.OpLookup, Kind: fake.FaultLatency, Count: 1, LatencyMS: 300})
	begin := time.Now()
	if _, err := c.Lookup(t.Context(), h.Ref); err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if elapsed := time.Since(begin); elapsed < 300*time.Millisecond {
		t.Errorf("Lookup answered after %s, want at least 300ms", elapsed)
	}
	faults, err := c.Faults(t.Context())
	if err != nil {
		t.Fatalf("Faults: %v", err)
	}
	if len(faults) != 0 {
		t.Errorf("armed faults after the one call: %+v, want none", faults)
	}
}

func TestProbabilityFaultFiresSometimes(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	h := authorize(t, c, 1000)
	inject(t, c, fake.Fault{Operation: fake.OpLookup, Kind: fake.FaultErrorBeforeExecute, Probability: 0.5})
	const calls = 200
	failed := 0
	for range calls {
		_, err := c.Lookup(t.Context(), h.Ref)
		if err != nil {
			wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
			failed++
		}
	}
	// P(outside [40, 160]) for Binomial(200, 0.5) is below 1e-17.
	if failed < 40 || failed > 160 {
		t.Errorf("%d of %d calls failed with probability 0.5", failed, calls)
	}
	if err := c.ClearFaults(t.Context()); err != nil {
		t.Fatalf("ClearFaults: %v", err)
	}
	for range 20 {
		if _, err := c.Lookup(t.Context(), h.Ref); err != nil {
			t.Fatalf("Lookup after ClearFaults: %v", err)
		}
	}
}

// TestDeclineRateDeclinesTheSamePayments: a decline_rate fault declines
// about its share of authorizations, exactly those DeclineRateFires
// names (so a run repeats), with its code; the other payments are
// authorized, and clearing it ends the declines.
func TestDeclineRateDeclinesTheSamePayments(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultDeclineRate, Probability: 0.3, Seed: 42,
		DeclineCode: "processing_error"})
	const calls = 200
	declined := 0
	for i := range calls {
		req := authReq(t, 1000)
		req.PaymentID = fmt.Sprintf("pay_decline_rate_%d", i)
		_, err := c.Authorize(t.Context(), req)
		want := fake.DeclineRateFires(42, req.PaymentID, 0.3)
		if want {
			wantKind(t, err, providers.KindDeclined, "processing_error")
			declined++
		} else if err != nil {
			t.Fatalf("payment %s: %v, want it authorized", req.PaymentID, err)
		}
	}
	// P(outside [30, 90]) for Binomial(200, 0.3) is below 1e-5; the ids
	// are fixed, so this either always holds or never.
	if declined < 30 || declined > 90 {
		t.Errorf("%d of %d declined at rate 0.3", declined, calls)
	}
	if fake.DeclineRateFires(42, "pay_x", 0.3) == fake.DeclineRateFires(43, "pay_x", 0.3) &&
		fake.DeclineRateFires(42, "pay_y", 0.3) == fake.DeclineRateFires(43, "pay_y", 0.3) &&
		fake.DeclineRateFires(42, "pay_z", 0.3) == fake.DeclineRateFires(43, "pay_z", 0.3) &&
		fake.DeclineRateFires(42, "pay_w", 0.3) == fake.DeclineRateFires(43, "pay_w", 0.3) {
		t.Error("seeds 42 and 43 decline the same four payments: the seed is not used")
	}
	if err := c.ClearFaults(t.Context()); err != nil {
		t.Fatalf("ClearFaults: %v", err)
	}
	for range 20 {
		authorize(t, c, 1000)
	}
}

func TestKeyedFaultSparesOtherKeys(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	target := authReq(t, 1000)
	inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute, IdempotencyKey: target.Key})
	for range 3 {
		authorize(t, c, 500)
	}
	for range 3 {
		_, err := c.Authorize(t.Context(), target)
		wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
	}
	faults, err := c.Faults(t.Context())
	if err != nil || len(faults) != 1 || faults[0].Count != 0 {
		t.Fatalf("armed faults %+v (%v), want the unlimited one", faults, err)
	}
}

func TestInvalidFaultIsRejected(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	for name, f := range map[string]fake.Fault{
		"UnknownOperation":   {Operation: "settle", Kind: fake.FaultLatency, LatencyMS: 1},
		"UnknownKind":        {Operation: fake.OpCapture, Kind: "explode"},
		"LatencyWithoutTime": {Operation: fake.OpCapture, Kind: fake.FaultLatency},
		"ProbabilityAbove1":  {Operation: fake.OpCapture, Kind: fake.FaultErrorBeforeExecute, Probability: 1.5},
		"NegativeCount":      {Operation: fake.OpCapture, Kind: fake.FaultErrorBeforeExecute, Count: -1},
		"StatusNotAllowed":   {Operation: fake.OpCapture, Kind: fake.FaultErrorBeforeExecute, Status: 404},
		"StatusOnTimeout":    {Operation: fake.OpCapture, Kind: fake.FaultTimeoutAfterExecute, Status: 503},
		"KeyOnLookup":        {Operation: fake.OpLookup, Kind: fake.FaultTimeoutAfterExecute, IdempotencyKey: "k"},
		"DeclineRateNoRate":  {Operation: fake.OpAuthorize, Kind: fake.FaultDeclineRate},
		"DeclineRateCapture": {Operation: fake.OpCapture, Kind: fake.FaultDeclineRate, Probability: 0.5},
		"DeclineRateCode":    {Operation: fake.OpAuthorize, Kind: fake.FaultDeclineRate, Probability: 0.5, DeclineCode: "Bad Code"},
		"SeedOnLatency":      {Operation: fake.OpCapture, Kind: fake.FaultLatency, LatencyMS: 1, Seed: 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantKind(t, c.InjectFault(t.Context(), f), providers.KindRejected, providers.CodeInvalidRequest)
		})
	}
}
