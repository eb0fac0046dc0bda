package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// flexPay authorizes amount asking for increments, multicapture and
// overcapture (flexAuthorize), then applies steps (flexSteps).
func (e *env) flexPay(t *testing.T, amount int64, steps ...string) orchestrator.Payment {
	t.Helper()
	return e.flexSteps(t, e.flexAuthorize(t, amount), steps...)
}

// flexAuthorize authorizes amount asking for increments, multicapture and
// overcapture, which the fake grants.
func (e *env) flexAuthorize(t *testing.T, amount int64) orchestrator.Payment {
	t.Helper()
	ctx := context.Background()
	e.n++
	key := fmt.Sprintf("flex%d", e.n)
	body := fmt.Sprintf(`{"amount_minor":%d,"currency":"EUR","flex":true,"n":%d}`, amount, e.n)
	fp, _ := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, []byte(body))
	out, err := e.svc.Authorize(ctx, nil, orchestrator.AuthorizeInput{TenantID: e.tenant, Key: key, Fingerprint: fp,
		AmountMinor: amount, Currency: "EUR", RequestIncrementalAuthorization: true, RequestMulticapture: true,
		RequestOvercapture: true})
	if err != nil {
		t.Fatal(err)
	}
	p := out.Payment
	if p.Status != orchestrator.StatusAuthorized || p.Multicapture == nil || *p.Multicapture != orchestrator.GrantAvailable ||
		p.Overcapture == nil || *p.Overcapture != orchestrator.GrantAvailable {
		t.Fatalf("flexible hold not granted: %+v", p)
	}
	return p
}

// flexSteps applies steps to p a minute apart: "increment:N" raises the
// hold to N in all, "part:N" captures N leaving the rest capturable,
// "capture:N" is a final capture (0: the rest). It returns the payment
// as the last step left it.
func (e *env) flexSteps(t *testing.T, p orchestrator.Payment, steps ...string) orchestrator.Payment {
	t.Helper()
	ctx := context.Background()
	for _, step := range steps {
		e.n++
		e.clk.Add(time.Minute)
		name, arg, _ := strings.Cut(step, ":")
		var amt int64
		fmt.Sscan(arg, &amt)
		in := orchestrator.OperationInput{TenantID: e.tenant, PaymentID: p.ID, Key: fmt.Sprintf("step%d", e.n), AmountMinor: amt}
		var (
			o   orchestrator.Outcome
			err error
		)
		switch name {
		case "increment":
			o, err = e.svc.Increment(ctx, nil, in)
		case "part":
			in.NotFinal = true
			o, err = e.svc.Capture(ctx, nil, in)
		case "capture":
			o, err = e.svc.Capture(ctx, nil, in)
		default:
			t.Fatalf("unknown step %q", step)
		}
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		p = o.Payment
	}
	return p
}

// op is one of our operations of a payment, in the order they were
// made.
type op struct{ id, kind, forwardedKey string }

func (e *env) ops(t *testing.T, p orchestrator.Payment) []op {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id, kind, forwarded_key FROM payment_operations
		WHERE tenant_id = $1 AND payment_id = $2 ORDER BY created_at`, e.tenant, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []op
	for rows.Next() {
		var o op
		if err := rows.Scan(&o.id, &o.kind, &o.forwardedKey); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantPart is a part_mismatch a test expects.
type wantPart struct {
	payment          orchestrator.Payment
	part, reason     string
	forwardedKey     string
	expected, actual *int64 // nil: absent
	operationID      string // "" when the finding names no operation
	difference       *int64
}

func minor(v int64) *int64 { return &v }

// checkPart fails unless d is the finding w describes.
func checkPart(t *testing.T, d reconcile.Discrepancy, w wantPart) {
	t.Helper()
	show := func(v *int64) string {
		if v == nil {
			return "absent"
		}
		return fmt.Sprint(*v)
	}
	asDetail := func(v *int64) any {
		if v == nil {
			return nil
		}
		return float64(*v) // detail is JSON
	}
	bad := d.Category != reconcile.PartMismatch || d.Field != w.part || deref(d.PaymentID) != w.payment.ID ||
		deref(d.ProviderRef) != *w.payment.ProviderRef || d.Expected != show(w.expected) || d.Actual != show(w.actual) ||
		d.Currency != "EUR" || d.Detail["part"] != w.part || d.Detail["reason"] != w.reason ||
		d.Detail["forwarded_key"] != w.forwardedKey || d.Detail["expected"] != asDetail(w.expected) ||
		d.Detail["actual"] != asDetail(w.actual)
	if id, ok := d.Detail["operation_id"]; ok != (w.operationID != "") || ok && id != w.operationID {
		bad = true
	}
	if (d.DifferenceMinor == nil) != (w.difference == nil) || d.DifferenceMinor != nil && *d.DifferenceMinor != *w.difference {
		bad = true
	}
	if bad {
		t.Errorf("finding %+v (difference %s)\nwant %+v (difference %s)", d, show(d.DifferenceMinor), w, show(w.difference))
	}
}

// A day of flexible holds: increments, captures in parts, overcaptures
// and ordinary payments agree with the provider part by part and give no
// finding. Then drifts planted in the provider's parts through the fake's
// admin API (a capture's amount changed, an increment's total changed, an
// increment we never made, one of our captures gone) are each found as a
// part_mismatch with the part, the reason, both amounts and our
// operation, and nothing else: the totals agree, and the clean payments
// still give nothing.
func TestFlexibleHoldsAreReconciledPartByPart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	ordinary := e.aDay(t)
	clean := []orchestrator.Payment{
		e.flexPay(t, 1000, "increment:1500", "increment:1800", "part:500", "part:700", "capture:600"),
		e.flexPay(t, 1000, "capture:1150"),                           // overcaptured at once
		e.flexPay(t, 1000, "increment:1200", "part:300", "part:400"), // still authorized, partly captured
		e.flexPay(t, 2000, "part:1000", "capture:1300"),              // overcaptured over two parts
		e.flexPay(t, 1000, "increment:1100"),                         // raised, not captured yet
		e.flexPay(t, 1000, "increment:1300", "capture:0"),            // raised, then the rest captured
	}
	if p := clean[1]; p.CapturedMinor != 1150 || p.AmountMinor != 1000 {
		t.Fatalf("overcapture: %+v", p)
	}
	if p := clean[3]; p.CapturedMinor != 2300 || p.Status != orchestrator.StatusCaptured {
		t.Fatalf("overcapture in parts: %+v", p)
	}
	capAmount := e.flexPay(t, 1000, "increment:1400", "part:400", "part:300")
	incAmount := e.flexPay(t, 1000, "increment:1600")
	unknownInc := e.flexPay(t, 1000, "part:200")
	lostCapture := e.flexPay(t, 1000, "part:300", "part:200", "capture:100")
	// Before the drifts, the whole day agrees.
	run, ds := e.run(t)
	if len(ds) != 0 {
		t.Fatalf("clean day of flexible holds: %s", categories(ds))
	}
	if n := int64(len(ordinary) + len(clean)); run.MatchedCount != n+4 {
		t.Fatalf("matched %d, want %d", run.MatchedCount, n+4)
	}

	drifts := []fake.Drift{
		// capAmount's parts: increment, capture 400, capture 300.
		{Kind: fake.DriftPartAmount, Ref: *capAmount.ProviderRef, Part: 2, AmountMinor: 450},
		{Kind: fake.DriftPartAmount, Ref: *incAmount.ProviderRef, Part: 1, AmountMinor: 1700},
		{Kind: fake.DriftPartAdd, Ref: *unknownInc.ProviderRef, NewPart: &fake.Part{Kind: providers.PartIncrement,
			AmountMinor: 1300, IdempotencyKey: "po_made_at_the_provider", CreatedAt: e.clk.Now()}},
		{Kind: fake.DriftPartDrop, Ref: *lostCapture.ProviderRef, Part: 2},
	}
	for _, d := range drifts {
		if err := e.fc.Drift(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	_, ds = e.run(t)
	want := map[string]wantPart{}
	o := e.ops(t, capAmount)
	want[capAmount.ID] = wantPart{payment: capAmount, part: "capture", reason: "amount_differs", forwardedKey: o[1].forwardedKey,
		expected: minor(400), actual: minor(450), operationID: o[1].id, difference: minor(50)}
	o = e.ops(t, incAmount)
	want[incAmount.ID] = wantPart{payment: incAmount, part: "increment", reason: "amount_differs", forwardedKey: o[0].forwardedKey,
		expected: minor(1600), actual: minor(1700), operationID: o[0].id, difference: minor(100)}
	want[unknownInc.ID] = wantPart{payment: unknownInc, part: "increment", reason: "unknown_at_payorch",
		forwardedKey: "po_made_at_the_provider", actual: minor(1300)}
	o = e.ops(t, lostCapture)
	if o[1].kind != "capture" {
		t.Fatalf("operations %+v", o)
	}
	want[lostCapture.ID] = wantPart{payment: lostCapture, part: "capture", reason: "missing_at_provider", forwardedKey: o[1].forwardedKey,
		expected: minor(200), operationID: o[1].id, difference: minor(-200)}
	if len(ds) != len(want) {
		t.Fatalf("findings %s, want one part_mismatch for each of the %d drifts", categories(ds), len(want))
	}
	for _, d := range ds {
		w, ok := want[deref(d.PaymentID)]
		if !ok {
			t.Fatalf("a finding about a payment that has no drift: %+v", d)
		}
		checkPart(t, d, w)
		delete(want, w.payment.ID)
	}

	// A second version of the day finds the same, still open.
	again, ds2 := e.run(t)
	if again.Diff.StillOpen != int64(len(ds)) || again.Diff.New != 0 || again.Diff.Gone != 0 || len(ds2) != len(ds) {
		t.Fatalf("re-run diff %+v, want %d still open", again.Diff, len(ds))
	}
	if again.CategoryCounts[reconcile.PartMismatch] != int64(len(ds)) {
		t.Fatalf("category counts %v", again.CategoryCounts)
	}
}

// A part the provider made under the key of an increment we recorded
// declined, and a second copy of a capture we made once (a provider that
// ran it twice), are unknown at payorch: the first names our operation
// and its outcome, the second is told from the first it copies.
func TestAPartWeDoNotHoldSucceededIsUnknownAtPayorch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	p := e.flexAuthorize(t, 1000)
	if err := e.fc.InjectFault(ctx, fake.Fault{Operation: fake.OpIncrement, Kind: fake.FaultDecline, Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Increment(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: p.ID, Key: "declined",
		AmountMinor: 1500})
	if orchestrator.ErrorCode(err) != orchestrator.CodePaymentDeclined {
		t.Fatalf("increment: %v, want a decline", err)
	}
	e.clk.Add(time.Minute)
	p = e.flexSteps(t, p, "part:300")
	o := e.ops(t, p)
	if len(o) != 2 || o[0].kind != "increment" || o[1].kind != "capture" {
		t.Fatalf("operations %+v", o)
	}
	for _, d := range []fake.Drift{
		{Kind: fake.DriftPartAdd, Ref: *p.ProviderRef, NewPart: &fake.Part{Kind: providers.PartCapture, AmountMinor: 300,
			IdempotencyKey: o[1].forwardedKey, CreatedAt: e.clk.Now()}},
		{Kind: fake.DriftPartAdd, Ref: *p.ProviderRef, NewPart: &fake.Part{Kind: providers.PartIncrement, AmountMinor: 1500,
			IdempotencyKey: o[0].forwardedKey, CreatedAt: e.clk.Now()}},
	} {
		if err := e.fc.Drift(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	_, ds := e.run(t)
	if got := categories(ds); got != "part_mismatch/capture,part_mismatch/increment" {
		t.Fatalf("findings %s", got)
	}
	for _, d := range ds {
		switch d.Field {
		case "capture":
			checkPart(t, d, wantPart{payment: p, part: "capture", reason: "unknown_at_payorch", forwardedKey: o[1].forwardedKey,
				actual: minor(300), difference: minor(300)})
		default:
			checkPart(t, d, wantPart{payment: p, part: "increment", reason: "unknown_at_payorch", forwardedKey: o[0].forwardedKey,
				actual: minor(1500), operationID: o[0].id})
			if d.Detail["operation_status"] != "failed" {
				t.Errorf("detail %v, want our operation's status failed", d.Detail)
			}
		}
	}
}

// A provider that reports totals only (Stripe: no parts) is judged on
// them as before: the same drifts on parts find nothing, a drift of the
// captured total is amount_mismatch, and an overcapture above the
// authorized amount is no finding.
func TestWithoutPartsOnlyTheTotalsAreJudged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	e.rec = reconcile.New(reconcile.Config{Pool: e.pool, Clock: e.clk.Now, Providers: map[string]providers.Provider{
		"fake": reportHook{Provider: e.fc, hook: func(_ context.Context, r *providers.ReportRow) error {
			r.Parts = nil
			return nil
		}}}})
	over := e.flexPay(t, 1000, "increment:1200", "part:700", "capture:700")
	parted := e.flexPay(t, 1000, "increment:1400", "part:400", "part:300")
	short := e.flexPay(t, 1000, "part:500")
	for _, d := range []fake.Drift{
		{Kind: fake.DriftPartAmount, Ref: *parted.ProviderRef, Part: 2, AmountMinor: 450},
		{Kind: fake.DriftPartDrop, Ref: *parted.ProviderRef, Part: 3},
		{Kind: fake.DriftPartAdd, Ref: *parted.ProviderRef, NewPart: &fake.Part{Kind: providers.PartIncrement, AmountMinor: 1500}},
		{Kind: fake.DriftAmount, Ref: *short.ProviderRef, Field: fake.AmountCaptured, AmountMinor: 450},
	} {
		if err := e.fc.Drift(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if over.CapturedMinor != 1400 || over.AmountMinor != 1200 {
		t.Fatalf("overcapture %+v", over)
	}
	_, ds := e.run(t)
	if got := categories(ds); got != "amount_mismatch/captured" {
		t.Fatalf("findings %s, want only the captured total of one payment", got)
	}
	if deref(ds[0].PaymentID) != short.ID || ds[0].Expected != "500" || ds[0].Actual != "450" {
		t.Fatalf("finding %+v", ds[0])
	}
}
