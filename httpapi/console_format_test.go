package httpapi

import (
	"math"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

func TestFormatMinor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{123456, "EUR", "1,234.56\u00a0EUR"},
		{5, "EUR", "0.05\u00a0EUR"},
		{0, "usd", "0.00\u00a0USD"},
		{-44, "EUR", "−0.44\u00a0EUR"},
		{500, "JPY", "500\u00a0JPY"},
		{1234567, "JPY", "1,234,567\u00a0JPY"},
		{1234, "KWD", "1.234\u00a0KWD"},
		{7, "KWD", "0.007\u00a0KWD"},
		{math.MaxInt64, "EUR", "92,233,720,368,547,758.07\u00a0EUR"},
		{math.MinInt64, "EUR", "−92,233,720,368,547,758.08\u00a0EUR"},
	} {
		if got := formatMinor(tc.minor, tc.currency); got != tc.want {
			t.Errorf("formatMinor(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}

func TestConsoleWaitingSpans(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, tc := range []struct {
		expires *time.Time
		want    string
	}{
		{nil, ""},
		{at(-time.Second), "due now"},
		{at(0), "due now"},
		{at(time.Second), "in 1m"},
		{at(26 * time.Minute), "in 26m"},
		{at(26*time.Minute - time.Microsecond), "in 26m"},
		{at(26*time.Minute + time.Second), "in 27m"},
		{at(2*time.Hour + 5*time.Minute), "in 2h 05m"},
	} {
		if got := abandonIn(tc.expires, now); got != tc.want {
			t.Errorf("abandonIn(%v) = %q, want %q", tc.expires, got, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{0: "<1m", 59 * time.Second: "<1m", 4*time.Minute + 59*time.Second: "4m",
		time.Hour: "1h 00m", 25*time.Hour + 3*time.Minute: "25h 03m"} {
		if got := formatSpan(d); got != want {
			t.Errorf("formatSpan(%v) = %q, want %q", d, got, want)
		}
	}
}

// A state change made by an operation reads as what the operation did;
// any other event, or a detail that is not an operation's, is left to
// the detail's JSON.
func TestConsoleOperationChange(t *testing.T) {
	t.Parallel()
	status := func(s orchestrator.Status) *string { v := string(s); return &v }
	ev := func(to orchestrator.Status, detail map[string]any) orchestrator.Event {
		return orchestrator.Event{Type: "state_changed", FromStatus: status(orchestrator.StatusAuthorized), ToStatus: status(to),
			Detail: detail}
	}
	for _, tc := range []struct {
		ev   orchestrator.Event
		want string
	}{
		{ev(orchestrator.StatusAuthorized, map[string]any{"operation_id": "cap_01", "amount_minor": 300.0}), "Captured a part: 3.00\u00a0EUR"},
		{ev(orchestrator.StatusCaptured, map[string]any{"operation_id": "cap_02", "amount_minor": 400.0}), "Captured 4.00\u00a0EUR"},
		{ev(orchestrator.StatusAuthorized, map[string]any{"operation_id": "inc_03", "amount_minor": 1400.0}), "Raised the hold to 14.00\u00a0EUR"},
		{ev(orchestrator.StatusCanceled, map[string]any{"operation_id": "cnl_04", "amount_minor": 0.0}), "Canceled the hold"},
		{ev(orchestrator.StatusRefunded, map[string]any{"operation_id": "re_05", "amount_minor": 1200.0,
			"source": "provider_webhook", "provider_event_id": "evt_1"}), "Refunded 12.00\u00a0EUR, made at the provider"},
		{ev(orchestrator.StatusCaptured, map[string]any{"operation_id": "cap_06", "amount_minor": 1.5}), ""},
		{ev(orchestrator.StatusCaptured, map[string]any{"operation_id": "cap_07", "amount_minor": "400"}), ""},
		{ev(orchestrator.StatusCaptured, map[string]any{"operation_id": "dsp_08", "amount_minor": 400.0}), ""},
		{ev(orchestrator.StatusExpired, map[string]any{"capture_before": "2026-01-01T00:00:00Z"}), ""},
		{orchestrator.Event{Type: "provider_call", Detail: map[string]any{"operation_id": "cap_09", "amount_minor": 400.0}}, ""},
	} {
		got := operationChange(tc.ev, "EUR")
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%v: %q, want none", tc.ev.Detail, got.Text)
		case tc.want != "" && (got == nil || got.Text != tc.want || got.OperationID != tc.ev.Detail["operation_id"]):
			t.Errorf("%v: %+v, want %q", tc.ev.Detail, got, tc.want)
		}
	}
}

// The amounts of amount_mismatch, part_mismatch, fee_mismatch,
// payout_unexplained and the bank's categories show as money; a side a part is absent from, and the
// values of other categories, as they are.
func TestConsoleDiscrepancyValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		category, currency, v, want string
	}{
		{reconcile.AmountMismatch, "EUR", "1050", "10.50\u00a0EUR"},
		{reconcile.PartMismatch, "EUR", "45000", "450.00\u00a0EUR"},
		{reconcile.PartMismatch, "EUR", "absent", "absent"},
		{reconcile.StatusMismatch, "EUR", "1050", "1050"},
		{reconcile.PartMismatch, "", "1050", "1050"},
		{reconcile.FeeMismatch, "EUR", "39", "0.39\u00a0EUR"},
		{reconcile.PayoutUnexplained, "EUR", "582400", "5,824.00\u00a0EUR"},
		{reconcile.NotPaidOut, "EUR", "none", "none"},
		{reconcile.PayoutMissingInBank, "EUR", "582400", "5,824.00\u00a0EUR"},
		{reconcile.PayoutMissingInBank, "EUR", "absent", "absent"},
		{reconcile.PayoutAmountMismatch, "GBP", "4499", "44.99\u00a0GBP"},
		{reconcile.BankCreditUnmatched, "JPY", "77777", "77,777\u00a0JPY"},
		{reconcile.BankCreditUnmatched, "EUR", "a payout", "a payout"},
		{reconcile.PayoutItemUnknown, "EUR", "1050", "1050"},
	} {
		d := reconcile.Discrepancy{Category: tc.category, Currency: tc.currency}
		if got := discrepancyValue(d, tc.v); got != tc.want {
			t.Errorf("%s %s %q: %q, want %q", tc.category, tc.currency, tc.v, got, tc.want)
		}
	}
}
