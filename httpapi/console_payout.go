package httpapi

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/reconcile"
)

// payoutPage is the data of a payout's page.
type payoutPage struct {
	View reconcile.PayoutView
	// Next is the link to the next page ("" on the last).
	Next string
}

// consolePayout: GET /console/payouts/{connector}/{payout_id}?after= shows
// the payout, the sum check of its items and a page of them with their
// payments, read from the connector (reconcile.Reconciler.Payout: its
// listings only, no money moves).
func (s *Server) consolePayout(c echo.Context) error {
	q, err := payoutQueryOf(c, "after")
	if err != nil {
		return s.consoleError(c, err)
	}
	v, err := s.rec.Payout(c.Request().Context(), q)
	if err != nil {
		return s.consoleError(c, err)
	}
	page := payoutPage{View: v}
	if v.HasMore && len(v.Items) > 0 {
		page.Next = payoutPath(v.Connector, v.Payout.ID) + "?" + url.Values{"after": {v.Items[len(v.Items)-1].ID}}.Encode()
	}
	return s.render(c, http.StatusOK, "payout", "Payout "+v.Payout.ID+" · "+v.Connector, page)
}

// payoutPath is the console page of a payout of connector.
func payoutPath(connector, id string) string {
	return consolePrefix + "/payouts/" + url.PathEscape(connector) + "/" + url.PathEscape(id)
}

// discrepancyPayout is the console page of the payout a discrepancy is
// about, "" when it names none: a settlement finding names a payout of
// its run's provider (detail.payout), a bank finding a payout and its
// connector (detail.payout_id, detail.connector), a duplicate credit the
// payout it repeats (detail.duplicate_of).
func discrepancyPayout(d reconcile.Discrepancy, provider string) string {
	str := func(m map[string]any, k string) string {
		v, _ := m[k].(string)
		return v
	}
	switch d.Category {
	case reconcile.PayoutUnexplained, reconcile.PayoutItemUnknown, reconcile.NotPaidOut:
		if id := str(d.Detail, "payout"); id != "" {
			return payoutPath(provider, id)
		}
	case reconcile.PayoutMissingInBank, reconcile.PayoutAmountMismatch:
		if id, conn := str(d.Detail, "payout_id"), str(d.Detail, "connector"); id != "" && conn != "" {
			return payoutPath(conn, id)
		}
	case reconcile.BankCreditUnmatched:
		of, _ := d.Detail["duplicate_of"].(map[string]any)
		if id, conn := str(of, "payout_id"), str(of, "connector"); id != "" && conn != "" {
			return payoutPath(conn, id)
		}
	}
	return ""
}

// moneyPtr formats an optional amount; "—" when there is none.
func moneyPtr(p *int64, code string) string {
	if p == nil {
		return "—"
	}
	return formatMinor(*p, code)
}
