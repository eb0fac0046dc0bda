package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// searchPage is the data of the support search.
type searchPage struct {
	Query    string
	Tenant   string
	Searched bool
	Merchant bool
	Results  []orchestrator.Payment
	Message  string
}

func (p searchPage) notice() (string, string) { return "", p.Message }

// consoleSearch: GET /console/search?q=&tenant= finds payments by payment
// id or idempotency key; a merchant sees its own tenant only.
func (s *Server) consoleSearch(c echo.Context) error {
	sess := consoleSessionOf(c)
	sc := orchestrator.ScopeOf(sess.Principal)
	page := searchPage{
		Query:    strings.TrimSpace(c.QueryParam("q")),
		Tenant:   strings.TrimSpace(c.QueryParam("tenant")),
		Merchant: sess.Principal.Role == orchestrator.RoleMerchant,
	}
	if page.Query == "" {
		return s.render(c, http.StatusOK, "search", "Find a payment", page)
	}
	if page.Tenant != "" {
		if page.Merchant {
			page.Message = "A merchant key reads its own tenant only; leave the tenant empty."
			return s.render(c, http.StatusBadRequest, "search", "Find a payment", page)
		}
		id, err := strconv.ParseInt(page.Tenant, 10, 64)
		if err != nil || id <= 0 {
			page.Message = "The tenant must be a positive whole number."
			return s.render(c, http.StatusBadRequest, "search", "Find a payment", page)
		}
		sc.TenantID = id
	}
	if err := orchestrator.ValidateIdempotencyKey(page.Query, true); err != nil {
		page.Message = "Search for a payment id (pay_…) or an idempotency key: 1 to 255 printable ASCII characters."
		return s.render(c, http.StatusBadRequest, "search", "Find a payment", page)
	}
	page.Searched = true
	ctx := c.Request().Context()
	if validID(page.Query) {
		p, err := s.svc.GetPayment(ctx, sc, page.Query)
		switch {
		case err == nil:
			page.Results = append(page.Results, p)
		case orchestrator.ErrorCode(err) != orchestrator.CodeNotFound:
			return s.consoleError(c, err)
		}
	}
	byKey, err := s.svc.PaymentsByKey(ctx, sc, page.Query)
	if err != nil {
		return s.consoleError(c, err)
	}
	for _, p := range byKey {
		if len(page.Results) == 0 || page.Results[0].ID != p.ID {
			page.Results = append(page.Results, p)
		}
	}
	return s.render(c, http.StatusOK, "search", "Find a payment", page)
}

// paymentPage is the data of a payment's page.
type paymentPage struct {
	Payment  orchestrator.Payment
	Attempts []orchestrator.Attempt
	Events   []orchestrator.Event
	// Webhooks are the payment's outbox events, first first, each with
	// its deliveries.
	Webhooks []webhookEventRow
	// Authentication is its 3-D Secure challenge; nil when it had none.
	Authentication *authenticationView
	// Operations are its money movements, oldest first.
	Operations []operationRow
	// Flex is what it asked for of flexible holds and was granted; empty
	// when it asked for none.
	Flex []flexFact
}

// flexFact is one flexible-hold feature a payment asked for and what the
// connector granted of it: requested (not answered yet), available or
// unavailable.
type flexFact struct{ ID, Feature, Grant string }

// flexFacts lists the features p asked for, in the order of the request's
// fields.
func flexFacts(p orchestrator.Payment) []flexFact {
	var fs []flexFact
	for _, f := range []struct {
		id, feature string
		grant       *orchestrator.Grant
	}{
		{"flex-incremental", "Incremental authorization", p.IncrementalAuthorization},
		{"flex-multicapture", "Multicapture", p.Multicapture},
		{"flex-overcapture", "Overcapture", p.Overcapture},
	} {
		if f.grant != nil {
			fs = append(fs, flexFact{ID: f.id, Feature: f.feature, Grant: string(*f.grant)})
		}
	}
	return fs
}

// operationRow is one money movement of a payment as its page shows it.
type operationRow struct {
	orchestrator.PaymentOperation
	// Kind names it: "capture — part", "capture — final", increment,
	// cancel, refund.
	Kind string
	// Amount is what it moved: a capture's or refund's amount, "to" an
	// increment's new total, "the whole hold" for a cancel.
	Amount string
	// Added is what a succeeded increment added to the hold ("+4.00 EUR");
	// "" for the rest, and when the amount before it is no longer known.
	Added string
}

// newOperationRow describes op for the payment's page.
func newOperationRow(op orchestrator.PaymentOperation) operationRow {
	r := operationRow{PaymentOperation: op, Kind: op.Object, Amount: formatMinor(op.AmountMinor, op.Currency)}
	switch op.Object {
	case "capture":
		r.Kind = "capture — final"
		if op.FinalCapture != nil && !*op.FinalCapture {
			r.Kind = "capture — part"
		}
	case "increment":
		r.Amount = "to " + r.Amount
		if op.AmountBeforeMinor != nil {
			r.Added = "+" + formatMinor(op.AmountMinor-*op.AmountBeforeMinor, op.Currency)
		}
	case "cancel":
		r.Amount = "the whole hold"
	}
	return r
}

// webhookEventRow is one outbox event of a payment and its deliveries to
// the tenant's webhook endpoints.
type webhookEventRow struct {
	Event      orchestrator.WebhookEvent
	Deliveries []webhooks.WebhookDelivery
}

// maxConsoleWebhookEvents bounds the outbox events a payment's page shows.
const maxConsoleWebhookEvents = 100

// paymentWebhooks returns payment p's outbox events, first first, with
// their deliveries, read in p's tenant's scope and shown as viewer sees
// them: the endpoints' URLs redacted to scheme://host/… unless viewer is
// that merchant (orchestrator.Scope.FullEndpointURLs: a URL is often a
// capability, not for staff's eyes).
func (s *Server) paymentWebhooks(ctx context.Context, viewer orchestrator.Scope, p orchestrator.Payment) ([]webhookEventRow, error) {
	sc := orchestrator.Scope{TenantID: p.TenantID}
	evs, _, err := s.svc.ListEvents(ctx, sc, orchestrator.EventFilter{PaymentID: p.ID, Limit: maxConsoleWebhookEvents})
	if err != nil {
		return nil, err
	}
	ds, err := s.hooks.PaymentDeliveries(ctx, sc, p.ID)
	if err != nil {
		return nil, err
	}
	byEvent := map[string][]webhooks.WebhookDelivery{}
	for _, d := range ds {
		if !viewer.FullEndpointURLs() {
			d.EndpointURL = orchestrator.RedactURL(d.EndpointURL)
		}
		byEvent[d.EventID] = append(byEvent[d.EventID], d)
	}
	rows := make([]webhookEventRow, 0, len(evs))
	for i := len(evs) - 1; i >= 0; i-- { // listed newest first
		rows = append(rows, webhookEventRow{Event: evs[i], Deliveries: byEvent[evs[i].ID]})
	}
	return rows, nil
}

// consolePayment: GET /console/payments/{id}: amounts, state, provider
// reference, capture deadline, routing, what it asked for and was granted
// of flexible holds, its attempts across connectors, its money movements,
// the full timeline, its 3-D Secure challenge step by step, and its
// events' webhook deliveries. Another tenant's payment is a 404 to a merchant.
func (s *Server) consolePayment(c echo.Context) error {
	id := c.Param("id")
	if !validID(id) {
		return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeNotFound, "There is no payment %q.", id))
	}
	sc := orchestrator.ScopeOf(consoleSessionOf(c).Principal)
	ctx := c.Request().Context()
	p, err := s.svc.GetPayment(ctx, sc, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	attempts, err := s.svc.Attempts(ctx, sc, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	evs, err := s.svc.PaymentEvents(ctx, sc, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	webhooks, err := s.paymentWebhooks(ctx, sc, p)
	if err != nil {
		return s.consoleError(c, err)
	}
	ops, err := s.svc.PaymentOperations(ctx, sc, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	page := paymentPage{Payment: p, Attempts: attempts, Events: evs, Webhooks: webhooks,
		Authentication: newAuthenticationView(p, evs, s.now()), Flex: flexFacts(p)}
	for _, op := range ops {
		page.Operations = append(page.Operations, newOperationRow(op))
	}
	return s.render(c, http.StatusOK, "payment", "Payment "+p.ID, page)
}

// consoleHoldsWindow is how soon a hold must lapse for the console to
// highlight it.
const consoleHoldsWindow = 24 * time.Hour

// expiresIn says how soon payment p's hold lapses ("3h 20m", "lapsed")
// when it is authorized and lapses within consoleHoldsWindow, else "".
func expiresIn(p orchestrator.Payment) string {
	if p.Status != orchestrator.StatusAuthorized || p.CaptureBefore == nil {
		return ""
	}
	left := time.Until(*p.CaptureBefore)
	switch {
	case left <= 0:
		return "lapsed"
	case left > consoleHoldsWindow:
		return ""
	case left < time.Hour:
		return fmt.Sprintf("%dm", int(left.Minutes()))
	}
	return fmt.Sprintf("%dh %02dm", int(left.Hours()), int(left.Minutes())%60)
}

// holdsPage is the console's Holds page: the holds about to lapse and the
// payments waiting for their shopper.
type holdsPage struct {
	Holds []orchestrator.Payment
	// More says the list was cut at its limit.
	More bool
	// Waiting are the requires_action payments, oldest challenge first;
	// MoreWaiting says the list was cut at maxConsoleWaiting.
	Waiting     []waitingRow
	MoreWaiting bool
}

// consoleHolds: GET /console/holds, the authorized payments whose hold
// lapses within 24 h (GET /v1/payments?expiring_before=), soonest first,
// and the payments waiting for their shopper to complete a 3-D Secure
// challenge (GET /v1/payments?status=requires_action), oldest first.
func (s *Server) consoleHolds(c echo.Context) error {
	sc := orchestrator.ScopeOf(consoleSessionOf(c).Principal)
	ctx := c.Request().Context()
	before := time.Now().Add(consoleHoldsWindow)
	ps, more, err := s.svc.ListPayments(ctx, sc, orchestrator.ListFilter{ExpiringBefore: &before, Limit: 100})
	if err != nil {
		return s.consoleError(c, err)
	}
	slices.SortFunc(ps, func(a, b orchestrator.Payment) int { return a.CaptureBefore.Compare(*b.CaptureBefore) })
	waiting, moreWaiting, err := s.svc.WaitingPayments(ctx, sc, maxConsoleWaiting)
	if err != nil {
		return s.consoleError(c, err)
	}
	page := holdsPage{Holds: ps, More: more, MoreWaiting: moreWaiting}
	now := s.now()
	for _, p := range waiting {
		page.Waiting = append(page.Waiting, newWaitingRow(p, now))
	}
	return s.render(c, http.StatusOK, "holds", "Holds", page)
}
