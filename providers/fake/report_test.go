package fake_test

import (
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// report reads the whole report of [from, to).
func report(t *testing.T, c *fake.Client, from, to time.Time) []providers.ReportRow {
	t.Helper()
	var rows []providers.ReportRow
	err := c.Report(t.Context(), providers.ReportRequest{From: from, To: to}, func(r providers.ReportRow) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	return rows
}

// byRef groups rows by reference.
func byRef(rows []providers.ReportRow) map[string][]providers.ReportRow {
	m := map[string][]providers.ReportRow{}
	for _, r := range rows {
		m[r.Ref] = append(m[r.Ref], r)
	}
	return m
}

var day = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// seedDay seeds the holds fh_a ... fh_e (payments pay_a ... pay_e) created
// during day and returns the report's rows for them.
func seedDay(t *testing.T, s *fake.Server) map[string][]providers.ReportRow {
	t.Helper()
	want := map[string][]providers.ReportRow{}
	for i, sh := range []fake.SeedHold{
		{Status: providers.StatusCaptured, AmountMinor: 1000, CapturedMinor: 1000},
		{Status: providers.StatusAuthorized, AmountMinor: 2000},
		{Status: providers.StatusPartiallyRefunded, AmountMinor: 3000, CapturedMinor: 3000, RefundedMinor: 100},
		{Status: providers.StatusCanceled, AmountMinor: 4000},
		{Status: providers.StatusAuthorized, AmountMinor: 5000},
	} {
		name := string(rune('a' + i))
		sh.Ref, sh.PaymentID, sh.TenantID, sh.Currency = "fh_"+name, "pay_"+name, 1, "EUR"
		sh.CreatedAt = day.Add(time.Duration(i+1) * time.Hour)
		if _, err := s.Seed(sh); err != nil {
			t.Fatalf("Seed: %v", err)
		}
		want[sh.Ref] = []providers.ReportRow{{
			Ref: sh.Ref, PaymentID: sh.PaymentID, Status: sh.Status, AmountMinor: sh.AmountMinor,
			CapturedMinor: sh.CapturedMinor, RefundedMinor: sh.RefundedMinor, Currency: sh.Currency,
			CreatedAt: sh.CreatedAt, UpdatedAt: sh.CreatedAt,
		}}
	}
	return want
}

// sameRows compares reports grouped by reference.
func sameRows(t *testing.T, got, want map[string][]providers.ReportRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("report has %d references, want %d", len(got), len(want))
	}
	for ref, w := range want {
		g := got[ref]
		if len(g) != len(w) {
			t.Errorf("report lists %s %d times, want %d", ref, len(g), len(w))
			continue
		}
		for i := range w {
			if g[i].PaymentID != w[i].PaymentID || g[i].Status != w[i].Status || g[i].AmountMinor != w[i].AmountMinor ||
				g[i].CapturedMinor != w[i].CapturedMinor || g[i].RefundedMinor != w[i].RefundedMinor ||
				g[i].Currency != w[i].Currency || !g[i].CreatedAt.Equal(w[i].CreatedAt) || !g[i].UpdatedAt.Equal(w[i].UpdatedAt) {
				t.Errorf("row %+v, want %+v", g[i], w[i])
			}
		}
	}
}

func TestReportDrift(t *testing.T) {
	t.Parallel()
	stranger := fake.Row{Ref: "fh_stranger", PaymentID: "pay_x", Status: providers.StatusCaptured,
		AmountMinor: 10, CapturedMinor: 10, Currency: "EUR", CreatedAt: day.Add(20 * time.Hour)}
	for _, tc := range []struct {
		name  string
		drift fake.Drift
		edit  func(m map[string][]providers.ReportRow)
	}{
		{"AmountAuthorized", fake.Drift{Kind: fake.DriftAmount, Ref: "fh_a", Field: fake.AmountAuthorized, AmountMinor: 999},
			func(m map[string][]providers.ReportRow) { m["fh_a"][0].AmountMinor = 999 }},
		{"AmountCaptured", fake.Drift{Kind: fake.DriftAmount, Ref: "fh_a", Field: fake.AmountCaptured, AmountMinor: 5},
			func(m map[string][]providers.ReportRow) { m["fh_a"][0].CapturedMinor = 5 }},
		{"AmountRefunded", fake.Drift{Kind: fake.DriftAmount, Ref: "fh_c", Field: fake.AmountRefunded, AmountMinor: 0},
			func(m map[string][]providers.ReportRow) { m["fh_c"][0].RefundedMinor = 0 }},
		{"Status", fake.Drift{Kind: fake.DriftStatus, Ref: "fh_b", Status: providers.StatusCaptured},
			func(m map[string][]providers.ReportRow) { m["fh_b"][0].Status = providers.StatusCaptured }},
		{"StatusByPaymentID", fake.Drift{Kind: fake.DriftStatus, PaymentID: "pay_e", Status: providers.StatusCanceled},
			func(m map[string][]providers.ReportRow) { m["fh_e"][0].Status = providers.StatusCanceled }},
		{"Currency", fake.Drift{Kind: fake.DriftCurrency, Ref: "fh_c", Currency: "USD"},
			func(m map[string][]providers.ReportRow) { m["fh_c"][0].Currency = "USD" }},
		{"Drop", fake.Drift{Kind: fake.DriftDrop, Ref: "fh_d"},
			func(m map[string][]providers.ReportRow) { delete(m, "fh_d") }},
		{"Duplicate", fake.Drift{Kind: fake.DriftDuplicate, Ref: "fh_e"},
			func(m map[string][]providers.ReportRow) { m["fh_e"] = append(m["fh_e"], m["fh_e"][0]) }},
		{"Add", fake.Drift{Kind: fake.DriftAdd, Row: &stranger},
			func(m map[string][]providers.ReportRow) {
				r := stranger.ReportRow()
				r.UpdatedAt = r.CreatedAt
				m[r.Ref] = []providers.ReportRow{r}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, c := start(t, fake.Config{Clock: func() time.Time { return day.Add(23 * time.Hour) }})
			want := seedDay(t, r.Server())
			baseline := byRef(report(t, c, day, day.Add(24*time.Hour)))
			sameRows(t, baseline, want)

			if err := c.Drift(t.Context(), tc.drift); err != nil {
				t.Fatalf("Drift: %v", err)
			}
			drifted := seedDayCopy(want)
			tc.edit(drifted)
			sameRows(t, byRef(report(t, c, day, day.Add(24*time.Hour))), drifted)
			// The drift is in the report only, never in the holds.
			for ref, rows := range want {
				h, err := c.Lookup(t.Context(), ref)
				if err != nil || h.Status != rows[0].Status || h.AmountMinor != rows[0].AmountMinor ||
					h.CapturedMinor != rows[0].CapturedMinor || h.Currency != rows[0].Currency {
					t.Errorf("Lookup(%s) = %+v, %v; the drift leaked into the hold", ref, h, err)
				}
			}

			if err := c.ClearDrift(t.Context()); err != nil {
				t.Fatalf("ClearDrift: %v", err)
			}
			sameRows(t, byRef(report(t, c, day, day.Add(24*time.Hour))), want)
		})
	}
}

// seedDayCopy deep-copies a grouped report.
func seedDayCopy(m map[string][]providers.ReportRow) map[string][]providers.ReportRow {
	out := make(map[string][]providers.ReportRow, len(m))
	for k, v := range m {
		out[k] = append([]providers.ReportRow(nil), v...)
	}
	return out
}

func TestInvalidDriftIsRejected(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	seedDay(t, r.Server())
	for name, tc := range map[string]struct {
		drift fake.Drift
		code  string
	}{
		"UnknownRef":       {fake.Drift{Kind: fake.DriftDrop, Ref: "fh_nobody"}, providers.CodeNotFound},
		"UnknownPaymentID": {fake.Drift{Kind: fake.DriftDrop, PaymentID: "pay_nobody"}, providers.CodeNotFound},
		"NoSelector":       {fake.Drift{Kind: fake.DriftDuplicate}, providers.CodeInvalidRequest},
		"UnknownKind":      {fake.Drift{Kind: "shuffle", Ref: "fh_a"}, providers.CodeInvalidRequest},
		"UnknownField":     {fake.Drift{Kind: fake.DriftAmount, Ref: "fh_a", Field: "fees"}, providers.CodeInvalidRequest},
		"UnknownStatus":    {fake.Drift{Kind: fake.DriftStatus, Ref: "fh_a", Status: "lost"}, providers.CodeInvalidRequest},
		"BadCurrency":      {fake.Drift{Kind: fake.DriftCurrency, Ref: "fh_a", Currency: "euro"}, providers.CodeInvalidRequest},
		"AddWithoutRow":    {fake.Drift{Kind: fake.DriftAdd}, providers.CodeInvalidRequest},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantKind(t, c.Drift(t.Context(), tc.drift), providers.KindRejected, tc.code)
		})
	}
}

func TestReportListsHoldsChangedInTheWindow(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(day.Add(time.Hour))
	_, c := start(t, fake.Config{Clock: clk.Now})
	changed := authorize(t, c, 1000) // day 1, captured on day 2
	quiet := authorize(t, c, 2000)   // day 1 only
	clk.Add(24 * time.Hour)
	if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: changed.Ref}); err != nil {
		t.Fatal(err)
	}
	later := authorize(t, c, 3000) // day 2

	for _, tc := range []struct {
		name string
		from time.Time
		want []string
	}{
		{"Day1", day, []string{changed.Ref, quiet.Ref}},
		{"Day2", day.Add(24 * time.Hour), []string{changed.Ref, later.Ref}},
		{"Day3", day.Add(48 * time.Hour), nil},
	} {
		got := byRef(report(t, c, tc.from, tc.from.Add(24*time.Hour)))
		if len(got) != len(tc.want) {
			t.Errorf("%s: report lists %d holds, want %d", tc.name, len(got), len(tc.want))
		}
		for _, ref := range tc.want {
			if len(got[ref]) != 1 {
				t.Errorf("%s: hold %s listed %d times, want once", tc.name, ref, len(got[ref]))
			}
		}
	}
}

func TestReportBadWindowIsRejected(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	err := c.Report(t.Context(), providers.ReportRequest{From: day, To: day}, func(providers.ReportRow) error { return nil })
	wantKind(t, err, providers.KindRejected, providers.CodeInvalidRequest)
}

func TestReportCutBeforeItsEndIsUnknown(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{TimeoutHang: 100 * time.Millisecond})
	seedDay(t, r.Server())
	inject(t, c, fake.Fault{Operation: fake.OpReport, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
	n := 0
	err := c.Report(t.Context(), providers.ReportRequest{From: day, To: day.Add(24 * time.Hour)}, func(providers.ReportRow) error {
		n++
		return nil
	})
	wantKind(t, err, providers.KindUnknown, "")
	if n != 5 {
		t.Errorf("%d rows arrived before the cut, want 5", n)
	}
}

func TestReportStreams100kRows(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	const rows = 100_000
	var holds iter.Seq[fake.SeedHold] = func(yield func(fake.SeedHold) bool) {
		for i := range rows {
			sh := fake.SeedHold{
				PaymentID: fmt.Sprintf("pay_%06d", i), TenantID: 1, Currency: "EUR",
				AmountMinor: int64(i%1000 + 1), CreatedAt: day.Add(time.Duration(i) * 800 * time.Millisecond),
			}
			if !yield(sh) {
				return
			}
		}
	}
	n, err := c.Seed(t.Context(), holds)
	if err != nil || n != rows {
		t.Fatalf("Seed: %d, %v; want %d", n, err, rows)
	}

	var count, sum int64
	seen := make(map[string]bool, rows)
	err = c.Report(t.Context(), providers.ReportRequest{From: day, To: day.Add(24 * time.Hour)}, func(r providers.ReportRow) error {
		count++
		sum += r.AmountMinor
		seen[r.PaymentID] = true
		return nil
	})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	// sum of (i%1000 + 1) over 100 full cycles of 1000.
	if count != rows || len(seen) != rows || sum != 100*500500 {
		t.Errorf("report: %d rows, %d payments, sum %d; want %d, %d, %d", count, len(seen), sum, rows, rows, 100*500500)
	}
}
