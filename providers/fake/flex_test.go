package fake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// allFlex asks for every flexible-hold feature.
var allFlex = providers.Flex{IncrementalAuthorization: true, Multicapture: true, Overcapture: true}

// flexReq is an approving authorization of amount asking for the features
// set in ask, with a fresh key.
func flexReq(t *testing.T, amount int64, ask providers.Flex) providers.AuthorizeRequest {
	req := authReq(t, amount)
	req.RequestIncrementalAuthorization = ask.IncrementalAuthorization
	req.RequestMulticapture = ask.Multicapture
	req.RequestOvercapture = ask.Overcapture
	return req
}

// flexHold places a hold of amount asking for ask, failing the test on
// error.
func flexHold(t *testing.T, c *fake.Client, amount int64, ask providers.Flex) providers.Hold {
	t.Helper()
	h, err := c.Authorize(t.Context(), flexReq(t, amount, ask))
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	return h
}

// lookup reads a hold, failing the test on error.
func lookup(t *testing.T, c *fake.Client, ref string) providers.Hold {
	t.Helper()
	h, err := c.Lookup(t.Context(), ref)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	return h
}

// wantAmounts checks a hold's status and amounts as Lookup reads them.
func wantAmounts(t *testing.T, c *fake.Client, ref string, st providers.Status, amount, captured, refunded int64) {
	t.Helper()
	h := lookup(t, c, ref)
	if h.Status != st || h.AmountMinor != amount || h.CapturedMinor != captured || h.RefundedMinor != refunded {
		t.Fatalf("hold %s: %s amount %d captured %d refunded %d; want %s %d %d %d", ref, h.Status,
			h.AmountMinor, h.CapturedMinor, h.RefundedMinor, st, amount, captured, refunded)
	}
}

// increment raises a hold, failing the test on error.
func increment(t *testing.T, c *fake.Client, ref string, total int64) providers.Hold {
	t.Helper()
	h, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: ref, AmountMinor: total})
	if err != nil {
		t.Fatalf("IncrementAuthorization to %d: %v", total, err)
	}
	return h
}

// capture captures amount of a hold, not final when notFinal, failing the
// test on error.
func capture(t *testing.T, c *fake.Client, ref string, amount int64, notFinal bool) providers.Hold {
	t.Helper()
	h, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: ref, AmountMinor: amount, NotFinal: notFinal})
	if err != nil {
		t.Fatalf("Capture %d (not final %v): %v", amount, notFinal, err)
	}
	return h
}

func TestFlexGrants(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	if got := c.FlexibleHolds(); got != (providers.FlexSupport{IncrementalAuthorization: true, Multicapture: true, Overcapture: true}) {
		t.Errorf("FlexibleHolds() = %+v, want all three", got)
	}
	full := providers.Flex{IncrementalAuthorization: true, Multicapture: true, Overcapture: true,
		MaxCapturableMinor: 1200, MaxAmountMinor: 2000}
	for _, tc := range []struct {
		name   string
		method string // or card
		card   string
		ask    providers.Flex
		want   providers.Flex
	}{
		{"AllAskedAllGranted", "pm_card_visa", "", allFlex, full},
		{"NoneAsked", "pm_card_visa", "", providers.Flex{}, providers.Flex{}},
		{"OnlyOvercapture", "pm_card_visa", "", providers.Flex{Overcapture: true},
			providers.Flex{Overcapture: true, MaxCapturableMinor: 1200}},
		{"OnlyIncrements", "pm_card_visa", "", providers.Flex{IncrementalAuthorization: true},
			providers.Flex{IncrementalAuthorization: true, MaxAmountMinor: 2000}},
		{"OnlyMulticapture", "pm_card_visa", "", providers.Flex{Multicapture: true}, providers.Flex{Multicapture: true}},
		{"MethodUnavailable", "pm_card_flexUnavailable", "", allFlex, providers.Flex{}},
		{"MethodIncrementDeclinedIsGranted", "pm_card_incrementDeclined", "", allFlex, full},
		{"Card", "", "4242424242424242", allFlex, full},
		{"CardUnavailable", "", fake.TestCardFlexUnavailable, allFlex, providers.Flex{}},
		{"CardIncrementDeclinedIsGranted", "", fake.TestCardIncrementDeclined, allFlex, full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := flexReq(t, 1000, tc.ask)
			if tc.card != "" {
				cr := cardReq(t, 1000, tc.card)
				cr.RequestIncrementalAuthorization, cr.RequestMulticapture, cr.RequestOvercapture =
					req.RequestIncrementalAuthorization, req.RequestMulticapture, req.RequestOvercapture
				req = cr
			} else {
				req.PaymentMethod = tc.method
			}
			h, err := c.Authorize(t.Context(), req)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if h.Status != providers.StatusAuthorized || h.Flex != tc.want {
				t.Fatalf("authorized %s with Flex %+v, want authorized with %+v", h.Status, h.Flex, tc.want)
			}
			if got := lookup(t, c, h.Ref).Flex; got != tc.want {
				t.Errorf("Lookup's Flex %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("WireReportsAvailability", func(t *testing.T) {
		t.Parallel()
		r, c := start(t, fake.Config{})
		req := flexReq(t, 1000, providers.Flex{Multicapture: true, Overcapture: true})
		req.PaymentMethod = "pm_card_flexUnavailable"
		h, err := c.Authorize(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		body := string(lookupRaw(t, r, h.Ref).body)
		if !strings.Contains(body, `"flex":{"incremental_authorization":"unavailable","multicapture":"unavailable","overcapture":"unavailable"}`) {
			t.Errorf("lookup %s, want flex with every feature unavailable", body)
		}
		h = flexHold(t, c, 1000, allFlex)
		body = string(lookupRaw(t, r, h.Ref).body)
		if !strings.Contains(body, `"flex":{"incremental_authorization":"available","multicapture":"available","overcapture":"available","maximum_amount_capturable":1200,"maximum_amount":2000}`) {
			t.Errorf("lookup %s, want flex with every feature available", body)
		}
	})

	t.Run("ConfiguredPercents", func(t *testing.T) {
		t.Parallel()
		_, c := start(t, fake.Config{OvercapturePercent: 15, IncrementPercent: 30})
		h := flexHold(t, c, 999, allFlex)
		// Rounded down: 999 × 1.15 = 1148.85, 999 × 1.3 = 1298.7.
		if h.Flex.MaxCapturableMinor != 1148 || h.Flex.MaxAmountMinor != 1298 {
			t.Errorf("Flex %+v, want MaxCapturableMinor 1148 and MaxAmountMinor 1298", h.Flex)
		}
	})

	t.Run("GrantedWhenTheChallengeIsCompleted", func(t *testing.T) {
		t.Parallel()
		req := threeDSReq(t, "pm_card_threeDSecure2Required", "https://shop.example/back", false)
		req.RequestIncrementalAuthorization, req.RequestMulticapture = true, true
		h := challenge(t, c, req)
		if h.Flex != (providers.Flex{}) {
			t.Errorf("a hold waiting for its cardholder reports Flex %+v, want nothing granted yet", h.Flex)
		}
		h, err := c.Authenticate(t.Context(), h.Ref, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := (providers.Flex{IncrementalAuthorization: true, Multicapture: true, MaxAmountMinor: 2 * req.AmountMinor}); h.Flex != want {
			t.Errorf("authenticated hold's Flex %+v, want %+v", h.Flex, want)
		}
	})

	t.Run("AskedAtTheConfirmation", func(t *testing.T) {
		t.Parallel()
		r, _ := start(t, fake.Config{})
		_, confirmed := rawAuthorize(t, r.URL(), newKey(t), []byte(`{"amount_minor":500,"currency":"EUR"}`))
		if confirmed.status != http.StatusOK || strings.Contains(string(confirmed.body), `"flex"`) {
			t.Fatalf("confirmation without asking: %d %s", confirmed.status, confirmed.body)
		}
		var created struct{ Ref string }
		res := do(t, http.MethodPost, r.URL()+"/v1/holds", map[string]string{"Idempotency-Key": newKey(t)}, []byte(`{"amount_minor":500,"currency":"EUR"}`))
		if err := json.Unmarshal(res.body, &created); err != nil || created.Ref == "" {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		res = do(t, http.MethodPost, r.URL()+"/v1/holds/"+created.Ref+"/confirm", map[string]string{"Idempotency-Key": newKey(t)},
			[]byte(`{"request_overcapture":true}`))
		if res.status != http.StatusOK || !strings.Contains(string(res.body), `"overcapture":"available","maximum_amount_capturable":600`) {
			t.Errorf("confirmation asking for overcapture: %d %s", res.status, res.body)
		}
	})
}

func TestIncrementAuthorization(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	_, c := start(t, fake.Config{Clock: clk.Now, HoldLifetime: 24 * time.Hour})

	t.Run("RaisesOnceUnderItsKey", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, allFlex)
		req := providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1500}
		first, err := c.IncrementAuthorization(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if first.AmountMinor != 1500 || first.Status != providers.StatusAuthorized || !first.CaptureBefore.Equal(h.CaptureBefore) {
			t.Fatalf("incremented hold %+v, want 1500 authorized, capture_before kept at %s", first, h.CaptureBefore)
		}
		// maximum_amount_capturable follows the amount; maximum_amount stays.
		if first.Flex.MaxCapturableMinor != 1800 || first.Flex.MaxAmountMinor != 2000 {
			t.Errorf("Flex after the increment %+v, want MaxCapturableMinor 1800, MaxAmountMinor 2000", first.Flex)
		}
		again, err := c.IncrementAuthorization(t.Context(), req)
		if err != nil || again != first {
			t.Fatalf("replay: %+v, %v; want the first answer %+v", again, err, first)
		}
		if ops := operations(t, c, req.Key); len(ops) != 1 || ops[0].Operation != fake.OpIncrement ||
			ops[0].AmountMinor != 1500 || ops[0].Outcome != fake.OutcomeSucceeded {
			t.Errorf("operations %+v, want one increment to 1500", ops)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1500, 0, 0)

		req.AmountMinor = 1600
		_, err = c.IncrementAuthorization(t.Context(), req)
		wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1500, 0, 0)

		// Up to maximum_amount exactly.
		if got := increment(t, c, h.Ref, 2000); got.AmountMinor != 2000 {
			t.Errorf("increment to the maximum: %+v", got)
		}
	})

	refusals := []struct {
		name  string
		setup func(t *testing.T) providers.Hold
		total int64
		kind  providers.Kind
		code  string
	}{
		{"NotGranted", func(t *testing.T) providers.Hold {
			return flexHold(t, c, 1000, providers.Flex{Multicapture: true, Overcapture: true})
		}, 1500, providers.KindRejected, providers.CodeNotSupported},
		{"CardUnavailable", func(t *testing.T) providers.Hold {
			req := flexReq(t, 1000, allFlex)
			req.PaymentMethod = "pm_card_flexUnavailable"
			h, err := c.Authorize(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}, 1500, providers.KindRejected, providers.CodeNotSupported},
		{"Captured", func(t *testing.T) providers.Hold {
			h := flexHold(t, c, 1000, allFlex)
			return capture(t, c, h.Ref, 0, false)
		}, 1500, providers.KindRejected, providers.CodeStateConflict},
		{"Canceled", func(t *testing.T) providers.Hold {
			h := flexHold(t, c, 1000, allFlex)
			h, err := c.Cancel(t.Context(), providers.CancelRequest{Key: newKey(t), Ref: h.Ref})
			if err != nil {
				t.Fatal(err)
			}
			return h
		}, 1500, providers.KindRejected, providers.CodeStateConflict},
		{"RequiresAction", func(t *testing.T) providers.Hold {
			req := threeDSReq(t, "pm_card_threeDSecure2Required", "https://shop.example/back", false)
			req.RequestIncrementalAuthorization = true
			return challenge(t, c, req)
		}, 1500, providers.KindRejected, providers.CodeStateConflict},
		{"Declined", func(t *testing.T) providers.Hold {
			req := flexReq(t, 1000, allFlex)
			req.PaymentMethod = "pm_card_chargeDeclined"
			h, _ := c.Authorize(t.Context(), req)
			return h
		}, 1500, providers.KindRejected, providers.CodeStateConflict},
		{"SameAmount", func(t *testing.T) providers.Hold { return flexHold(t, c, 1000, allFlex) },
			1000, providers.KindRejected, providers.CodeInvalidRequest},
		{"Lower", func(t *testing.T) providers.Hold { return flexHold(t, c, 1000, allFlex) },
			999, providers.KindRejected, providers.CodeInvalidRequest},
		{"PastTheMaximum", func(t *testing.T) providers.Hold { return flexHold(t, c, 1000, allFlex) },
			2001, providers.KindRejected, providers.CodeAmountTooLarge},
		{"IssuerDeclines", func(t *testing.T) providers.Hold {
			req := flexReq(t, 1000, allFlex)
			req.PaymentMethod = "pm_card_incrementDeclined"
			h, err := c.Authorize(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}, 1500, providers.KindDeclined, providers.CodeCardDeclined},
		{"CardIssuerDeclines", func(t *testing.T) providers.Hold {
			req := cardReq(t, 1000, fake.TestCardIncrementDeclined)
			req.RequestIncrementalAuthorization = true
			h, err := c.Authorize(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}, 1500, providers.KindDeclined, providers.CodeCardDeclined},
	}
	for _, tc := range refusals {
		t.Run("Refused"+tc.name, func(t *testing.T) {
			t.Parallel()
			h := tc.setup(t)
			before := lookupPrinted(t, c, h.Ref)
			key := newKey(t)
			got, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: tc.total})
			wantKind(t, err, tc.kind, tc.code)
			if tc.kind == providers.KindDeclined && (got.Ref != h.Ref || got.AmountMinor != 1000) {
				t.Errorf("a declined increment returns %+v, want the hold as it was", got)
			}
			if after := lookupPrinted(t, c, h.Ref); after != before {
				t.Errorf("the refused increment changed the hold:\n%s\nwas\n%s", after, before)
			}
			if ops := operations(t, c, key); len(ops) != 1 || ops[0].Outcome != tc.code {
				t.Errorf("operations %+v, want one increment refused with %s", ops, tc.code)
			}
			// Stored like every executed refusal: a retry replays it.
			_, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: tc.total})
			wantKind(t, err, tc.kind, tc.code)
			if n := len(operations(t, c, key)); n != 1 {
				t.Errorf("%d operations after the retry, want 1", n)
			}
		})
	}

	t.Run("RefusedExpired", func(t *testing.T) {
		t.Parallel()
		// A fake of its own: the test moves its clock.
		lc := testkit.NewClock(clk.Now())
		_, c := start(t, fake.Config{Clock: lc.Now, HoldLifetime: time.Hour})
		h := flexHold(t, c, 1000, allFlex)
		lc.Add(time.Hour)
		_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1500})
		wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
		wantAmounts(t, c, h.Ref, providers.StatusExpired, 1000, 0, 0)
	})

	t.Run("InvalidAmountIsNotExecuted", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, allFlex)
		key := newKey(t)
		_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 0})
		wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
		if n := len(operations(t, c, key)); n != 0 {
			t.Errorf("%d operations for an invalid request, want none", n)
		}
	})

	t.Run("UnknownHold", func(t *testing.T) {
		t.Parallel()
		_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: "fh_nobody", AmountMinor: 5})
		wantKind(t, err, providers.KindRejected, providers.CodeNotFound)
		_, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), AmountMinor: 5})
		wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
	})
}

// lookupPrinted is a hold's lookup as the client decodes it, printed, to
// compare a hold before and after a refusal.
func lookupPrinted(t *testing.T, c *fake.Client, ref string) string {
	t.Helper()
	h := lookup(t, c, ref)
	return fmt.Sprintf("%+v", h)
}

func TestConcurrentIncrements(t *testing.T) {
	t.Parallel()

	t.Run("TwentyKeysEachAppliedOnce", func(t *testing.T) {
		t.Parallel()
		_, c := start(t, fake.Config{})
		h := flexHold(t, c, 1000, allFlex)
		type result struct {
			key   string
			total int64
			hold  providers.Hold
			err   error
		}
		results := make([]result, 20)
		var wg sync.WaitGroup
		for i := range results {
			results[i] = result{key: newKey(t), total: 1000 + 50*int64(i+1)}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := &results[i]
				r.hold, r.err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: r.key, Ref: h.Ref, AmountMinor: r.total})
			}()
		}
		wg.Wait()

		applied := map[string]int64{}
		var highest int64
		for _, r := range results {
			ops := operations(t, c, r.key)
			if len(ops) != 1 {
				t.Fatalf("key of %d: %d operations, want exactly 1", r.total, len(ops))
			}
			switch {
			case r.err == nil:
				if r.hold.AmountMinor != r.total || ops[0].Outcome != fake.OutcomeSucceeded {
					t.Errorf("increment to %d answered %d, logged %s", r.total, r.hold.AmountMinor, ops[0].Outcome)
				}
				applied[r.key] = r.total
				highest = max(highest, r.total)
			default:
				// Refused only because a higher total was applied first.
				wantKind(t, r.err, providers.KindRejected, providers.CodeInvalidRequest)
			}
		}
		if highest != 2000 {
			t.Errorf("the highest total applied is %d, want 2000 (nothing can pass it)", highest)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 2000, 0, 0)
		// In execution order, every increment applied raised the hold.
		var last int64 = 1000
		for _, op := range operations(t, c, "") {
			if op.Ref != h.Ref || op.Operation != fake.OpIncrement || op.Outcome != fake.OutcomeSucceeded {
				continue
			}
			if op.AmountMinor <= last {
				t.Errorf("increment seq %d to %d after %d: not a raise", op.Seq, op.AmountMinor, last)
			}
			last = op.AmountMinor
		}
		// The report's parts: each applied key once, with its total.
		parts := reportRowOf(t, c, h.Ref).Parts
		if len(parts) != len(applied) {
			t.Fatalf("%d increment parts, want %d: %+v", len(parts), len(applied), parts)
		}
		for _, p := range parts {
			if total, ok := applied[p.IdempotencyKey]; !ok || p.Kind != providers.PartIncrement || p.AmountMinor != total {
				t.Errorf("part %+v is not an applied increment", p)
			}
			delete(applied, p.IdempotencyKey)
		}
	})

	t.Run("OneKeyTwentyTimesIsOne", func(t *testing.T) {
		t.Parallel()
		_, c := start(t, fake.Config{})
		h := flexHold(t, c, 1000, allFlex)
		req := providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1700}
		// A latency keeps the first request executing while the others
		// arrive: they see the key in use, and retry until they replay.
		inject(t, c, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultLatency, LatencyMS: 200, Count: 1, IdempotencyKey: req.Key})
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, err := c.IncrementAuthorization(t.Context(), req)
					if providers.KindOf(err) == providers.KindNotExecuted && t.Context().Err() == nil {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if err == nil && got.AmountMinor != 1700 {
						err = errors.New("answered another amount")
					}
					errs[i] = err
					return
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("IncrementAuthorization: %v", err)
			}
		}
		if n := len(operations(t, c, req.Key)); n != 1 {
			t.Errorf("%d operations, want 1", n)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1700, 0, 0)
		if parts := reportRowOf(t, c, h.Ref).Parts; len(parts) != 1 {
			t.Errorf("parts %+v, want one increment", parts)
		}
	})
}

func TestIncrementFaults(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})

	t.Run("ErrorBeforeExecuteChangesNothing", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, allFlex)
		req := providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1500}
		inject(t, c, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultErrorBeforeExecute, Count: 1, IdempotencyKey: req.Key})
		_, err := c.IncrementAuthorization(t.Context(), req)
		wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
		if n := len(operations(t, c, req.Key)); n != 0 {
			t.Fatalf("%d operations, want none", n)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 0, 0)
		if _, err := c.IncrementAuthorization(t.Context(), req); err != nil {
			t.Fatalf("retry: %v", err)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1500, 0, 0)
	})

	t.Run("TimeoutAfterExecuteRaisesOnce", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, allFlex)
		req := providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1500}
		inject(t, c, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultTimeoutAfterExecute, Count: 1, IdempotencyKey: req.Key})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := c.IncrementAuthorization(ctx, req)
		wantKind(t, err, providers.KindUnknown, providers.CodeProviderTimeout)
		// The lost answer is settled by a lookup (once the fake has got
		// to it on a loaded machine), or by the same key.
		waitFor(t, "the increment at the fake", func() bool { return lookup(t, c, h.Ref).AmountMinor == 1500 })
		got, err := c.IncrementAuthorization(t.Context(), req)
		if err != nil || got.AmountMinor != 1500 {
			t.Fatalf("retry: %+v, %v", got, err)
		}
		if n := len(operations(t, c, req.Key)); n != 1 {
			t.Errorf("%d operations, want 1", n)
		}
		if parts := reportRowOf(t, c, h.Ref).Parts; len(parts) != 1 {
			t.Errorf("parts %+v, want one increment", parts)
		}
	})

	t.Run("DeclineFaultLeavesTheHold", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, allFlex)
		key := newKey(t)
		inject(t, c, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultDecline, Count: 1, IdempotencyKey: key})
		got, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 1500})
		wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
		if got.Ref != h.Ref || got.AmountMinor != 1000 {
			t.Errorf("declined increment returned %+v, want the hold at 1000", got)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 0, 0)
		if ops := operations(t, c, key); len(ops) != 1 || ops[0].Outcome != providers.CodeCardDeclined {
			t.Errorf("operations %+v, want one declined increment", ops)
		}
		// The decline is stored under its key; another key raises.
		_, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: key, Ref: h.Ref, AmountMinor: 1500})
		wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
		increment(t, c, h.Ref, 1500)
	})

	t.Run("DeclineFaultOnlyOnIncrements", func(t *testing.T) {
		t.Parallel()
		for _, op := range []fake.Op{fake.OpCapture, fake.OpAuthorize, fake.OpRefund} {
			err := c.InjectFault(t.Context(), fake.Fault{Operation: op, Kind: fake.FaultDecline})
			wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
		}
	})
}

func TestMulticapture(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	multi := providers.Flex{Multicapture: true}

	t.Run("PartsAddUpToTheAmount", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, multi)
		if got := capture(t, c, h.Ref, 300, true); got.Status != providers.StatusAuthorized || got.CapturedMinor != 300 {
			t.Fatalf("first partial capture: %+v", got)
		}
		capture(t, c, h.Ref, 200, true)
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 500, 0)

		key := newKey(t)
		_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: h.Ref, AmountMinor: 501, NotFinal: true})
		wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
		_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 501})
		wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 500, 0)

		// A final capture of zero captures what remains.
		if got := capture(t, c, h.Ref, 0, false); got.Status != providers.StatusCaptured || got.CapturedMinor != 1000 {
			t.Fatalf("final capture: %+v", got)
		}
		_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1, NotFinal: true})
		wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	})

	t.Run("PartialToTheLastUnitSettles", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, multi)
		capture(t, c, h.Ref, 600, true)
		if got := capture(t, c, h.Ref, 400, true); got.Status != providers.StatusCaptured || got.CapturedMinor != 1000 {
			t.Fatalf("a partial capture of all that remains leaves %+v, want captured: nothing is left", got)
		}
	})

	t.Run("FinalCaptureReleasesTheRest", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, multi)
		capture(t, c, h.Ref, 300, true)
		if got := capture(t, c, h.Ref, 200, false); got.Status != providers.StatusCaptured || got.CapturedMinor != 500 {
			t.Fatalf("final capture: %+v, want captured 500", got)
		}
		_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 100})
		wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
		wantAmounts(t, c, h.Ref, providers.StatusCaptured, 1000, 500, 0)
	})

	t.Run("NotFinalWithoutMulticaptureIsNotSupported", func(t *testing.T) {
		t.Parallel()
		for _, ask := range []providers.Flex{{}, {IncrementalAuthorization: true, Overcapture: true}} {
			h := flexHold(t, c, 1000, ask)
			key := newKey(t)
			_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: h.Ref, AmountMinor: 300, NotFinal: true})
			wantKind(t, err, providers.KindRejected, providers.CodeNotSupported)
			wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 0, 0)
			if ops := operations(t, c, key); len(ops) != 1 || ops[0].Outcome != providers.CodeNotSupported {
				t.Errorf("operations %+v, want one capture refused not_supported", ops)
			}
		}
	})

	t.Run("NotFinalNeedsAnAmount", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, multi)
		key := newKey(t)
		_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: key, Ref: h.Ref, NotFinal: true})
		wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
		if n := len(operations(t, c, key)); n != 0 {
			t.Errorf("%d operations for an invalid capture, want none", n)
		}
	})

	t.Run("RefundsAgainstTheCapturedSoFar", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, multi)
		_, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1})
		wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
		capture(t, c, h.Ref, 400, true)
		_, err = c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 401})
		wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
		if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 300}); err != nil {
			t.Fatalf("refund of a partial capture: %v", err)
		}
		// The hold stays authorized: the rest is still capturable.
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 400, 300)
		capture(t, c, h.Ref, 300, true)
		rf, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref})
		if err != nil || rf.AmountMinor != 400 {
			t.Fatalf("refund of the rest: %+v, %v; want 400", rf, err)
		}
		wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 700, 700)
		capture(t, c, h.Ref, 0, false)
		wantAmounts(t, c, h.Ref, providers.StatusPartiallyRefunded, 1000, 1000, 700)
		if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
			t.Fatal(err)
		}
		wantAmounts(t, c, h.Ref, providers.StatusRefunded, 1000, 1000, 1000)
	})

	t.Run("CancelAfterPartsReleasesTheRest", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, multi)
		capture(t, c, h.Ref, 400, true)
		key := newKey(t)
		got, err := c.Cancel(t.Context(), providers.CancelRequest{Key: key, Ref: h.Ref})
		if err != nil {
			t.Fatal(err)
		}
		// As Stripe's PaymentIntent ends succeeded: the capture stands.
		if got.Status != providers.StatusCaptured || got.CapturedMinor != 400 {
			t.Fatalf("canceled after a partial capture: %+v, want captured 400", got)
		}
		if ops := operations(t, c, key); len(ops) != 1 || ops[0].AmountMinor != 600 {
			t.Errorf("operations %+v, want one cancel releasing 600", ops)
		}
		_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 100, NotFinal: true})
		wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
		if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
			t.Fatalf("refund after the cancel: %v", err)
		}
		wantAmounts(t, c, h.Ref, providers.StatusRefunded, 1000, 400, 400)
		_, err = c.Cancel(t.Context(), providers.CancelRequest{Key: newKey(t), Ref: h.Ref})
		wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	})

	t.Run("IncrementThenCaptureInParts", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, providers.Flex{IncrementalAuthorization: true, Multicapture: true})
		capture(t, c, h.Ref, 800, true)
		increment(t, c, h.Ref, 1500)
		capture(t, c, h.Ref, 700, true)
		wantAmounts(t, c, h.Ref, providers.StatusCaptured, 1500, 1500, 0)
	})
}

func TestMulticaptureLapsesSettled(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	_, c := start(t, fake.Config{Clock: clk.Now, HoldLifetime: time.Hour})
	h := flexHold(t, c, 1000, providers.Flex{Multicapture: true})
	capture(t, c, h.Ref, 400, true)
	clk.Add(time.Hour)
	// The rest lapsed; the capture stands and stays refundable.
	wantAmounts(t, c, h.Ref, providers.StatusCaptured, 1000, 400, 0)
	_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 100, NotFinal: true})
	wantKind(t, err, providers.KindRejected, providers.CodeHoldExpired)
	if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 100}); err != nil {
		t.Fatalf("refund after the lapse: %v", err)
	}
	wantAmounts(t, c, h.Ref, providers.StatusPartiallyRefunded, 1000, 400, 100)
}

func TestOvercapture(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	over := providers.Flex{Overcapture: true}
	for _, tc := range []struct {
		name   string
		ask    providers.Flex
		amount int64
		code   string // "" captures
	}{
		{"UpToTheMaximum", over, 1200, ""},
		{"PastTheMaximum", over, 1201, providers.CodeAmountTooLarge},
		{"WithoutOvercapture", providers.Flex{Multicapture: true, IncrementalAuthorization: true}, 1001, providers.CodeAmountTooLarge},
		{"NotAsked", providers.Flex{}, 1001, providers.CodeAmountTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := flexHold(t, c, 1000, tc.ask)
			got, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: tc.amount})
			if tc.code != "" {
				wantKind(t, err, providers.KindRejected, tc.code)
				wantAmounts(t, c, h.Ref, providers.StatusAuthorized, 1000, 0, 0)
				return
			}
			if err != nil || got.Status != providers.StatusCaptured || got.CapturedMinor != tc.amount {
				t.Fatalf("overcapture: %+v, %v", got, err)
			}
		})
	}

	t.Run("InPartsAndAfterAnIncrement", func(t *testing.T) {
		t.Parallel()
		h := flexHold(t, c, 1000, allFlex)
		capture(t, c, h.Ref, 700, true)
		_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 501, NotFinal: true})
		wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
		// The maximum follows the amount: 1500 × 1.2 = 1800.
		increment(t, c, h.Ref, 1500)
		capture(t, c, h.Ref, 1000, true)
		_, err = c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 101})
		wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
		if got := capture(t, c, h.Ref, 100, false); got.Status != providers.StatusCaptured || got.CapturedMinor != 1800 {
			t.Fatalf("final overcapture: %+v, want captured 1800", got)
		}
	})
}

// reportRowOf is the report row of ref over the last and next day.
func reportRowOf(t *testing.T, c *fake.Client, ref string) providers.ReportRow {
	t.Helper()
	now := time.Now()
	rows := byRef(report(t, c, now.Add(-24*time.Hour), now.Add(24*time.Hour)))[ref]
	if len(rows) != 1 {
		t.Fatalf("report lists %s %d times, want once", ref, len(rows))
	}
	return rows[0]
}

func TestReportParts(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(day.Add(9 * time.Hour))
	r, c := start(t, fake.Config{Clock: clk.Now})
	h := flexHold(t, c, 1000, allFlex)
	incKey, cap1Key, cap2Key := newKey(t), newKey(t), newKey(t)
	clk.Add(time.Minute)
	if _, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: incKey, Ref: h.Ref, AmountMinor: 1500}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: cap1Key, Ref: h.Ref, AmountMinor: 600, NotFinal: true}); err != nil {
		t.Fatal(err)
	}
	// Refused operations are no parts.
	_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 5000, NotFinal: true})
	wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
	clk.Add(time.Minute)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: cap2Key, Ref: h.Ref, AmountMinor: 900}); err != nil {
		t.Fatal(err)
	}
	plain := authorize(t, c, 700)
	capture(t, c, plain.Ref, 0, false)
	if _, err := r.Server().Seed(fake.SeedHold{Ref: "fh_seeded_parts", AmountMinor: 100, CapturedMinor: 100,
		Status: providers.StatusCaptured, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}

	t0 := day.Add(9 * time.Hour)
	want := []providers.ReportPart{
		{Kind: providers.PartIncrement, AmountMinor: 1500, IdempotencyKey: incKey, CreatedAt: t0.Add(time.Minute)},
		{Kind: providers.PartCapture, AmountMinor: 600, IdempotencyKey: cap1Key, CreatedAt: t0.Add(2 * time.Minute)},
		{Kind: providers.PartCapture, AmountMinor: 900, IdempotencyKey: cap2Key, CreatedAt: t0.Add(3 * time.Minute)},
	}
	rows := byRef(report(t, c, day, day.Add(24*time.Hour)))
	got := rows[h.Ref][0]
	if got.AmountMinor != 1500 || got.CapturedMinor != 1500 || got.Status != providers.StatusCaptured || !samePartsList(got.Parts, want) {
		t.Errorf("row %+v\nwant amount 1500, captured 1500, parts %+v", got, want)
	}
	if p := rows[plain.Ref][0].Parts; len(p) != 1 || p[0].Kind != providers.PartCapture || p[0].AmountMinor != 700 {
		t.Errorf("a plain capture's parts %+v, want one capture of 700", p)
	}
	if p := rows["fh_seeded_parts"][0].Parts; p != nil {
		t.Errorf("a seeded hold's parts %+v, want none", p)
	}

	t.Run("Drifts", func(t *testing.T) {
		ghost := fake.Part{Kind: providers.PartIncrement, AmountMinor: 1700, CreatedAt: t0.Add(150 * time.Second)}
		for _, tc := range []struct {
			name  string
			drift fake.Drift
			want  []providers.ReportPart
		}{
			{"PartAmount", fake.Drift{Kind: fake.DriftPartAmount, Ref: h.Ref, Part: 2, AmountMinor: 599},
				[]providers.ReportPart{want[0], {Kind: providers.PartCapture, AmountMinor: 599, IdempotencyKey: cap1Key, CreatedAt: want[1].CreatedAt}, want[2]}},
			{"PartDrop", fake.Drift{Kind: fake.DriftPartDrop, Ref: h.Ref, Part: 1}, want[1:]},
			{"PartAddInTimeOrder", fake.Drift{Kind: fake.DriftPartAdd, Ref: h.Ref, NewPart: &ghost},
				[]providers.ReportPart{want[0], want[1], {Kind: providers.PartIncrement, AmountMinor: 1700, CreatedAt: ghost.CreatedAt}, want[2]}},
			{"PartPastTheEndIsLeftAlone", fake.Drift{Kind: fake.DriftPartDrop, Ref: h.Ref, Part: 4}, want},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := c.Drift(t.Context(), tc.drift); err != nil {
					t.Fatalf("Drift: %v", err)
				}
				row := byRef(report(t, c, day, day.Add(24*time.Hour)))[h.Ref][0]
				if !samePartsList(row.Parts, tc.want) {
					t.Errorf("parts %+v\nwant %+v", row.Parts, tc.want)
				}
				if err := c.ClearDrift(t.Context()); err != nil {
					t.Fatal(err)
				}
				// The drift was in the report only.
				if row := byRef(report(t, c, day, day.Add(24*time.Hour)))[h.Ref][0]; !samePartsList(row.Parts, want) {
					t.Errorf("parts after clearing %+v, want %+v", row.Parts, want)
				}
			})
		}
	})

	t.Run("AddedRowWithParts", func(t *testing.T) {
		stranger := fake.Row{PaymentID: "pay_parts", Status: providers.StatusCaptured, AmountMinor: 50, CapturedMinor: 50,
			Currency: "EUR", CreatedAt: day.Add(20 * time.Hour),
			Parts: []fake.Part{{Kind: providers.PartCapture, AmountMinor: 50, IdempotencyKey: "k"}}}
		if err := c.Drift(t.Context(), fake.Drift{Kind: fake.DriftAdd, Row: &stranger}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.ClearDrift(t.Context()) }()
		var found bool
		for _, row := range report(t, c, day, day.Add(24*time.Hour)) {
			if row.PaymentID == "pay_parts" {
				found = len(row.Parts) == 1 && row.Parts[0].AmountMinor == 50 && row.Parts[0].IdempotencyKey == "k" &&
					!row.Parts[0].CreatedAt.IsZero()
			}
		}
		if !found {
			t.Error("the added row and its part are not in the report")
		}
	})

	t.Run("InvalidPartDrifts", func(t *testing.T) {
		for name, d := range map[string]fake.Drift{
			"NoPart":               {Kind: fake.DriftPartDrop, Ref: h.Ref},
			"NegativePart":         {Kind: fake.DriftPartAmount, Ref: h.Ref, Part: -1, AmountMinor: 5},
			"ZeroAmount":           {Kind: fake.DriftPartAmount, Ref: h.Ref, Part: 1},
			"AddWithoutPart":       {Kind: fake.DriftPartAdd, Ref: h.Ref},
			"AddUnknownKind":       {Kind: fake.DriftPartAdd, Ref: h.Ref, NewPart: &fake.Part{Kind: "refund", AmountMinor: 5}},
			"AddZeroAmount":        {Kind: fake.DriftPartAdd, Ref: h.Ref, NewPart: &fake.Part{Kind: providers.PartCapture}},
			"PartOnAnotherKind":    {Kind: fake.DriftDrop, Ref: h.Ref, Part: 1},
			"NewPartOnAnotherKind": {Kind: fake.DriftPartDrop, Ref: h.Ref, Part: 1, NewPart: &fake.Part{Kind: providers.PartCapture, AmountMinor: 5}},
			"PartOnAnAddDrift":     {Kind: fake.DriftAdd, Part: 1, Row: &fake.Row{Currency: "EUR", AmountMinor: 5}},
			"RowPartUnknownKind": {Kind: fake.DriftAdd, Row: &fake.Row{Currency: "EUR", AmountMinor: 5,
				Parts: []fake.Part{{Kind: "refund", AmountMinor: 5}}}},
		} {
			err := c.Drift(t.Context(), d)
			if providers.KindOf(err) != providers.KindRejected || providers.CodeOf(err) != providers.CodeInvalidRequest {
				t.Errorf("%s: Drift = %v, want invalid_request", name, err)
			}
		}
		wantKind(t, c.Drift(t.Context(), fake.Drift{Kind: fake.DriftPartDrop, Ref: "fh_nobody", Part: 1}), providers.KindRejected, providers.CodeNotFound)
	})
}

// samePartsList compares parts, times as instants.
func samePartsList(got, want []providers.ReportPart) bool {
	return slices.EqualFunc(got, want, func(a, b providers.ReportPart) bool {
		return a.Kind == b.Kind && a.AmountMinor == b.AmountMinor && a.IdempotencyKey == b.IdempotencyKey && a.CreatedAt.Equal(b.CreatedAt)
	})
}

func TestFlexWebhooks(t *testing.T) {
	t.Parallel()
	_, c, rc := startHooked(t, fake.Config{})
	h := flexHold(t, c, 1000, allFlex)
	incKey, cap1Key, cap2Key := newKey(t), newKey(t), newKey(t)
	if _, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: incKey, Ref: h.Ref, AmountMinor: 1500}); err != nil {
		t.Fatal(err)
	}
	// A declined increment sends nothing.
	inject(t, c, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultDecline, Count: 1})
	_, err := c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1600})
	wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: cap1Key, Ref: h.Ref, AmountMinor: 400, NotFinal: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: cap2Key, Ref: h.Ref, AmountMinor: 300}); err != nil {
		t.Fatal(err)
	}
	want := []string{fake.EventHoldAuthorized, fake.EventHoldAmountUpdated, fake.EventHoldCaptured, fake.EventHoldCaptured}
	waitFor(t, "the hold's events", func() bool { return len(rc.types(h.Ref)) >= len(want) })
	if got := rc.types(h.Ref); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	var got []providers.WebhookEvent
	for _, ev := range rc.events() {
		if ev.HoldRef == h.Ref && ev.Type != fake.EventHoldAuthorized {
			got = append(got, ev)
		}
	}
	for i, w := range []struct {
		kind   providers.WebhookKind
		amount int64
		key    string
	}{
		{providers.WebhookUnknown, 1500, incKey},
		{providers.WebhookCaptureSucceeded, 400, cap1Key},
		{providers.WebhookCaptureSucceeded, 300, cap2Key},
	} {
		if ev := got[i]; ev.Kind != w.kind || ev.AmountMinor != w.amount || ev.IdempotencyKey != w.key {
			t.Errorf("event %d: %+v, want kind %s amount %d key %s", i, ev, w.kind, w.amount, w.key)
		}
	}
}

func TestFlexStateAcrossARestart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "state.json")
	clk := testkit.NewClock(day.Add(9 * time.Hour))
	cfg := fake.Config{Clock: clk.Now, StateFile: file, OvercapturePercent: 10}
	r1, c1 := start(t, cfg)
	h := flexHold(t, c1, 1000, allFlex)
	unavailable := flexReq(t, 1000, allFlex)
	unavailable.PaymentMethod = "pm_card_flexUnavailable"
	uh, err := c1.Authorize(t.Context(), unavailable)
	if err != nil {
		t.Fatal(err)
	}
	declines := flexReq(t, 1000, allFlex)
	declines.PaymentMethod = "pm_card_incrementDeclined"
	dh, err := c1.Authorize(t.Context(), declines)
	if err != nil {
		t.Fatal(err)
	}
	increment(t, c1, h.Ref, 1500)
	capture(t, c1, h.Ref, 600, true)
	if err := c1.Drift(t.Context(), fake.Drift{Kind: fake.DriftPartAdd, Ref: h.Ref,
		NewPart: &fake.Part{Kind: providers.PartIncrement, AmountMinor: 1700, IdempotencyKey: "ghost"}}); err != nil {
		t.Fatal(err)
	}
	before := lookupRaw(t, r1, h.Ref).body
	reportBefore := dayRowOf(t, c1, h.Ref)
	shutdown(t, r1)

	// Another OvercapturePercent now: a hold keeps the one it was granted.
	cfg.OvercapturePercent = 50
	r2, c2 := start(t, cfg)
	if after := lookupRaw(t, r2, h.Ref).body; !bytes.Equal(after, before) {
		t.Errorf("lookup after the restart:\n%s\nwant\n%s", after, before)
	}
	if got := dayRowOf(t, c2, h.Ref); !samePartsList(got.Parts, reportBefore.Parts) || len(got.Parts) != 3 {
		t.Errorf("parts after the restart %+v, want %+v", got.Parts, reportBefore.Parts)
	}
	// 1500 × 1.1 = 1650 may be captured in all, 2000 authorized at most.
	_, err = c2.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1051, NotFinal: true})
	wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
	_, err = c2.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 2001})
	wantKind(t, err, providers.KindRejected, providers.CodeAmountTooLarge)
	_, err = c2.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: uh.Ref, AmountMinor: 1100})
	wantKind(t, err, providers.KindRejected, providers.CodeNotSupported)
	_, err = c2.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: dh.Ref, AmountMinor: 1100})
	wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
	capture(t, c2, h.Ref, 1050, true)
	wantAmounts(t, c2, h.Ref, providers.StatusCaptured, 1500, 1650, 0)
}

// dayRowOf is the report row of ref on day.
func dayRowOf(t *testing.T, c *fake.Client, ref string) providers.ReportRow {
	t.Helper()
	rows := byRef(report(t, c, day, day.Add(24*time.Hour)))[ref]
	if len(rows) != 1 {
		t.Fatalf("report lists %s %d times, want once", ref, len(rows))
	}
	return rows[0]
}

// TestStateFileOfAnEarlierBuildLoads starts on a state file written by
// the build before flexible holds: its holds ask for nothing and have no
// parts, and its stored answers replay as they were.
func TestStateFileOfAnEarlierBuildLoads(t *testing.T) {
	t.Parallel()
	old, err := os.ReadFile("../../testdata/fake/state-before-flex.json")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(file, old, 0o600); err != nil {
		t.Fatal(err)
	}
	const captured, open = "fh_f2f5b34e30123f77631e4bbc", "fh_65a4585aede3c80980d46ba1"
	r, c := start(t, fake.Config{StateFile: file, Clock: func() time.Time { return time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC) }})
	wantAmounts(t, c, captured, providers.StatusPartiallyRefunded, 1000, 600, 100)
	if h := lookup(t, c, open); h.Status != providers.StatusAuthorized || h.Flex != (providers.Flex{}) {
		t.Errorf("the open hold reads %+v, want authorized with nothing granted", h)
	}
	res := do(t, http.MethodPost, r.URL()+"/v1/holds/"+captured+"/capture", map[string]string{"Idempotency-Key": "key-cap-1"}, []byte(`{"amount_minor":600}`))
	if res.status != http.StatusOK || res.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(res.body), `"captured_minor":600`) {
		t.Errorf("replay of a stored capture: %d %s", res.status, res.body)
	}
	rows := byRef(report(t, c, day, day.Add(24*time.Hour)))
	if row := rows[captured]; len(row) != 1 || row[0].CapturedMinor != 599 || row[0].Parts != nil {
		t.Errorf("report row of the captured hold %+v, want its drift kept and no parts", row)
	}
	_, err = c.IncrementAuthorization(t.Context(), providers.IncrementRequest{Key: newKey(t), Ref: open, AmountMinor: 2500})
	wantKind(t, err, providers.KindRejected, providers.CodeNotSupported)
	capture(t, c, open, 0, false)
	if n := len(operations(t, c, "")); n != 6 {
		t.Errorf("%d operations, want the 4 stored and 2 new", n)
	}
}

// TestFlexWireNames: the wire names are Stripe's (request_*,
// final_capture), and an increment's body is decoded strictly.
func TestFlexWireNames(t *testing.T) {
	t.Parallel()
	r, _ := start(t, fake.Config{})
	hdr := func() map[string]string { return map[string]string{"Idempotency-Key": newKey(t)} }
	res := do(t, http.MethodPost, r.URL()+"/v1/holds", hdr(),
		[]byte(`{"amount_minor":1000,"currency":"EUR","request_incremental_authorization":true,"request_multicapture":true,"request_overcapture":true}`))
	var created struct{ Ref string }
	if err := json.Unmarshal(res.body, &created); err != nil || created.Ref == "" {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	hold := r.URL() + "/v1/holds/" + created.Ref
	if res := do(t, http.MethodPost, hold+"/confirm", hdr(), nil); res.status != http.StatusOK {
		t.Fatalf("confirm: %d %s", res.status, res.body)
	}
	res = do(t, http.MethodPost, hold+"/increment", hdr(), []byte(`{"amount_minor":1500}`))
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"amount_minor":1500`) {
		t.Errorf("increment: %d %s", res.status, res.body)
	}
	res = do(t, http.MethodPost, hold+"/capture", hdr(), []byte(`{"amount_minor":100,"final_capture":false}`))
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"status":"authorized"`) ||
		!strings.Contains(string(res.body), `"captured_minor":100`) {
		t.Errorf("capture not final: %d %s", res.status, res.body)
	}
	for _, body := range []string{`{"amount_minor":1600,"extra":1}`, `{"amount_minor":"1600"}`, `{}`, `{"amount_minor":-5}`} {
		if res := do(t, http.MethodPost, hold+"/increment", hdr(), []byte(body)); res.status != http.StatusBadRequest ||
			!strings.Contains(string(res.body), `"invalid_request"`) {
			t.Errorf("increment %s: %d %s, want 400 invalid_request", body, res.status, res.body)
		}
	}
}
