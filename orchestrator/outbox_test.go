package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// events returns payment id's own events (its states and attempts) in
// their sequence (the test clock stands still, so their times are equal).
func (e *moneyEnv) events(t *testing.T, id string) []orchestrator.WebhookEvent {
	t.Helper()
	evs := slices.DeleteFunc(e.allEvents(t, id), func(ev orchestrator.WebhookEvent) bool { return ev.Sequence == nil })
	slices.SortFunc(evs, func(a, b orchestrator.WebhookEvent) int { return *a.Sequence - *b.Sequence })
	return evs
}

// allEvents returns every event about payment id: its own and its
// operations', newest first.
func (e *moneyEnv) allEvents(t *testing.T, id string) []orchestrator.WebhookEvent {
	t.Helper()
	evs, _, err := e.svc.ListEvents(context.Background(), orchestrator.Scope{TenantID: e.tenant},
		orchestrator.EventFilter{PaymentID: id, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	shared := newConnectorWorld(t, 0, nil, "fake_a", "fake_b")

	// Each state change writes one event, numbered in order, carrying the
	// payment as the change left it; the last one is the payment now.
	t.Run("EveryStateChangeWritesOneEventInOrder", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "o1", 1000)
		if a := e.capture(t, p.ID, "o1-c", `{"amount_minor":600}`); a.err != nil {
			t.Fatal(a.err)
		}
		if a := e.refund(t, p.ID, "o1-r", `{"amount_minor":100}`); a.err != nil {
			t.Fatal(a.err)
		}
		evs := e.events(t, p.ID)
		var got []string
		for i, ev := range evs {
			got = append(got, fmt.Sprintf("%d %s", *ev.Sequence, ev.Type))
			if *ev.Sequence != i+1 || ev.TenantID == nil || *ev.TenantID != e.tenant || *ev.PaymentID != p.ID || ev.Object != "event" {
				t.Fatalf("event %d: %+v", i, ev)
			}
			var snap orchestrator.Payment
			if err := json.Unmarshal(ev.Data, &snap); err != nil {
				t.Fatal(err)
			}
			if "payment."+string(snap.Status) != ev.Type {
				t.Fatalf("event %s carries a payment %s", ev.Type, snap.Status)
			}
		}
		want := []string{"1 payment.pending", "2 payment.authorized", "3 payment.captured", "4 payment.partially_refunded"}
		if !slices.Equal(got, want) {
			t.Fatalf("events:\n got  %q\n want %q", got, want)
		}
		var last orchestrator.Payment
		_ = json.Unmarshal(evs[len(evs)-1].Data, &last)
		last.Object = "payment"
		sameJSON(t, "last event's payment", last, e.payment(t, p.ID))
		// The capture and the refund ended: an event each, about them.
		var ops []string
		for _, ev := range e.allEvents(t, p.ID) {
			if ev.Sequence == nil {
				var op struct {
					Object      string `json:"object"`
					AmountMinor int64  `json:"amount_minor"`
					Currency    string `json:"currency"`
				}
				_ = json.Unmarshal(ev.Data, &op)
				ops = append(ops, fmt.Sprintf("%s %s %d %s", ev.Type, op.Object, op.AmountMinor, op.Currency))
			}
		}
		slices.Sort(ops)
		if want := []string{"capture.succeeded capture 600 EUR", "refund.succeeded refund 100 EUR"}; !slices.Equal(ops, want) {
			t.Fatalf("operation events %q, want %q", ops, want)
		}
		one, err := e.svc.GetEvent(context.Background(), orchestrator.Scope{TenantID: e.tenant}, evs[0].ID)
		if err != nil || one.ID != evs[0].ID || one.Type != "payment.pending" {
			t.Fatalf("get event: %+v %v", one, err)
		}
		// Another tenant sees none of them.
		if _, err := e.svc.GetEvent(context.Background(), orchestrator.Scope{TenantID: e.tenant + 1000}, evs[0].ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("another tenant's read: %v", err)
		}
	})

	t.Run("AFailoverIsAnEvent", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		e.routeVia(t, "fake_a", "fake_b")
		e.armAt(t, "fake_a", "o2", 1, fake.Fault{Operation: fake.OpCreate, Kind: fake.FaultErrorBeforeExecute})
		a := e.authorize(t, "o2", `{"amount_minor":1000,"currency":"EUR"}`)
		if a.err != nil {
			t.Fatal(a.err)
		}
		var got []string
		for _, ev := range e.events(t, a.out.Payment.ID) {
			got = append(got, ev.Type)
		}
		if want := []string{"payment.pending", "payment.attempt_started", "payment.authorized"}; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})

	// A change that rolls back leaves no event: the event is written by
	// the change's own transaction.
	t.Run("NoEventForAChangeThatRolledBack", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.authorized(t, "o3", 1000)
		before := len(e.events(t, p.ID))
		ctx := context.Background()
		tx, err := e.svc.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'canceled' WHERE tenant_id = $1 AND id = $2`, e.tenant, p.ID); err != nil {
			t.Fatal(err)
		}
		var inside int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE payment_id = $1`, p.ID).Scan(&inside); err != nil || inside != before+1 {
			t.Fatalf("inside the transaction: %d events (%v), want %d", inside, err, before+1)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(e.events(t, p.ID)); n != before {
			t.Fatalf("%d events after the rollback, want %d", n, before)
		}
	})

	// A refund the provider refuses ends failed: one refund.failed event,
	// and the payment's own events do not move.
	t.Run("AFailedRefundIsAnEvent", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		p := e.captured(t, "o4", 1000)
		before := len(e.events(t, p.ID))
		// 900 of it was refunded at the provider behind our back: it
		// refuses to refund 300 more.
		if _, err := e.fake.Refund(context.Background(), providers.RefundRequest{Key: "behind-our-back", Ref: *p.ProviderRef,
			AmountMinor: 900}); err != nil {
			t.Fatal(err)
		}
		if a := e.refund(t, p.ID, "o4-r", `{"amount_minor":300}`); a.err == nil {
			t.Fatalf("refund of a canceled hold: %+v", a.out)
		}
		var failed []string
		for _, ev := range e.allEvents(t, p.ID) {
			if ev.Type == "refund.failed" {
				failed = append(failed, string(ev.Data))
			}
		}
		if len(failed) != 1 || len(e.events(t, p.ID)) != before {
			t.Fatalf("refund.failed events %q; payment events %d, were %d", failed, len(e.events(t, p.ID)), before)
		}
	})

	t.Run("BadFiltersAreRefused", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		ctx := context.Background()
		sc := orchestrator.Scope{TenantID: e.tenant}
		for _, c := range []struct {
			f     orchestrator.EventFilter
			param string
		}{
			{orchestrator.EventFilter{Type: "payment.nope"}, "type"},
			{orchestrator.EventFilter{Limit: 101}, "limit"},
			{orchestrator.EventFilter{StartingAfter: "evt_00000000000000000000000000000000"}, "starting_after"},
		} {
			_, _, err := e.svc.ListEvents(ctx, sc, c.f)
			wantRefusal(t, err, orchestrator.CodeValidationFailed, c.param)
		}
	})
}
