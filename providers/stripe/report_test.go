package stripe

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// TestReportFindsEarlierHoldsChangedInTheWindow: holds authorized on an
// earlier day and captured, refunded, canceled or lapsed in the window are
// found through the window's balance transactions and events, listed once
// each in their current state; a partial capture's released rest (a
// partial_capture_reversal) is no customer refund; untouched old holds are
// not listed. Small pages exercise auto-pagination.
func TestReportFindsEarlierHoldsChangedInTheWindow(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	c.pageSize = 2
	ctx := t.Context()
	const earlier = 48 * time.Hour

	old := func(amount int64) providers.Hold {
		h := mustAuthorize(t, c, amount)
		e.backdate(h.Ref, earlier)
		return h
	}
	partial := old(5000)
	captured := old(9000)
	canceled := old(700)
	lapsed := old(800)
	untouched := old(600)
	from := time.Now().Add(-time.Minute)
	today := mustAuthorize(t, c, 1200)
	todayPartial := mustAuthorize(t, c, 4000)
	declinedReq := authReq(1100)
	declinedReq.PaymentMethod = "pm_card_chargeDeclined"
	declined, err := c.Authorize(ctx, declinedReq)
	wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)

	capture := func(h providers.Hold, amount int64) {
		if _, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: h.Ref, AmountMinor: amount}); err != nil {
			t.Fatalf("Capture: %v", err)
		}
	}
	capture(partial, 3000)
	capture(captured, 0)
	capture(todayPartial, 1000)
	if _, err := c.Refund(ctx, providers.RefundRequest{Key: fwdKey("refund"), Ref: captured.Ref, AmountMinor: 4000}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if _, err := c.Cancel(ctx, providers.CancelRequest{Key: fwdKey("cancel"), Ref: canceled.Ref}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	e.lapse(lapsed.Ref)
	to := time.Now().Add(time.Minute)

	type want struct {
		status                     providers.Status
		amount, captured, refunded int64
	}
	wants := map[string]want{
		partial.Ref:      {providers.StatusCaptured, 5000, 3000, 0},
		captured.Ref:     {providers.StatusPartiallyRefunded, 9000, 9000, 4000},
		canceled.Ref:     {providers.StatusCanceled, 700, 0, 0},
		lapsed.Ref:       {providers.StatusExpired, 800, 0, 0},
		today.Ref:        {providers.StatusAuthorized, 1200, 0, 0},
		todayPartial.Ref: {providers.StatusCaptured, 4000, 1000, 0},
		declined.Ref:     {providers.StatusDeclined, 1100, 0, 0},
	}
	seen := map[string]int{}
	err = c.Report(ctx, providers.ReportRequest{From: from, To: to}, func(r providers.ReportRow) error {
		seen[r.Ref]++
		w, ok := wants[r.Ref]
		if !ok {
			t.Errorf("report lists %s (%s), touched on no day of the window", r.Ref, r.Status)
			return nil
		}
		if r.Status != w.status || r.AmountMinor != w.amount || r.CapturedMinor != w.captured || r.RefundedMinor != w.refunded ||
			r.Currency != "EUR" || r.PaymentID == "" {
			t.Errorf("row %+v, want %+v in EUR with a payment id", r, w)
		}
		if r.UpdatedAt.Before(from.Truncate(time.Second)) || r.UpdatedAt.Before(r.CreatedAt) {
			t.Errorf("row %s: updated %s, created %s, want updated in the window", r.Ref, r.UpdatedAt, r.CreatedAt)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	for ref := range wants {
		if seen[ref] != 1 {
			t.Errorf("report lists %s %d times, want once", ref, seen[ref])
		}
	}
	if seen[untouched.Ref] != 0 {
		t.Errorf("report lists the untouched old hold %s", untouched.Ref)
	}
	pages := 0
	for _, r := range e.recorded("") {
		if r.Method == http.MethodGet && r.Path == "/v1/payment_intents" {
			pages++
			if r.Form.Get("limit") != "2" || r.Form.Get("expand[0]") != "data.latest_charge" {
				t.Errorf("list request %v", r.Form)
			}
		}
	}
	if pages < 2 {
		t.Errorf("%d pages of PaymentIntents read, want several", pages)
	}

	// The earlier day lists the old holds as they are now.
	day := time.Now().Add(-earlier)
	n := 0
	err = c.Report(ctx, providers.ReportRequest{From: day.Add(-time.Hour), To: day.Add(time.Hour)}, func(r providers.ReportRow) error {
		n++
		if r.Ref == untouched.Ref && r.Status != providers.StatusAuthorized {
			t.Errorf("old hold %s reads %s", r.Ref, r.Status)
		}
		return nil
	})
	if err != nil || n != 5 {
		t.Errorf("earlier day: %d rows, %v; want the 5 old holds", n, err)
	}

	// fn's error stops the report and comes back as is, whichever list
	// the row came from.
	stop := errors.New("stop")
	for _, after := range []int{1, 4, 7} {
		calls := 0
		err := c.Report(ctx, providers.ReportRequest{From: from, To: to}, func(providers.ReportRow) error {
			if calls++; calls == after {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != after {
			t.Errorf("stop after %d: %v after %d calls", after, err, calls)
		}
	}
}

// TestReportRefusesAnEmptyWindow: To not after From is a caller's bug.
func TestReportRefusesAnEmptyWindow(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	now := time.Now()
	err := c.Report(t.Context(), providers.ReportRequest{From: now, To: now}, func(providers.ReportRow) error { return nil })
	wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
}

// TestReportFailureIsClassified: a list that fails midway is a classified
// error, not a short report.
func TestReportFailureIsClassified(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	mustAuthorize(t, c, 100)
	e.arm(&emuFault{kind: faultAnswer, path: "/v1/balance_transactions", status: 500,
		body: stripeError(500, "api_error", "", "scripted", "").body})
	err := c.Report(t.Context(), providers.ReportRequest{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)},
		func(providers.ReportRow) error { return nil })
	wantKind(t, err, providers.KindUnknown, providers.CodeProviderInternalError)
}
