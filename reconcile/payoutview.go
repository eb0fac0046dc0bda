package reconcile

// A payout's page: the payout as its connector reports it, every item it
// paid with our payment of it, and whether the items add up to it.
//
// The provider is the source: a payout may have a million items, more
// than a run stages for long, and finance asks about payouts of any day.
// Its listing of the payout's items (providers.MoneyReporter.PayoutItems)
// is read through once per page, in the provider's order: the page is
// the limit items after starting_after, the count and the sum are of
// them all, and nothing but the page is held. A page thus costs one read
// of the whole listing (a million items: some seconds, a few KiB held),
// the price of a sum check that is always of the payout as it stands.
//
// Reads only: PayoutItems and Payouts are listings; nothing here asks the
// provider to move money, so no page can move money, however often it
// is asked for.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// PayoutView is one page of a payout's items with the payout and the sum
// check of all its items.
type PayoutView struct {
	Object    string     `json:"object"`
	Connector string     `json:"connector"`
	Payout    PayoutInfo `json:"payout"`
	// ItemCount and ItemsNetMinor are of every item (the payout's own
	// movement aside); DifferenceMinor is the payout's amount less
	// ItemsNetMinor (0: the items explain it), nil when the amount is
	// unknown.
	ItemCount       int64        `json:"item_count"`
	ItemsNetMinor   int64        `json:"items_net_minor"`
	DifferenceMinor *int64       `json:"difference_minor"`
	Items           []PayoutItem `json:"items"`
	HasMore         bool         `json:"has_more"`
}

// PayoutInfo is the payout as its connector lists it. Found is false when
// its listing of payouts around the payout's time does not have it; the
// amount then comes from the payout's own movement, when listed.
type PayoutInfo struct {
	ID          string     `json:"id"`
	Found       bool       `json:"found"`
	AmountMinor *int64     `json:"amount_minor"`
	Currency    string     `json:"currency"`
	Status      string     `json:"status"`
	ArrivalDate *string    `json:"arrival_date"`
	Reference   string     `json:"reference"`
	CreatedAt   *time.Time `json:"created_at"`
}

// PayoutItem is a balance transaction the payout paid out, with our
// payment of its hold on the connector (nil: none of ours, "unknown").
type PayoutItem struct {
	ID         string       `json:"id"`
	Type       string       `json:"type"`
	Source     string       `json:"source"`
	HoldRef    string       `json:"hold_ref"`
	GrossMinor int64        `json:"gross_minor"`
	FeeMinor   int64        `json:"fee_minor"`
	NetMinor   int64        `json:"net_minor"`
	Currency   string       `json:"currency"`
	CreatedAt  time.Time    `json:"created_at"`
	Payment    *ItemPayment `json:"payment"`
}

// ItemPayment names our payment of an item.
type ItemPayment struct {
	TenantID int64  `json:"tenant_id"`
	ID       string `json:"id"`
}

// PayoutQuery asks for a page of a payout's items.
type PayoutQuery struct {
	Connector, PayoutID string
	// Limit is the page's size, 1 to 1000 (0: 100).
	Limit int
	// StartingAfter is the id of the last item of the previous page.
	StartingAfter string
}

// Validate checks q. Errors: validation_failed.
func (q *PayoutQuery) Validate() error {
	if !printableID(q.PayoutID) {
		return orchestrator.ParamError("payout_id", "payout_id must be 1 to 255 printable characters")
	}
	if q.StartingAfter != "" && !printableID(q.StartingAfter) {
		return orchestrator.ParamError("starting_after", "starting_after must be 1 to 255 printable characters")
	}
	if q.Limit < 0 || q.Limit > 1000 {
		return orchestrator.ParamError("limit", "limit must be 1 to 1000")
	}
	return nil
}

// printableID reports an id fit to ask a provider about: text without
// control characters or slashes (it travels in a path), 1 to 255 bytes.
func printableID(s string) bool {
	return s != "" && len(s) <= 255 && utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0 &&
		!strings.Contains(s, "/")
}

// payoutSearch bounds how far from the payout's own movement its listing
// of payouts is searched for it.
const payoutSearch = 2 * oneDay

// Payout reads a page of a payout's items from its connector, with the
// payout and the sum check. Errors: validation_failed, not_found (no
// such connector reporting money, no such payout, starting_after not one
// of its items), provider_unavailable (the listing could not be read).
func (r *Reconciler) Payout(ctx context.Context, q PayoutQuery) (PayoutView, error) {
	if err := q.Validate(); err != nil {
		return PayoutView{}, err
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	mr, ok := r.providers[q.Connector].(providers.MoneyReporter)
	if !ok {
		return PayoutView{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no connector %q reporting payouts", q.Connector)
	}
	v := PayoutView{Object: "reconciliation_payout", Connector: q.Connector, Items: []PayoutItem{},
		Payout: PayoutInfo{ID: q.PayoutID}}
	anchor, err := readPayoutItems(ctx, mr, q, &v)
	if err != nil {
		return PayoutView{}, err
	}
	if !anchor.IsZero() {
		if err := findPayout(ctx, mr, anchor, &v.Payout); err != nil {
			return PayoutView{}, providerReadError(err, "payouts")
		}
	}
	if a := v.Payout.AmountMinor; a != nil {
		d := *a - v.ItemsNetMinor
		v.DifferenceMinor = &d
	}
	if err := r.linkItems(ctx, q.Connector, v.Items); err != nil {
		return PayoutView{}, err
	}
	return v, nil
}

// readPayoutItems reads the payout's whole item listing once into v: the
// page, the count and sum of every item, the amount and currency of the
// payout's own movement. It returns the time to look for the payout
// around: its own movement's, else its items' latest availability (zero:
// neither listed).
func readPayoutItems(ctx context.Context, mr providers.MoneyReporter, q PayoutQuery, v *PayoutView) (time.Time, error) {
	passed := q.StartingAfter == ""
	var anchor time.Time
	var overflow bool
	err := mr.PayoutItems(ctx, q.PayoutID, func(bt providers.BalanceTransaction) error {
		if bt.Type == providers.BalancePayout {
			amount := -bt.GrossMinor
			v.Payout.AmountMinor, v.Payout.Currency, anchor = &amount, strings.ToUpper(bt.Currency), bt.CreatedAt
			return nil
		}
		v.ItemCount++
		if s, ok := addInt64(v.ItemsNetMinor, bt.NetMinor); ok {
			v.ItemsNetMinor = s
		} else {
			overflow = true
		}
		if v.Payout.AmountMinor == nil && bt.AvailableOn.After(anchor) {
			anchor = bt.AvailableOn
		}
		switch {
		case !passed:
			passed = bt.ID == q.StartingAfter
		case len(v.Items) < q.Limit:
			v.Items = append(v.Items, itemOf(bt))
		default:
			v.HasMore = true
		}
		return nil
	})
	switch {
	case err != nil:
		return time.Time{}, providerReadError(err, "payout "+q.PayoutID)
	case !passed:
		return time.Time{}, orchestrator.Errorf(orchestrator.CodeNotFound, "starting_after %q is no item of payout %s",
			q.StartingAfter, q.PayoutID)
	case overflow:
		return time.Time{}, fmt.Errorf("reconcile: the items of payout %s add up beyond int64", q.PayoutID)
	}
	return anchor, nil
}

func itemOf(bt providers.BalanceTransaction) PayoutItem {
	return PayoutItem{ID: bt.ID, Type: bt.Type, Source: bt.Source, HoldRef: bt.HoldRef, GrossMinor: bt.GrossMinor,
		FeeMinor: bt.FeeMinor, NetMinor: bt.NetMinor, Currency: strings.ToUpper(bt.Currency), CreatedAt: bt.CreatedAt.UTC()}
}

// addInt64 is a + b, false when it overflows.
func addInt64(a, b int64) (int64, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}

// errFound stops a listing once the payout is found.
var errFound = errors.New("found")

// findPayout looks for the payout in the connector's payouts created
// within payoutSearch of anchor and fills p from it.
func findPayout(ctx context.Context, mr providers.MoneyReporter, anchor time.Time, p *PayoutInfo) error {
	req := providers.ReportRequest{From: anchor.Add(-payoutSearch), To: anchor.Add(payoutSearch)}
	err := mr.Payouts(ctx, req, func(po providers.Payout) error {
		if po.ID != p.ID {
			return nil
		}
		amount, created := po.AmountMinor, po.CreatedAt.UTC()
		p.Found, p.AmountMinor, p.Currency, p.Status, p.Reference, p.CreatedAt = true, &amount,
			strings.ToUpper(po.Currency), po.Status, po.Reference, &created
		if !po.ArrivalDate.IsZero() {
			d := po.ArrivalDate.UTC().Format(time.DateOnly)
			p.ArrivalDate = &d
		}
		return errFound
	})
	if errors.Is(err, errFound) {
		return nil
	}
	return err
}

// providerReadError is the answer to a listing of the provider that
// failed: not_found when the provider refused it (it knows no such
// payout, or no payout could have such an id), provider_unavailable
// otherwise (the cause goes to the log, not the client).
func providerReadError(err error, what string) error {
	var pe *providers.Error
	if errors.As(err, &pe) && pe.Kind == providers.KindRejected {
		return orchestrator.Errorf(orchestrator.CodeNotFound, "the connector has no %s", what)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &orchestrator.Error{Code: orchestrator.CodeProviderUnavailable, RetryAfter: time.Second,
		Message: "the connector's listing of " + what + " could not be read; retry", Err: err}
}

// itemPaymentsSQL finds our payments of the holds $2 on connector $1 (a
// hold is one payment's: of two tenants', the first by tenant is shown).
const itemPaymentsSQL = `
	SELECT DISTINCT ON (provider_ref) provider_ref, tenant_id, id FROM payments
	WHERE provider = $1 AND provider_ref = ANY($2)
	ORDER BY provider_ref, tenant_id`

// linkItems sets each item's payment, by its hold on the connector (from
// the replica when it has caught up).
func (r *Reconciler) linkItems(ctx context.Context, connector string, items []PayoutItem) error {
	var refs []string
	for _, it := range items {
		if it.HoldRef != "" {
			refs = append(refs, it.HoldRef)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	byRef := map[string]*ItemPayment{}
	err := r.read(ctx, func(conn *pgxpool.Conn) error {
		rows, _ := conn.Query(ctx, itemPaymentsSQL, connector, refs)
		var (
			ref string
			p   ItemPayment
		)
		_, err := pgx.ForEachRow(rows, []any{&ref, &p.TenantID, &p.ID}, func() error {
			cp := p
			byRef[ref] = &cp
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("reconcile: payout items' payments: %w", err)
	}
	for i := range items {
		items[i].Payment = byRef[items[i].HoldRef]
	}
	return nil
}
