package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

func testReportListsTheDaysHolds(t *testing.T, s *suite) {
	from := time.Now().Add(-time.Minute).Truncate(time.Second)

	want := map[string]providers.ReportRow{}
	expect := func(h providers.Hold, status providers.Status, captured, refunded int64) {
		want[h.Ref] = providers.ReportRow{Ref: h.Ref, PaymentID: h.PaymentID, Status: status,
			AmountMinor: h.AmountMinor, CapturedMinor: captured, RefundedMinor: refunded, Currency: h.Currency}
	}
	authorized := s.authorize(t, 3000)
	expect(authorized, providers.StatusAuthorized, 0, 0)

	captured := s.authorize(t, 5000)
	s.capture(t, captured, 2000)
	expect(captured, providers.StatusCaptured, 2000, 0)

	canceled := s.authorize(t, 700)
	if _, err := s.p.Cancel(s.ctx, providers.CancelRequest{Key: s.key(OpCancel), Ref: canceled.Ref}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	expect(canceled, providers.StatusCanceled, 0, 0)

	refunded := s.authorize(t, 9000)
	s.capture(t, refunded, 0)
	if _, err := s.p.Refund(s.ctx, providers.RefundRequest{Key: s.key(OpRefund), Ref: refunded.Ref, AmountMinor: 4000}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	expect(refunded, providers.StatusPartiallyRefunded, 9000, 4000)

	req := s.authorizeReq(1100)
	req.PaymentMethod = s.h.DeclinedMethod
	var declinedRef string
	req.OnReference = func(_ context.Context, ref string) error { declinedRef = ref; return nil }
	if _, err := s.p.Authorize(s.ctx, req); providers.KindOf(err) != providers.KindDeclined || declinedRef == "" {
		t.Fatalf("declined Authorize: %v (reference %q)", err, declinedRef)
	}
	expect(providers.Hold{Ref: declinedRef, PaymentID: req.PaymentID, AmountMinor: 1100, Currency: req.Currency},
		providers.StatusDeclined, 0, 0)

	to := time.Now().Add(time.Minute)
	total := checkReportRows(t, s, from, to, want)

	// A day before the holds existed lists none of them.
	err := s.p.Report(s.ctx, providers.ReportRequest{From: from.Add(-48 * time.Hour), To: from.Add(-24 * time.Hour)},
		func(r providers.ReportRow) error {
			if _, ok := want[r.Ref]; ok {
				t.Errorf("yesterday's report lists today's hold %s", r.Ref)
			}
			return nil
		})
	if err != nil {
		t.Fatalf("Report of yesterday: %v", err)
	}

	// Report stops at fn's first error and returns it.
	stop := errors.New("stop here")
	calls := 0
	err = s.p.Report(s.ctx, providers.ReportRequest{From: from, To: to}, func(providers.ReportRow) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Report with a failing fn: %v after %d calls, want %v after 1", err, calls, stop)
	}
	if total < len(want) {
		t.Errorf("report has %d rows, fewer than the %d holds made", total, len(want))
	}
}

// checkReportRows checks that the report of [from, to) lists each of
// want's holds once, as want has it, and returns how many rows it listed.
func checkReportRows(t *testing.T, s *suite, from, to time.Time, want map[string]providers.ReportRow) int {
	t.Helper()
	got := map[string][]providers.ReportRow{}
	total := 0
	err := s.p.Report(s.ctx, providers.ReportRequest{From: from, To: to}, func(r providers.ReportRow) error {
		total++
		if _, ok := want[r.Ref]; ok {
			got[r.Ref] = append(got[r.Ref], r)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	for ref, w := range want {
		rows := got[ref]
		if len(rows) != 1 {
			t.Errorf("report lists hold %s %d times, want once", ref, len(rows))
			continue
		}
		r := rows[0]
		if r.PaymentID != w.PaymentID || r.Status != w.Status || r.AmountMinor != w.AmountMinor ||
			r.CapturedMinor != w.CapturedMinor || r.RefundedMinor != w.RefundedMinor || r.Currency != w.Currency {
			t.Errorf("report row %+v, want %+v", r, w)
		}
		if r.CreatedAt.Before(from) || !r.CreatedAt.Before(to) || r.UpdatedAt.Before(r.CreatedAt) {
			t.Errorf("report row %s: created %s updated %s, want created in [%s, %s) and updated after",
				ref, r.CreatedAt, r.UpdatedAt, from, to)
		}
	}
	return total
}
