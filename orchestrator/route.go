package orchestrator

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// routeFor decides the route of a new payment: the connector its request
// named (pinned: that one only, no failover), or else the connectors the
// tenant's routing rules choose, enabled ones only, ordered by the rule's
// strategy. version is the routing version that decided, nil when none
// did; why says why, for the first attempt's row. card is the payment's
// vaulted card, nil for a provider's token.
func (s *Service) routeFor(ctx context.Context, in AuthorizeInput, card *CardSummary) (version *int, route []string, why *RoutingDecision, err error) {
	if in.Provider != "" {
		return nil, []string{in.Provider}, &RoutingDecision{Strategy: "pinned", Chosen: in.Provider}, nil
	}
	rv, err := s.routingFor(ctx, in.TenantID)
	if err != nil {
		return nil, nil, nil, err
	}
	ri := RouteInput{PaymentID: PaymentID(in.TenantID, in.Key), AmountMinor: in.AmountMinor,
		Currency: in.Currency, PaymentMethod: in.PaymentMethod, Metadata: in.Metadata}
	if card != nil {
		ri.CardBrand = card.Brand
	}
	rule, choice := rv.Rules.Match(ri)
	chosen := choice.order(ri.PaymentID)
	// The rules were checked when stored; a connector disabled or removed
	// from the configuration since is skipped, and so is one whose adapter
	// does not take the payment's method, or cannot ask for the flexible
	// hold the payment asks for (failover follows the route: it keeps the
	// rule).
	route = slices.DeleteFunc(chosen, func(name string) bool {
		return !s.connectorEnabled(name) || s.checkPaymentMethod(name, in.PaymentMethod) != nil
	})
	if len(route) > 0 {
		var flexErr error
		route = slices.DeleteFunc(route, func(name string) bool {
			err := s.checkFlexSupport(name, in)
			flexErr = cmp.Or(flexErr, err)
			return err != nil
		})
		if len(route) == 0 {
			return nil, nil, nil, flexErr
		}
	}
	if len(route) == 0 {
		return nil, nil, nil, &Error{Code: CodeProviderUnavailable, RetryAfter: time.Minute,
			Message: "no enabled connector is routed for this payment; an admin must update the tenant's routing"}
	}
	if rv.Version > 0 {
		version = &rv.Version
	}
	if choice.Strategy == StrategyAuthRate {
		// Among the connectors that can take the payment: the learning
		// only orders them (failover follows the order, by its own rules).
		route, why = s.authRates.order(choiceKey{tenantID: in.TenantID, version: rv.Version, rule: rule},
			choice.AuthRate.params(), route, &ri, s.now())
		return version, route, why, nil
	}
	return version, route, &RoutingDecision{Strategy: choice.Strategy, Rule: rule, Version: rv.Version, Chosen: route[0]}, nil
}

// firstConnector is the connector of a new payment's first attempt: the
// first of its route whose breaker lets a call through, or the route's
// first when every breaker is open (better a call that may fail than a
// payment refused without one). why gets the connectors skipped.
func (s *Service) firstConnector(route []string, why *RoutingDecision) string {
	for i, name := range route {
		if s.breakerAllows(name) {
			if i > 0 {
				why.BreakerSkipped = slices.Clone(route[:i])
			}
			return name
		}
	}
	return route[0]
}
