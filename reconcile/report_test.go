package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// One bad row of the provider's record is one invalid_provider_row
// discrepancy (its reference made printable, the reason given) and the
// rest of the day is reconciled as usual; it never fails the run.
func TestABadProviderRowIsADiscrepancyNotAFailedDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noon := dayStart.Add(12 * time.Hour)
	// added is a row the provider has and we do not; mangle spoils the
	// provider's row of one of our payments.
	for _, tc := range []struct {
		name, field, reason string
		added               *fake.Row
		mangle              func(*providers.ReportRow)
		wantRef             string
		// partsOnly: the row is staged without its parts, its totals
		// compared (they agree), so our payment is not missing.
		partsOnly bool
	}{
		{name: "NULInReference", field: "ref", reason: "contains a NUL byte", wantRef: "fh_bad\uFFFDrow",
			added: &fake.Row{Ref: "fh_bad\x00row", Status: providers.StatusCaptured, AmountMinor: 999, CapturedMinor: 999,
				Currency: "EUR", CreatedAt: noon, UpdatedAt: noon}},
		{name: "NULInPaymentID", field: "payment_id", reason: "contains a NUL byte", wantRef: "fh_nul_pid",
			added: &fake.Row{Ref: "fh_nul_pid", PaymentID: "pay_\x00", Status: providers.StatusCaptured, AmountMinor: 999,
				CapturedMinor: 999, Currency: "EUR", CreatedAt: noon, UpdatedAt: noon}},
		{name: "InvalidUTF8InStatus", field: "status", reason: "not valid UTF-8",
			mangle: func(r *providers.ReportRow) { r.Status = "capt\xffured" }},
		{name: "InvalidUTF8InReference", field: "ref", reason: "not valid UTF-8",
			mangle: func(r *providers.ReportRow) { r.Ref += "\xc3\x28" }},
		{name: "NegativeAmount", field: "captured_minor", reason: "negative",
			mangle: func(r *providers.ReportRow) { r.CapturedMinor = -5 }},
		{name: "NoCurrencyCode", field: "currency", reason: "not a currency code",
			mangle: func(r *providers.ReportRow) { r.Currency = "EU\x00" }},
		{name: "ImpossibleTime", field: "created_at", reason: "out of range",
			mangle: func(r *providers.ReportRow) { r.CreatedAt = time.Time{} }},
		// The victim's one part, its capture.
		{name: "NULInPartKey", field: "parts", partsOnly: true, reason: "part 1: key contains a NUL byte",
			mangle: func(r *providers.ReportRow) { r.Parts[0].IdempotencyKey += "\x00" }},
		{name: "UnknownPartKind", field: "parts", partsOnly: true, reason: "part 1: unknown kind",
			mangle: func(r *providers.ReportRow) { r.Parts[0].Kind = "refund" }},
		{name: "NegativePartAmount", field: "parts", partsOnly: true, reason: "part 1: negative amount",
			mangle: func(r *providers.ReportRow) { r.Parts[0].AmountMinor = -1 }},
		{name: "ImpossiblePartTime", field: "parts", partsOnly: true, reason: "part 1: time out of range",
			mangle: func(r *providers.ReportRow) { r.Parts[0].CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{name: "TooManyParts", field: "parts", partsOnly: true, reason: "1001 parts",
			mangle: func(r *providers.ReportRow) { r.Parts = make([]providers.ReportPart, 1001) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			ps := e.aDay(t)
			victim := e.pay(t, 2000, "EUR", "", "capture:0")
			want := reconcile.InvalidProviderRow + "/" + tc.field
			rows := int64(len(ps) + 2) // the day, the victim, the added row
			if tc.added != nil {
				if err := e.fc.Drift(ctx, fake.Drift{Kind: fake.DriftAdd, Row: tc.added}); err != nil {
					t.Fatal(err)
				}
			} else {
				prov := reportHook{Provider: e.fc, hook: func(_ context.Context, r *providers.ReportRow) error {
					if r.Ref == *victim.ProviderRef {
						tc.mangle(r)
					}
					return nil
				}}
				e.rec = reconcile.New(reconcile.Config{Pool: e.pool, Providers: map[string]providers.Provider{"fake": prov},
					Clock: e.clk.Now})
				if !tc.partsOnly {
					// Our payment lost its only provider row.
					want += "," + reconcile.MissingAtProvider + "/"
				}
				rows-- // no row added
			}
			run, ds := e.run(t)
			if got := categories(ds); got != want {
				t.Fatalf("discrepancies %q, want %q", got, want)
			}
			if run.ProviderCount != rows {
				t.Fatalf("provider count %d, want %d: the bad row counts", run.ProviderCount, rows)
			}
			for _, d := range ds {
				if d.Category != reconcile.InvalidProviderRow {
					continue
				}
				if d.Detail["reason"] != tc.reason || d.ProviderRef == nil || !utf8.ValidString(*d.ProviderRef) ||
					strings.ContainsRune(*d.ProviderRef, 0) || !utf8.ValidString(d.Actual) || strings.ContainsRune(d.Actual, 0) {
					t.Fatalf("invalid row discrepancy %+v (ref %q)", d, deref(d.ProviderRef))
				}
				if tc.wantRef != "" && *d.ProviderRef != tc.wantRef {
					t.Fatalf("ref %q, want %q", *d.ProviderRef, tc.wantRef)
				}
				if tc.mangle != nil && !strings.HasPrefix(*d.ProviderRef, *victim.ProviderRef) {
					t.Fatalf("ref %q, want the victim's %q", *d.ProviderRef, *victim.ProviderRef)
				}
			}
			// It is the same finding in the next version.
			again, _ := e.run(t)
			if again.Diff.StillOpen != int64(len(ds)) || again.Diff.New != 0 || again.Diff.Gone != 0 {
				t.Fatalf("re-run diff %+v, want %d still open", again.Diff, len(ds))
			}
		})
	}
}
