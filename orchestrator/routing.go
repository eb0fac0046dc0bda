package orchestrator

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Routing rules (SPEC: Connectors and routing): per tenant, an ordered list
// of rules, each matching payments on currency, amount range, payment
// method and metadata and naming the connectors to try, and a default for
// payments no rule matches. They are stored as versions (routingversion.go)
// and decided in memory (Decide), on every authorization.

// The routing strategies of a ConnectorChoice.
const (
	// StrategyPriority tries the connectors in the order listed.
	StrategyPriority = "priority"
	// StrategyVolumeSplit sends each payment first to one connector,
	// picked by weight from the payment id (the same payment always picks
	// the same one), then to the others in descending weight.
	StrategyVolumeSplit = "volume_split"
	// StrategyAuthRate sends each payment first to the connector its
	// measured authorization rate favours, with a share of exploration,
	// and orders the rest by the same draw (authrate.go).
	StrategyAuthRate = "auth_rate"
)

// Limits on routing rules.
const (
	MaxRoutingRules       = 100
	MaxRuleConnectors     = 10
	MaxConnectorWeight    = 100
	maxRuleNameLen        = 64
	maxRuleCurrencies     = 200
	maxRulePaymentMethods = 100
	maxConnectorNameLen   = 64
)

// paymentMethodRE is the shape of the payment methods a routing rule may
// match on: the shape every adapter accepts today (Stripe's pm_… ids; the
// fake copies it; see their CheckPaymentMethod). A payment's own method is
// checked by its connector's adapter, not by this.
var paymentMethodRE = regexp.MustCompile(`^pm_[A-Za-z0-9_]{1,100}$`)

// RoutingRules are a tenant's routing: the first rule that matches a
// payment picks its connectors; Default picks them when none does.
type RoutingRules struct {
	Rules   []RoutingRule   `json:"rules"`
	Default ConnectorChoice `json:"default"`
}

// RoutingRule sends the payments it matches to its connectors.
type RoutingRule struct {
	// Name is unique among the tenant's rules, 1 to 64 characters.
	Name       string          `json:"name"`
	Match      RuleMatch       `json:"match"`
	Connectors ConnectorChoice `json:"connectors"`
}

// RuleMatch says which payments a rule matches: all of its non-empty
// fields must match; an empty field matches anything.
type RuleMatch struct {
	// Currencies: the payment's currency is one of them.
	Currencies []string `json:"currencies,omitempty"`
	// AmountMin and AmountMax bound the amount in minor units, both
	// inclusive; nil is no bound.
	AmountMin *int64 `json:"amount_min,omitempty"`
	AmountMax *int64 `json:"amount_max,omitempty"`
	// PaymentMethods: the payment's method is one of them.
	PaymentMethods []string `json:"payment_methods,omitempty"`
	// Metadata: the payment's metadata has each of these keys with this
	// value.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ConnectorChoice is the connectors a rule (or the default) sends payments
// to, and how it orders them.
type ConnectorChoice struct {
	// Strategy is StrategyPriority, StrategyVolumeSplit or
	// StrategyAuthRate.
	Strategy   string              `json:"strategy"`
	Connectors []WeightedConnector `json:"connectors"`
	// AuthRate tunes StrategyAuthRate (nil: the defaults); only that
	// strategy takes it.
	AuthRate *AuthRateOptions `json:"auth_rate,omitempty"`
}

// WeightedConnector is a connector of a choice; Weight (1 to 100) is its
// share of payments under StrategyVolumeSplit, relative to the sum of
// the choice's weights, and must be absent (0) under StrategyPriority and
// StrategyAuthRate.
type WeightedConnector struct {
	Name   string `json:"name"`
	Weight int    `json:"weight,omitempty"`
}

// RouteInput is what routing knows of a payment.
type RouteInput struct {
	// PaymentID seeds the pick of a volume split: the same payment always
	// gets the same connectors.
	PaymentID   string
	AmountMinor int64
	Currency    string
	// PaymentMethod is the payment's method after defaults
	// (DefaultPaymentMethod when the request named none).
	PaymentMethod string
	Metadata      map[string]string
	// CardBrand is the brand of the payment's vaulted card, "" when the
	// method is a provider's token (auth_rate's per-brand scores).
	CardBrand string
}

// Decide routes a payment: the first rule that matches in wins, else the
// default. It returns the rule's name ("" for the default) and the
// connectors to try, in order (a new slice, the caller's). Connectors are
// returned as the rules name them; whether each is still configured and
// enabled is the caller's to check. It reads no database and allocates
// only the returned slice (BenchmarkRouteDecide).
//
// An auth_rate choice is returned in its listed order here: ordering it
// takes the measured scores, which routeFor has (Service.authRateOrder).
func (r RoutingRules) Decide(in RouteInput) (rule string, connectors []string) {
	rule, c := r.Match(in)
	return rule, c.order(in.PaymentID)
}

// Match returns the first rule that matches in (its name and its
// choice), else the default ("" and the default's choice). The choice
// points into r.
func (r *RoutingRules) Match(in RouteInput) (rule string, choice *ConnectorChoice) {
	for i := range r.Rules {
		if r.Rules[i].Match.matches(&in) {
			return r.Rules[i].Name, &r.Rules[i].Connectors
		}
	}
	return "", &r.Default
}

// matches reports whether the payment in satisfies every field of m.
func (m *RuleMatch) matches(in *RouteInput) bool {
	if m.AmountMin != nil && in.AmountMinor < *m.AmountMin || m.AmountMax != nil && in.AmountMinor > *m.AmountMax {
		return false
	}
	if len(m.Currencies) > 0 && !slices.Contains(m.Currencies, in.Currency) {
		return false
	}
	if len(m.PaymentMethods) > 0 && !slices.Contains(m.PaymentMethods, in.PaymentMethod) {
		return false
	}
	for k, want := range m.Metadata {
		if got, ok := in.Metadata[k]; !ok || got != want {
			return false
		}
	}
	return true
}

// order lists the choice's connectors for the payment paymentID: as
// listed (priority), or the one picked by weight first and the others in
// descending weight, ties in list order (volume split).
func (c *ConnectorChoice) order(paymentID string) []string {
	out := make([]string, 0, len(c.Connectors))
	if c.Strategy != StrategyVolumeSplit || len(c.Connectors) < 2 {
		for _, wc := range c.Connectors {
			out = append(out, wc.Name)
		}
		return out
	}
	total := 0
	for _, wc := range c.Connectors {
		total += max(wc.Weight, 0)
	}
	picked := 0
	if total > 0 {
		n := int(splitHash(paymentID) % uint64(total))
		for i, wc := range c.Connectors {
			if n -= max(wc.Weight, 0); n < 0 {
				picked = i
				break
			}
		}
	}
	out = append(out, c.Connectors[picked].Name)
	// The rest by descending weight: at most 10 connectors, so a
	// selection by repeated scans, which allocates nothing.
	var taken uint16 = 1 << picked
	for len(out) < len(c.Connectors) {
		best := -1
		for i, wc := range c.Connectors {
			if taken&(1<<i) == 0 && (best < 0 || wc.Weight > c.Connectors[best].Weight) {
				best = i
			}
		}
		taken |= 1 << best
		out = append(out, c.Connectors[best].Name)
	}
	return out
}

// splitHash is a uniform 64-bit hash of a payment id: FNV-1a, then
// MurmurHash3's finalizer, so every bit depends on every byte.
func splitHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Validate checks every field of r and returns the first fault, in
// document order, as validation_failed whose Param is the field's path
// (e.g. rules[2].match.currencies[0], default.connectors[1].name). known
// refuses a connector name that rules may not use (unknown or disabled);
// its error's message is the problem's. Errors: validation_failed.
func (r RoutingRules) Validate(known func(name string) error) error {
	if len(r.Rules) > MaxRoutingRules {
		return ParamError("rules", "at most %d rules", MaxRoutingRules)
	}
	names := make(map[string]int, len(r.Rules))
	for i := range r.Rules {
		rule := &r.Rules[i]
		at := "rules[" + strconv.Itoa(i) + "]"
		if rule.Name == "" || !ValidText(rule.Name) || utf8.RuneCountInString(rule.Name) > maxRuleNameLen {
			return ParamError(at+".name", "a rule's name must be 1 to %d characters of text", maxRuleNameLen)
		}
		if j, dup := names[rule.Name]; dup {
			return ParamError(at+".name", "rule name %q is also the name of rules[%d]", rule.Name, j)
		}
		names[rule.Name] = i
		if err := rule.Match.validate(at + ".match"); err != nil {
			return err
		}
		if err := rule.Connectors.validate(at+".connectors", known); err != nil {
			return err
		}
	}
	return r.Default.validate("default", known)
}

// validate checks a rule's match; at is its path.
func (m *RuleMatch) validate(at string) error {
	if len(m.Currencies) > maxRuleCurrencies {
		return ParamError(at+".currencies", "at most %d currencies", maxRuleCurrencies)
	}
	for i, c := range m.Currencies {
		if _, err := ValidateCurrency(c); err != nil {
			return ParamError(at+".currencies["+strconv.Itoa(i)+"]", "%s", err.(*Error).Message)
		}
	}
	for _, b := range []struct {
		name string
		v    *int64
	}{{"amount_min", m.AmountMin}, {"amount_max", m.AmountMax}} {
		if b.v != nil && (*b.v < 1 || *b.v > MaxAmountMinor) {
			return ParamError(at+"."+b.name, "%s must be a whole number from 1 to %d (minor units)", b.name, int64(MaxAmountMinor))
		}
	}
	if m.AmountMin != nil && m.AmountMax != nil && *m.AmountMax < *m.AmountMin {
		return ParamError(at+".amount_max", "amount_max must not be less than amount_min")
	}
	if len(m.PaymentMethods) > maxRulePaymentMethods {
		return ParamError(at+".payment_methods", "at most %d payment methods", maxRulePaymentMethods)
	}
	for i, pm := range m.PaymentMethods {
		if !paymentMethodRE.MatchString(pm) {
			return ParamError(at+".payment_methods["+strconv.Itoa(i)+"]", "a payment method must look like pm_card_visa")
		}
	}
	if len(m.Metadata) > maxMetadataKeys {
		return ParamError(at+".metadata", "metadata has more than %d keys", maxMetadataKeys)
	}
	for k, v := range m.Metadata {
		if !ValidText(k) || !ValidText(v) || k == "" || utf8.RuneCountInString(k) > maxMetadataKeyLen ||
			utf8.RuneCountInString(v) > maxMetadataValueLen {
			return ParamError(at+".metadata", "metadata keys must be 1 to %d characters and values at most %d, of text",
				maxMetadataKeyLen, maxMetadataValueLen)
		}
	}
	return nil
}

// validate checks a connector choice; at is its path.
func (c *ConnectorChoice) validate(at string, known func(string) error) error {
	if c.Strategy != StrategyPriority && c.Strategy != StrategyVolumeSplit && c.Strategy != StrategyAuthRate {
		return ParamError(at+".strategy", "strategy must be %s, %s or %s", StrategyPriority, StrategyVolumeSplit,
			StrategyAuthRate)
	}
	if c.AuthRate != nil {
		if c.Strategy != StrategyAuthRate {
			return ParamError(at+".auth_rate", "auth_rate options apply to the %s strategy only", StrategyAuthRate)
		}
		if err := c.AuthRate.validate(at + ".auth_rate"); err != nil {
			return err
		}
	}
	if len(c.Connectors) < 1 || len(c.Connectors) > MaxRuleConnectors {
		return ParamError(at+".connectors", "list 1 to %d connectors", MaxRuleConnectors)
	}
	for i, wc := range c.Connectors {
		cat := at + ".connectors[" + strconv.Itoa(i) + "]"
		if wc.Name == "" || !ValidText(wc.Name) || utf8.RuneCountInString(wc.Name) > maxConnectorNameLen {
			return ParamError(cat+".name", "a connector's name must be 1 to %d characters", maxConnectorNameLen)
		}
		for j := range i {
			if c.Connectors[j].Name == wc.Name {
				return ParamError(cat+".name", "connector %q is listed twice", wc.Name)
			}
		}
		if err := known(wc.Name); err != nil {
			msg := err.Error()
			if e, ok := err.(*Error); ok {
				msg = e.Message
			}
			return ParamError(cat+".name", "%s", msg)
		}
		switch {
		case c.Strategy == StrategyVolumeSplit && (wc.Weight < 1 || wc.Weight > MaxConnectorWeight):
			return ParamError(cat+".weight", "a volume_split connector needs a weight from 1 to %d", MaxConnectorWeight)
		case c.Strategy != StrategyVolumeSplit && wc.Weight != 0:
			return ParamError(cat+".weight", "a %s connector has no weight", c.Strategy)
		}
	}
	return nil
}

// routableConnector is Validate's known for this Service: a connector
// rules may name is configured and not disabled.
func (s *Service) routableConnector(name string) error {
	if _, ok := s.providers[name]; !ok {
		return fmt.Errorf("connector %q is not configured", name)
	}
	if s.connectors[name].Disabled {
		return fmt.Errorf("connector %q is disabled", name)
	}
	return nil
}

// defaultRouting is the routing of a tenant that has stored none: every
// payment to the default connector.
func (s *Service) defaultRouting() RoutingRules {
	return RoutingRules{Rules: []RoutingRule{},
		Default: ConnectorChoice{Strategy: StrategyPriority, Connectors: []WeightedConnector{{Name: s.defaultProvider}}}}
}
