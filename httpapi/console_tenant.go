package httpapi

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// consoleRoutingVersions bounds the versions listed on a tenant's page.
const consoleRoutingVersions = 20

// tenantsPage is the data of the tenants list.
type tenantsPage struct {
	Tenants []orchestrator.Tenant
}

// consoleTenants: GET /console/tenants (admin) lists every tenant.
func (s *Server) consoleTenants(c echo.Context) error {
	ts, err := s.svc.ListTenants(c.Request().Context())
	if err != nil {
		return s.consoleError(c, err)
	}
	return s.render(c, http.StatusOK, "tenants", "Tenants", tenantsPage{Tenants: ts})
}

// tenantPage is the data of one tenant's page: its active routing,
// rule by rule, and its stored versions.
type tenantPage struct {
	Tenant   orchestrator.Tenant
	Routing  orchestrator.RoutingVersion
	Rules    []ruleRow
	Versions []orchestrator.RoutingVersion
	More     bool
}

// ruleRow is a routing rule (or the default) as the console shows it.
type ruleRow struct {
	Position   int // 1-based; 0 for the default
	Name       string
	Conditions []string
	Strategy   string
	Connectors []string
}

// consoleTenant: GET /console/tenants/{id} (admin) shows the tenant's
// active routing version and its rules, read-only, and its versions.
func (s *Server) consoleTenant(c echo.Context) error {
	id, err := idParam(c, "tenant")
	if err != nil {
		return s.consoleError(c, err)
	}
	ctx := c.Request().Context()
	t, err := s.svc.TenantByID(ctx, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	v, err := s.svc.Routing(ctx, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	vs, more, err := s.svc.RoutingVersions(ctx, id, orchestrator.RoutingVersionFilter{Limit: consoleRoutingVersions})
	if err != nil {
		return s.consoleError(c, err)
	}
	page := tenantPage{Tenant: t, Routing: v, Versions: vs, More: more}
	for i, r := range v.Rules.Rules {
		page.Rules = append(page.Rules, ruleRow{Position: i + 1, Name: r.Name, Conditions: ruleConditions(r.Match),
			Strategy: r.Connectors.Strategy, Connectors: choiceConnectors(r.Connectors)})
	}
	page.Rules = append(page.Rules, ruleRow{Name: "default", Conditions: []string{"any payment no rule matched"},
		Strategy: v.Rules.Default.Strategy, Connectors: choiceConnectors(v.Rules.Default)})
	return s.render(c, http.StatusOK, "tenant", "Tenant "+t.Name, page)
}

// ruleConditions describes what a rule matches, one condition a line.
func ruleConditions(m orchestrator.RuleMatch) []string {
	var out []string
	if len(m.Currencies) > 0 {
		out = append(out, "currency "+strings.Join(m.Currencies, ", "))
	}
	amount := func(n int64) string {
		if len(m.Currencies) == 1 {
			return formatMinor(n, m.Currencies[0])
		}
		return strconv.FormatInt(n, 10) + " minor units"
	}
	switch {
	case m.AmountMin != nil && m.AmountMax != nil:
		out = append(out, "amount "+amount(*m.AmountMin)+" to "+amount(*m.AmountMax))
	case m.AmountMin != nil:
		out = append(out, "amount at least "+amount(*m.AmountMin))
	case m.AmountMax != nil:
		out = append(out, "amount at most "+amount(*m.AmountMax))
	}
	if len(m.PaymentMethods) > 0 {
		out = append(out, "payment method "+strings.Join(m.PaymentMethods, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Metadata)) {
		out = append(out, fmt.Sprintf("metadata %s = %q", k, m.Metadata[k]))
	}
	if len(out) == 0 {
		out = append(out, "any payment")
	}
	return out
}

// choiceConnectors lists a choice's connectors in order, each of a volume
// split with its share of payments.
func choiceConnectors(c orchestrator.ConnectorChoice) []string {
	total := 0
	for _, wc := range c.Connectors {
		total += wc.Weight
	}
	out := make([]string, 0, len(c.Connectors))
	for _, wc := range c.Connectors {
		if c.Strategy == orchestrator.StrategyVolumeSplit && total > 0 {
			out = append(out, fmt.Sprintf("%s (%d%%)", wc.Name, (wc.Weight*100+total/2)/total))
			continue
		}
		out = append(out, wc.Name)
	}
	return out
}
