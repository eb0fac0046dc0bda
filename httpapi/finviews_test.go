package httpapi_test

import (
	"context"
	"fmt"
	"iter"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// moneyDay is a reconciled day with money at the fake, which pays out at
// T+2 arriving the day after, on the real clock: the run is of yesterday
// R; R's payouts pay the captures of R − 2; the bank account's match
// window is a day, so the run judges the payouts arriving on R − 1
// (created R − 2, paying the captures of R − 4). The captures are seeded
// at the fake and in the payments table alike. Planted: R's EUR payout is
// a cent short of its items (payout_unexplained), and the bank statement
// has the EUR payout arriving on R − 1 but not the USD one
// (payout_missing_in_bank).
type moneyDay struct {
	runID             int64
	date              string
	paid              map[string]providers.Payout // R's payouts by currency, as the fake made them
	arriving          map[string]providers.Payout // those arriving on R − 1
	items             []seededPayment             // R's EUR payout's captures, in booking order
	todayCharges      int64                       // EUR captured on R
	todayChargesCount int64
}

type seededPayment struct {
	id, ref  string
	currency string
	amount   int64
}

// seedCaptured writes captured payments at the fake and in the payments
// table, each at its time.
func seedCaptured(t *testing.T, e *env, ps []seededPayment, at time.Time) {
	t.Helper()
	ctx := context.Background()
	_, err := e.pool.CopyFrom(ctx, pgx.Identifier{"payments"},
		[]string{"tenant_id", "id", "idempotency_key", "request_hash", "field_hashes", "status", "amount_minor", "currency",
			"captured_minor", "provider", "provider_ref", "payment_method", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(ps), func(i int) ([]any, error) {
			p := ps[i]
			return []any{e.tenant, p.id, "seed-" + p.ref, []byte{0}, map[string]string{}, "captured", p.amount, p.currency,
				p.amount, "fake", p.ref, "pm_card_visa", at, at}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var seq iter.Seq[fake.SeedHold] = func(yield func(fake.SeedHold) bool) {
		for _, p := range ps {
			if !yield(fake.SeedHold{Ref: p.ref, PaymentID: p.id, TenantID: e.tenant, Status: providers.StatusCaptured,
				AmountMinor: p.amount, CapturedMinor: p.amount, Currency: p.currency, CreatedAt: at, UpdatedAt: at}) {
				return
			}
		}
	}
	if n, err := e.fake.Seed(ctx, seq); err != nil || n != len(ps) {
		t.Fatalf("seeded %d (%v)", n, err)
	}
}

func seededPayments(e *env, prefix string, amounts map[string][]int64) []seededPayment {
	var out []seededPayment
	for _, cur := range []string{"EUR", "USD"} {
		for i, a := range amounts[cur] {
			ref := fmt.Sprintf("fh_%s_%s_%d", prefix, strings.ToLower(cur), i)
			out = append(out, seededPayment{id: orchestrator.PaymentID(e.tenant, ref), ref: ref, currency: cur, amount: a})
		}
	}
	return out
}

// payoutsCreated lists the fake's payouts created on d, by currency.
func payoutsCreated(t *testing.T, fc *fake.Client, d time.Time) map[string]providers.Payout {
	t.Helper()
	out := map[string]providers.Payout{}
	err := fc.Payouts(context.Background(), providers.ReportRequest{From: d, To: d.AddDate(0, 0, 1)}, func(p providers.Payout) error {
		out[p.Currency] = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newMoneyDay(t *testing.T, e *env) moneyDay {
	t.Helper()
	ctx := context.Background()
	y, m, d := time.Now().UTC().Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	r := today.AddDate(0, 0, -1)
	md := moneyDay{date: r.Format(time.DateOnly)}
	seedCaptured(t, e, seededPayments(e, "bank", map[string][]int64{"EUR": {40000, 2500}, "USD": {9900}}), r.AddDate(0, 0, -4).Add(9*time.Hour))
	md.items = seededPayments(e, "paid", map[string][]int64{"EUR": {123456, 5000, 777}, "USD": {3050}})
	seedCaptured(t, e, md.items, r.AddDate(0, 0, -2).Add(11*time.Hour))
	md.items = md.items[:3]
	seedCaptured(t, e, seededPayments(e, "today", map[string][]int64{"EUR": {10000, 20000}}), r.Add(12*time.Hour))
	md.todayCharges, md.todayChargesCount = 30000, 2
	// Listing makes the payouts due by now (the first listing pays each
	// movement on the day it became available).
	md.paid, md.arriving = payoutsCreated(t, e.fake, r), payoutsCreated(t, e.fake, r.AddDate(0, 0, -2))
	if len(md.paid) != 2 || len(md.arriving) != 2 {
		t.Fatalf("payouts of R %+v, arriving on R − 1 %+v", md.paid, md.arriving)
	}
	eur := md.paid["EUR"]
	if _, err := e.fake.MoneyDrift(ctx, fake.MoneyDrift{Kind: fake.DriftPayoutAmount, Payout: eur.ID, AmountMinor: eur.AmountMinor - 1}); err != nil {
		t.Fatal(err)
	}
	admin, fin := e.keys[orchestrator.RoleAdmin], e.keys[orchestrator.RoleFinance]
	res, b := e.do(t, "PUT", "/v1/connectors/fake/bank_account", admin,
		strings.NewReader(`{"account":"DE89370400440532013000","match_window_days":1}`), map[string]string{"Content-Type": "application/json"})
	if res.StatusCode != 200 {
		t.Fatalf("bank account: %d %s", res.StatusCode, b)
	}
	in := md.arriving["EUR"]
	amount := fmt.Sprintf("%d.%02d", in.AmountMinor/100, in.AmountMinor%100)
	statement := "booking_date,amount,currency,credit_debit,reference\n" +
		in.ArrivalDate.UTC().Format(time.DateOnly) + "," + amount + ",EUR,credit," + in.Reference + "\n"
	res, b = e.do(t, "POST", "/v1/bank_statements?account=DE89370400440532013000", fin, strings.NewReader(statement),
		map[string]string{"Content-Type": "text/csv", "Idempotency-Key": "stmt-1"})
	if res.StatusCode != 201 {
		t.Fatalf("statement: %d %s", res.StatusCode, b)
	}
	res, b = e.post(t, "/v1/reconciliation/runs", fin, "money-run", `{"provider":"fake","date":"`+md.date+`"}`)
	if res.StatusCode != 202 {
		t.Fatalf("start run: %d %s", res.StatusCode, b)
	}
	run := e.waitRun(t, decode[runJSON](t, b).ID)
	if run.Status != "succeeded" || run.DiscrepancyCount != 2 {
		t.Fatalf("run %+v", run)
	}
	md.runID = run.ID
	return md
}

type summaryJSON struct {
	Object          string  `json:"object"`
	RunID           int64   `json:"run_id"`
	Version         int     `json:"version"`
	BankArrivalDate *string `json:"bank_arrival_date"`
	Currencies      map[string]struct {
		ChargeCount      int64            `json:"charge_count"`
		Charges          int64            `json:"charges_minor"`
		Fees             int64            `json:"fees_minor"`
		Net              int64            `json:"net_minor"`
		PayoutCount      int64            `json:"payout_count"`
		PaidOut          int64            `json:"paid_out_minor"`
		BankPayoutsMinor *int64           `json:"bank_payouts_minor"`
		InBankMinor      *int64           `json:"in_bank_minor"`
		Open             map[string]int64 `json:"open"`
	} `json:"currencies"`
}

type payoutJSON struct {
	Payout struct {
		ID          string  `json:"id"`
		Found       bool    `json:"found"`
		AmountMinor *int64  `json:"amount_minor"`
		Status      string  `json:"status"`
		ArrivalDate *string `json:"arrival_date"`
	} `json:"payout"`
	ItemCount       int64  `json:"item_count"`
	ItemsNetMinor   int64  `json:"items_net_minor"`
	DifferenceMinor *int64 `json:"difference_minor"`
	Items           []struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		HoldRef    string `json:"hold_ref"`
		GrossMinor int64  `json:"gross_minor"`
		Payment    *struct {
			TenantID int64  `json:"tenant_id"`
			ID       string `json:"id"`
		} `json:"payment"`
	} `json:"items"`
	HasMore bool `json:"has_more"`
}

// TestFinanceMoneyViewsAPI: the day's summary is the run's money by
// currency with the bank's side and the open findings; a payout's page
// lists every item with our payment, page by page, and checks the sum;
// bad input is 400, unknown things 404, other roles 403.
func TestFinanceMoneyViewsAPI(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	md := newMoneyDay(t, e)
	fin := e.keys[orchestrator.RoleFinance]
	get := func(path, key string) ([]byte, int) {
		res, b := e.do(t, "GET", path, key, nil, nil)
		return b, res.StatusCode
	}

	b, status := get("/v1/reconciliation/summary?provider=fake&business_date="+md.date, fin)
	sum := decode[summaryJSON](t, b)
	eur, usd := sum.Currencies["EUR"], sum.Currencies["USD"]
	if status != 200 || sum.Object != "reconciliation_summary" || sum.RunID != md.runID || sum.BankArrivalDate == nil ||
		*sum.BankArrivalDate != md.arriving["EUR"].ArrivalDate.UTC().Format(time.DateOnly) {
		t.Fatalf("summary %d %s", status, b)
	}
	if eur.ChargeCount != md.todayChargesCount || eur.Charges != md.todayCharges || eur.Fees != 2*25+140+280 ||
		eur.Net != md.todayCharges-eur.Fees || eur.PayoutCount != 1 || eur.PaidOut != md.paid["EUR"].AmountMinor-1 ||
		*eur.BankPayoutsMinor != md.arriving["EUR"].AmountMinor || *eur.InBankMinor != md.arriving["EUR"].AmountMinor ||
		eur.Open["payout_unexplained"] != 1 || eur.Open["payout_missing_in_bank"] != 0 || len(eur.Open) != 7 {
		t.Fatalf("EUR summary %+v\n%s", eur, b)
	}
	if usd.PaidOut != md.paid["USD"].AmountMinor || *usd.BankPayoutsMinor != md.arriving["USD"].AmountMinor ||
		*usd.InBankMinor != 0 || usd.Open["payout_missing_in_bank"] != 1 {
		t.Fatalf("USD summary %+v\n%s", usd, b)
	}

	// The EUR payout, two items a page: every item, our payment of each,
	// the sum check of them all.
	payout := md.paid["EUR"]
	base := "/v1/reconciliation/payouts/fake/" + url.PathEscape(payout.ID)
	var seen []string
	after := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {"2"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		b, status := get(base+"?"+q.Encode(), fin)
		v := decode[payoutJSON](t, b)
		if status != 200 || !v.Payout.Found || *v.Payout.AmountMinor != payout.AmountMinor-1 || v.ItemCount != 3 ||
			v.ItemsNetMinor != payout.AmountMinor || *v.DifferenceMinor != -1 || v.Payout.Status != "paid" {
			t.Fatalf("page %d: %d %s", page, status, b)
		}
		for _, it := range v.Items {
			if it.Type != "charge" || it.Payment == nil || it.Payment.TenantID != e.tenant {
				t.Fatalf("item %+v of %s", it, b)
			}
			seen = append(seen, it.Payment.ID+" "+it.HoldRef)
			after = it.ID
		}
		if !v.HasMore {
			break
		}
		if page > 3 {
			t.Fatalf("paging does not end: %s", b)
		}
	}
	var want []string
	for _, p := range md.items {
		want = append(want, p.id+" "+p.ref)
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("items %q, want %q", seen, want)
	}

	for path, code := range map[string]string{
		"/v1/reconciliation/summary?provider=fake&business_date=2001-01-01": "not_found",
		"/v1/reconciliation/summary?provider=fake&business_date=2026-02-30": "validation_failed",
		"/v1/reconciliation/summary?business_date=" + md.date:               "validation_failed",
		"/v1/reconciliation/payouts/fake/fpo_nonesuch":                      "not_found",
		"/v1/reconciliation/payouts/stripe/" + payout.ID:                    "not_found",
		base + "?limit=0":                     "validation_failed",
		base + "?limit=1001":                  "validation_failed",
		base + "?starting_after=fbt_nonesuch": "not_found",
		"/v1/reconciliation/payouts/fake/" + url.PathEscape("fpo_\x01x"):                                "validation_failed",
		"/v1/reconciliation/payouts/fake/" + strings.Repeat("p", 256):                                   "validation_failed",
		"/v1/reconciliation/summary?provider=" + strings.Repeat("f", 101) + "&business_date=2026-01-01": "validation_failed",
	} {
		res, b := e.do(t, "GET", path, fin, nil, nil)
		p := wantProblem(t, res, b, map[string]int{"not_found": 404, "validation_failed": 400}[code], code)
		if strings.Contains(string(b), "fake:") || strings.Contains(string(b), "127.0.0.1") {
			t.Fatalf("%s leaks: %s (%+v)", path, b, p)
		}
	}
	for _, role := range []orchestrator.Role{orchestrator.RoleMerchant, orchestrator.RoleSupport} {
		for _, path := range []string{"/v1/reconciliation/summary?provider=fake&business_date=" + md.date, base} {
			res, b := e.do(t, "GET", path, e.keys[role], nil, nil)
			wantProblem(t, res, b, 403, "forbidden")
		}
	}
	if _, status := get(base, e.keys[orchestrator.RoleAdmin]); status != 200 {
		t.Fatalf("admin reads a payout: %d", status)
	}
}

// TestConsoleMoneyInBrowser: finance opens a day with money drifts and a
// bank statement: the run's summary table shows the day's money, paid
// out and in the bank, formatted in each currency; the category filter
// offers the money categories and narrows to one; a finding's payout
// link opens the payout's page, whose items name their payments, each a
// link to the payment's page.
func TestConsoleMoneyInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newMigratedEnv(t, httpapi.Config{})
	md := newMoneyDay(t, e)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	eur := md.paid["EUR"]

	b.do(t, "sign in",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(css(`#api_key`)),
		chromedp.SendKeys(css(`#api_key`), e.keys[orchestrator.RoleFinance]),
		chromedp.Click(css(`#signin button`)),
		chromedp.WaitVisible(css(`#signout`)),
		chromedp.Navigate(fmt.Sprintf("%s/console/runs/%d", e.url, md.runID)),
		chromedp.WaitVisible(css(`#summary`)),
	)
	b.screenshot(t, "money-01-run")
	mustContain(t, "EUR summary", b.text(t, `#summary-EUR`), "EUR", "300.00\u00a0EUR", "4.70\u00a0EUR", "295.30\u00a0EUR",
		formatEUR(eur.AmountMinor-1), formatEUR(md.arriving["EUR"].AmountMinor), "payout_unexplained: 1")
	mustContain(t, "USD summary", b.text(t, `#summary-USD`), "0.00\u00a0USD", "payout_missing_in_bank: 1")
	options := b.text(t, `#category`)
	for _, c := range []string{"fee_mismatch", "payout_unexplained", "payout_item_unknown", "not_paid_out",
		"payout_missing_in_bank", "payout_amount_mismatch", "bank_credit_unmatched"} {
		mustContain(t, "category filter", options, c)
	}

	b.do(t, "filter",
		chromedp.SetValue(css(`#category`), "payout_unexplained"),
		chromedp.Click(css(`#filters button`)),
		chromedp.WaitVisible(css(`#discrepancies a.payout`)),
	)
	b.screenshot(t, "money-02-filtered")
	rows := b.text(t, `#discrepancies tbody`)
	mustContain(t, "filtered", rows, "payout_unexplained", formatEUR(eur.AmountMinor), formatEUR(eur.AmountMinor-1), "−0.01\u00a0EUR")
	if strings.Contains(rows, "payout_missing_in_bank") {
		t.Fatalf("the filter lets another category through:\n%s", rows)
	}

	b.do(t, "payout page",
		chromedp.Click(css(`#discrepancies a.payout`)),
		chromedp.WaitVisible(css(`#items`)),
	)
	b.screenshot(t, "money-03-payout")
	mustContain(t, "payout", b.text(t, `#payout`), formatEUR(eur.AmountMinor-1), eur.Reference)
	mustContain(t, "sum check", b.text(t, `#sumcheck`), "3", formatEUR(eur.AmountMinor), "−0.01\u00a0EUR", "unexplained")
	items := b.text(t, `#items`)
	for _, p := range md.items {
		mustContain(t, "items", items, p.id, p.ref, formatEUR(p.amount))
	}
	// Two items a page: the next page has the third.
	b.do(t, "paged",
		chromedp.Navigate(e.url+"/console/payouts/fake/"+eur.ID+"?limit=2"),
		chromedp.WaitVisible(css(`#next`)),
		chromedp.Click(css(`#next`)),
		chromedp.WaitNotPresent(css(`#next`)),
	)
	if page2 := b.text(t, `#items`); !strings.Contains(page2, md.items[2].id) || strings.Contains(page2, md.items[0].id) {
		t.Fatalf("the second page:\n%s", page2)
	}
	b.do(t, "payment page",
		chromedp.Navigate(e.url+"/console/payouts/fake/"+eur.ID),
		chromedp.WaitVisible(css(`#items`)),
		chromedp.Click(css(`#items a.payment`)),
		chromedp.WaitVisible(css(`#operations`)), // seeded: no operations, no events
	)
	b.screenshot(t, "money-04-payment")
	mustContain(t, "payment page", b.text(t, `main`), md.items[0].id, "1,234.56\u00a0EUR")
}

// formatEUR writes minor units of EUR as the console does.
func formatEUR(minor int64) string {
	s := fmt.Sprintf("%d.%02d\u00a0EUR", minor/100, minor%100)
	if minor >= 100_000 {
		s = fmt.Sprintf("%d,%03d.%02d\u00a0EUR", minor/100_000, minor/100%1000, minor%100)
	}
	return s
}
