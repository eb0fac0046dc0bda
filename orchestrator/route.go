package orchestrator

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// routeFor decides the route of a new payment: the connector its request
// named (pinned: that one only, no failover), or else the connectors the
// tenant's routing rules choose, enabled ones only. version is the
// routing version that decided, nil when none did.
func (s *Service) routeFor(ctx context.Context, in AuthorizeInput) (version *int, route []string, err error) {
	if in.Provider != "" {
		return nil, []string{in.Provider}, nil
	}
	rv, err := s.routingFor(ctx, in.TenantID)
	if err != nil {
		return nil, nil, err
	}
	_, chosen := rv.Rules.Decide(RouteInput{PaymentID: PaymentID(in.TenantID, in.Key), AmountMinor: in.AmountMinor,
		Currency: in.Currency, PaymentMethod: in.PaymentMethod, Metadata: in.Metadata})
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
			return nil, nil, flexErr
		}
	}
	if len(route) == 0 {
		return nil, nil, &Error{Code: CodeProviderUnavailable, RetryAfter: time.Minute,
			Message: "no enabled connector is routed for this payment; an admin must update the tenant's routing"}
	}
	if rv.Version > 0 {
		version = &rv.Version
	}
	return version, route, nil
}

// firstConnector is the connector of a new payment's first attempt: the
// first of its route whose breaker lets a call through, or the route's
// first when every breaker is open (better a call that may fail than a
// payment refused without one).
func (s *Service) firstConnector(route []string) string {
	for _, name := range route {
		if s.breakerAllows(name) {
			return name
		}
	}
	return route[0]
}
