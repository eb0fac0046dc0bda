package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// authorizeHold authorizes 1000 EUR under key with on_expiry.
func (e *moneyEnv) authorizeHold(t *testing.T, key string, onExpiry orchestrator.OnExpiry) orchestrator.Payment {
	t.Helper()
	body := fmt.Sprintf(`{"amount_minor":1000,"currency":"EUR","on_expiry":%q}`, onExpiry)
	fp := fingerprint(t, orchestrator.OpAuthorize, nil, body)
	a := e.keyed(t, orchestrator.OpAuthorize, orchestrator.PaymentID(e.tenant, key), key, fp,
		func(ctx context.Context, c *orchestrator.Claim) (orchestrator.Outcome, error) {
			return e.svc.Authorize(ctx, c, orchestrator.AuthorizeInput{TenantID: e.tenant, Key: key, Fingerprint: fp,
				AmountMinor: 1000, Currency: "EUR", OnExpiry: onExpiry})
		})
	if a.err != nil || a.out.Payment.Status != orchestrator.StatusAuthorized || a.out.Payment.CaptureBefore == nil ||
		a.out.Payment.OnExpiry != onExpiry {
		t.Fatalf("authorize %s: %+v %v", key, a.out.Payment, a.err)
	}
	return a.out.Payment
}

// eventTypes lists payment id's outbox events, in sequence.
func (e *moneyEnv) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	rows, err := e.svc.Pool().Query(context.Background(),
		`SELECT type FROM events WHERE tenant_id = $1 AND payment_id = $2 ORDER BY sequence NULLS LAST, created_at`, e.tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// sweep runs one hold sweeper pass and fails the test on its error.
func sweep(t *testing.T, svc *orchestrator.Service) orchestrator.HoldStats {
	t.Helper()
	st, err := svc.SweepHolds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The sweeper warns once at the lead time, then, past the deadline, looks
// the hold up and records it expired: no capture attempt, no webhook, no
// reconciliation. A second pass finds nothing to do.
func TestHoldSweeperWarnsThenExpires(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	p := e.authorizeHold(t, "hold-1", orchestrator.OnExpiryNone)
	deadline := *p.CaptureBefore
	if st := sweep(t, e.svc); st != (orchestrator.HoldStats{}) {
		t.Fatalf("a fresh hold: %+v", st)
	}
	e.clk.Set(deadline.Add(-23 * time.Hour)) // within the 24 h lead
	if st := sweep(t, e.svc); st.Warned != 1 || st.Expired != 0 {
		t.Fatalf("at the lead: %+v", st)
	}
	if st := sweep(t, e.svc); st.Warned != 0 {
		t.Fatalf("warned twice: %+v", st)
	}
	e.clk.Set(deadline.Add(time.Second))
	if st := sweep(t, e.svc); st.Expired != 1 {
		t.Fatalf("past the deadline: %+v", st)
	}
	if st := sweep(t, e.svc); st != (orchestrator.HoldStats{}) {
		t.Fatalf("after the expiry: %+v", st)
	}
	got, err := e.svc.GetPayment(context.Background(), orchestrator.Scope{TenantID: e.tenant}, p.ID)
	if err != nil || got.Status != orchestrator.StatusExpired {
		t.Fatalf("payment %+v %v", got, err)
	}
	want := []string{"payment.pending", "payment.authorized", orchestrator.EventHoldExpiring, "payment.expired"}
	if g := e.eventTypes(t, p.ID); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q", g, want)
	}
	ops, err := e.fake.Operations(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Ref == *p.ProviderRef && op.Operation != fake.OpAuthorize && op.Operation != fake.OpCreate {
			t.Fatalf("the sweeper made a %s at the provider", op.Operation)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'state_changed'
		AND to_status = 'expired' AND detail->>'found_by' = 'sweeper' AND detail->>'provider_status' = 'expired'`, p.ID); n != 1 {
		t.Fatalf("%d expiry records in the history", n)
	}
}

// on_expiry capture, with two instances sweeping at once, pass after
// pass, and the first capture's answer lost (executed at the provider,
// never answered): the capture is executed at the provider exactly once,
// recorded once, and the payment ends captured before its deadline.
func TestOnExpiryCaptureOnceAcrossInstances(t *testing.T) {
	t.Parallel()
	var cfg *orchestrator.Config
	w := newConnectorWorld(t, 300*time.Millisecond, func(c *orchestrator.Config) { cfg = c }, "fake")
	other := orchestrator.NewService(*cfg) // a second instance on the same database
	e := w.newTenant(t)
	p := e.authorizeHold(t, "hold-cap", orchestrator.OnExpiryCapture)
	fwd := providers.ForwardedKey(e.tenant, orchestrator.OpCapture, orchestrator.OnExpiryKey(p.ID))
	if err := e.fake.InjectFault(context.Background(), fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultTimeoutAfterExecute,
		Count: 1, IdempotencyKey: fwd}); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(p.CaptureBefore.Add(-50 * time.Minute)) // within the 1 h action lead
	for round := 0; round < 4; round++ {
		var wg sync.WaitGroup
		for _, svc := range []*orchestrator.Service{e.svc, other, e.svc, other} {
			wg.Go(func() { sweep(t, svc) })
		}
		wg.Wait()
		e.clk.Add(2 * time.Minute) // past holdRecheck: picked again if not done
	}
	got, err := e.svc.GetPayment(context.Background(), orchestrator.Scope{TenantID: e.tenant}, p.ID)
	if err != nil || got.Status != orchestrator.StatusCaptured || got.CapturedMinor != 1000 {
		t.Fatalf("payment %+v %v", got, err)
	}
	ops, err := e.fake.Operations(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	captures := 0
	for _, op := range ops {
		if op.Ref == *p.ProviderRef && op.Operation == fake.OpCapture {
			captures++
			if op.IdempotencyKey != fwd {
				t.Fatalf("a capture under %q, want the on_expiry key %q", op.IdempotencyKey, fwd)
			}
		}
	}
	if captures != 1 {
		t.Fatalf("%d captures executed at the provider, want 1", captures)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_operations WHERE payment_id = $1`, p.ID); n != 1 {
		t.Fatalf("%d operations recorded, want 1", n)
	}
	// The lost answer made a later pass start the action again: the test
	// saw the race it is about.
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'provider_call'
		AND operation = 'capture'`, p.ID); n < 2 {
		t.Fatalf("%d capture calls recorded, want the lost one and its retry", n)
	}
}

// on_expiry cancel voids once, whichever of two instances gets there; a
// payment the merchant captured first is left alone.
func TestOnExpiryCancelOnceAndNotAfterACapture(t *testing.T) {
	t.Parallel()
	var cfg *orchestrator.Config
	w := newConnectorWorld(t, 0, func(c *orchestrator.Config) { cfg = c }, "fake")
	other := orchestrator.NewService(*cfg)
	e := w.newTenant(t)
	voided := e.authorizeHold(t, "hold-cancel", orchestrator.OnExpiryCancel)
	kept := e.authorizeHold(t, "hold-kept", orchestrator.OnExpiryCancel)
	if a := e.capture(t, kept.ID, "merchant-capture", `{}`); a.err != nil {
		t.Fatal(a.err)
	}
	e.clk.Set(voided.CaptureBefore.Add(-30 * time.Minute))
	var wg sync.WaitGroup
	for _, svc := range []*orchestrator.Service{e.svc, other} {
		wg.Go(func() { sweep(t, svc) })
	}
	wg.Wait()
	for id, want := range map[string]orchestrator.Status{voided.ID: orchestrator.StatusCanceled, kept.ID: orchestrator.StatusCaptured} {
		got, err := e.svc.GetPayment(context.Background(), orchestrator.Scope{TenantID: e.tenant}, id)
		if err != nil || got.Status != want {
			t.Fatalf("payment %s: %+v %v, want %s", id, got.Status, err, want)
		}
	}
	ops, err := e.fake.Operations(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	cancels := 0
	for _, op := range ops {
		if op.Operation == fake.OpCancel {
			cancels++
		}
	}
	if cancels != 1 {
		t.Fatalf("%d cancels executed at the provider, want 1", cancels)
	}
}

// An extension moves the deadline at the provider and here, announces it,
// and clears the warning so a new one comes before the new deadline; a
// payment not authorized is refused, and nothing moves.
func TestExtendHold(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	ctx := context.Background()
	p := e.authorizeHold(t, "hold-ext", orchestrator.OnExpiryNone)
	old := *p.CaptureBefore
	e.clk.Set(old.Add(-2 * time.Hour))
	if st := sweep(t, e.svc); st.Warned != 1 {
		t.Fatalf("warned %+v", st)
	}
	out, err := e.svc.Extend(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: p.ID, Key: "ext-1"})
	if err != nil || out.Payment.CaptureBefore == nil || !out.Payment.CaptureBefore.After(old) ||
		out.Payment.Status != orchestrator.StatusAuthorized {
		t.Fatalf("extend: %+v %v", out.Payment, err)
	}
	hold, err := e.fake.Lookup(ctx, *p.ProviderRef)
	if err != nil || !hold.CaptureBefore.Equal(*out.Payment.CaptureBefore) {
		t.Fatalf("the provider's deadline %v, ours %v (%v)", hold.CaptureBefore, out.Payment.CaptureBefore, err)
	}
	// A new warning before the new deadline, and no expiry at the old one.
	e.clk.Set(old.Add(time.Minute))
	if st := sweep(t, e.svc); st != (orchestrator.HoldStats{}) {
		t.Fatalf("at the old deadline: %+v", st)
	}
	e.clk.Set(out.Payment.CaptureBefore.Add(-time.Hour))
	if st := sweep(t, e.svc); st.Warned != 1 {
		t.Fatalf("before the new deadline: %+v", st)
	}
	want := []string{"payment.pending", "payment.authorized", orchestrator.EventHoldExpiring, orchestrator.EventHoldExtended,
		orchestrator.EventHoldExpiring}
	if g := e.eventTypes(t, p.ID); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q", g, want)
	}

	captured := e.captured(t, "hold-ext-captured", 500)
	before := e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1`, captured.ID)
	_, err = e.svc.Extend(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: captured.ID, Key: "ext-2"})
	if orchestrator.ErrorCode(err) != orchestrator.CodePaymentStateConflict {
		t.Fatalf("extend a captured payment: %v", err)
	}
	if after := e.count(t, `SELECT count(*) FROM events WHERE payment_id = $1`, captured.ID); after != before {
		t.Fatalf("a refused extension wrote %d events", after-before)
	}
	if _, err := e.svc.Extend(ctx, nil, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: "pay_" + fmt.Sprintf("%032x", 1),
		Key: "ext-3"}); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Fatalf("extend an unknown payment: %v", err)
	}
}

// The provider's hold.expired webhook comes first: the payment is expired
// at once, and the sweeper's next pass finds nothing to do (no look-up, no
// second state change). Without the webhook (dropped), the sweeper's first
// pass past the deadline does it (TestHoldSweeperWarnsThenExpires).
func TestHoldExpiryByWebhookThenSweeperFindsNothing(t *testing.T) {
	t.Parallel()
	e := newInboundWorld(t, 0).newTenant(t)
	p := e.authorizeHold(t, "hold-webhook", orchestrator.OnExpiryNone)
	e.clk.Set(p.CaptureBefore.Add(time.Second))
	e.deliverEvent(t, event(p, "hold.expired", 1000), "applied")
	calls := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'provider_call'`, p.ID)
	if st := sweep(t, e.svc); st != (orchestrator.HoldStats{}) {
		t.Fatalf("the sweeper after the webhook: %+v", st)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'provider_call'`, p.ID); n != calls {
		t.Fatalf("the sweeper called the provider %d times", n-calls)
	}
	if n := e.count(t, `SELECT count(*) FROM payment_events WHERE payment_id = $1 AND type = 'state_changed' AND to_status = 'expired'`, p.ID); n != 1 {
		t.Fatalf("%d expiries recorded", n)
	}
}
