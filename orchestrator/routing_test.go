package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// routingKnown is Validate's known for the tests: fake_a, fake_b and
// fake_c are configured, off is disabled, anything else is unknown.
func routingKnown(name string) error {
	switch name {
	case "fake_a", "fake_b", "fake_c":
		return nil
	case "off":
		return fmt.Errorf("connector %q is disabled", name)
	}
	return fmt.Errorf("connector %q is not configured", name)
}

func i64(n int64) *int64 { return &n }

func priority(names ...string) orchestrator.ConnectorChoice {
	c := orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyPriority}
	for _, n := range names {
		c.Connectors = append(c.Connectors, orchestrator.WeightedConnector{Name: n})
	}
	return c
}

// split is a volume split over name, weight pairs.
func split(pairs ...any) orchestrator.ConnectorChoice {
	c := orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyVolumeSplit}
	for i := 0; i < len(pairs); i += 2 {
		c.Connectors = append(c.Connectors, orchestrator.WeightedConnector{Name: pairs[i].(string), Weight: pairs[i+1].(int)})
	}
	return c
}

// validRules uses every field of the rules, validly.
func validRules() orchestrator.RoutingRules {
	return orchestrator.RoutingRules{
		Rules: []orchestrator.RoutingRule{
			{Name: "euro", Match: orchestrator.RuleMatch{Currencies: []string{"EUR", "JPY"}, AmountMin: i64(1), AmountMax: i64(500_000),
				PaymentMethods: []string{"pm_card_visa"}, Metadata: map[string]string{"channel": "web"}},
				Connectors: priority("fake_a", "fake_b")},
			{Name: "rest", Connectors: split("fake_a", 70, "fake_b", 30)},
		},
		Default: priority("fake_c"),
	}
}

func TestRoutingRulesValidate(t *testing.T) {
	t.Parallel()
	if err := validRules().Validate(routingKnown); err != nil {
		t.Fatalf("valid rules refused: %v", err)
	}
	withAuthRate := validRules()
	withAuthRate.Default = authRate(&orchestrator.AuthRateOptions{ExplorationPercent: intp(0), EliminationGapPercent: 100,
		EliminationCooldownSeconds: 10}, "fake_a", "fake_c")
	if err := withAuthRate.Validate(routingKnown); err != nil {
		t.Fatalf("valid auth_rate rules refused: %v", err)
	}
	manyKeys := map[string]string{}
	for i := range 51 {
		manyKeys[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		name   string
		change func(r *orchestrator.RoutingRules)
		param  string
		msg    string // part of the message, if it matters
	}{
		{"TooManyRules", func(r *orchestrator.RoutingRules) {
			for i := range 100 {
				r.Rules = append(r.Rules, orchestrator.RoutingRule{Name: fmt.Sprint("r", i), Connectors: priority("fake_a")})
			}
		}, "rules", "at most 100"},
		{"EmptyRuleName", func(r *orchestrator.RoutingRules) { r.Rules[0].Name = "" }, "rules[0].name", ""},
		{"LongRuleName", func(r *orchestrator.RoutingRules) { r.Rules[1].Name = strings.Repeat("n", 65) }, "rules[1].name", ""},
		{"NULInRuleName", func(r *orchestrator.RoutingRules) { r.Rules[1].Name = "a\x00b" }, "rules[1].name", ""},
		{"DuplicateRuleName", func(r *orchestrator.RoutingRules) { r.Rules[1].Name = "euro" }, "rules[1].name", "rules[0]"},
		{"LowerCaseCurrency", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.Currencies[0] = "eur" }, "rules[0].match.currencies[0]", ""},
		{"NoSuchCurrency", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.Currencies[1] = "ZZZ" }, "rules[0].match.currencies[1]", "ZZZ"},
		{"AmountMinZero", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.AmountMin = i64(0) }, "rules[0].match.amount_min", ""},
		{"AmountMaxTooLarge", func(r *orchestrator.RoutingRules) {
			r.Rules[0].Match.AmountMax = i64(orchestrator.MaxAmountMinor + 1)
		}, "rules[0].match.amount_max", ""},
		{"AmountMaxBelowMin", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.AmountMin = i64(500_001) }, "rules[0].match.amount_max", "amount_min"},
		{"BadPaymentMethod", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.PaymentMethods = []string{"pm_card_visa", "visa"} },
			"rules[0].match.payment_methods[1]", ""},
		{"TooManyMetadataKeys", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.Metadata = manyKeys }, "rules[0].match.metadata", ""},
		{"LongMetadataKey", func(r *orchestrator.RoutingRules) {
			r.Rules[0].Match.Metadata = map[string]string{strings.Repeat("k", 41): "v"}
		}, "rules[0].match.metadata", ""},
		{"LongMetadataValue", func(r *orchestrator.RoutingRules) {
			r.Rules[0].Match.Metadata = map[string]string{"k": strings.Repeat("v", 501)}
		}, "rules[0].match.metadata", ""},
		{"NULInMetadata", func(r *orchestrator.RoutingRules) { r.Rules[0].Match.Metadata = map[string]string{"k": "\x00"} }, "rules[0].match.metadata", ""},
		{"UnknownStrategy", func(r *orchestrator.RoutingRules) { r.Rules[0].Connectors.Strategy = "random" }, "rules[0].connectors.strategy", ""},
		{"NoStrategy", func(r *orchestrator.RoutingRules) { r.Default.Strategy = "" }, "default.strategy", ""},
		{"NoConnectors", func(r *orchestrator.RoutingRules) { r.Default.Connectors = nil }, "default.connectors", ""},
		{"ElevenConnectors", func(r *orchestrator.RoutingRules) {
			for i := range 10 {
				r.Default.Connectors = append(r.Default.Connectors, orchestrator.WeightedConnector{Name: fmt.Sprint("c", i)})
			}
		}, "default.connectors", ""},
		{"EmptyConnectorName", func(r *orchestrator.RoutingRules) { r.Default.Connectors[0].Name = "" }, "default.connectors[0].name", ""},
		{"ConnectorTwice", func(r *orchestrator.RoutingRules) { r.Default = priority("fake_c", "fake_a", "fake_c") },
			"default.connectors[2].name", "twice"},
		{"UnknownConnector", func(r *orchestrator.RoutingRules) { r.Default = priority("fake_c", "fake_z") },
			"default.connectors[1].name", `connector "fake_z" is not configured`},
		{"DisabledConnector", func(r *orchestrator.RoutingRules) { r.Rules[1].Connectors = split("fake_a", 50, "off", 50) },
			"rules[1].connectors.connectors[1].name", `connector "off" is disabled`},
		{"SplitWeightZero", func(r *orchestrator.RoutingRules) { r.Rules[1].Connectors.Connectors[0].Weight = 0 },
			"rules[1].connectors.connectors[0].weight", ""},
		{"SplitWeightOver100", func(r *orchestrator.RoutingRules) { r.Rules[1].Connectors.Connectors[1].Weight = 101 },
			"rules[1].connectors.connectors[1].weight", ""},
		{"SplitWeightNegative", func(r *orchestrator.RoutingRules) { r.Rules[1].Connectors.Connectors[1].Weight = -30 },
			"rules[1].connectors.connectors[1].weight", ""},
		{"PriorityWithWeight", func(r *orchestrator.RoutingRules) { r.Rules[0].Connectors.Connectors[1].Weight = 10 },
			"rules[0].connectors.connectors[1].weight", ""},
		{"AuthRateWithWeight", func(r *orchestrator.RoutingRules) {
			r.Default = authRate(nil, "fake_a", "fake_c")
			r.Default.Connectors[0].Weight = 10
		}, "default.connectors[0].weight", "auth_rate"},
		{"AuthRateOptionsOnPriority", func(r *orchestrator.RoutingRules) {
			r.Rules[0].Connectors.AuthRate = &orchestrator.AuthRateOptions{}
		}, "rules[0].connectors.auth_rate", "auth_rate strategy only"},
		{"ExplorationNegative", func(r *orchestrator.RoutingRules) {
			r.Default = authRate(&orchestrator.AuthRateOptions{ExplorationPercent: intp(-1)}, "fake_a")
		}, "default.auth_rate.exploration_percent", ""},
		{"ExplorationOver50", func(r *orchestrator.RoutingRules) {
			r.Default = authRate(&orchestrator.AuthRateOptions{ExplorationPercent: intp(51)}, "fake_a")
		}, "default.auth_rate.exploration_percent", ""},
		{"EliminationGapOver100", func(r *orchestrator.RoutingRules) {
			r.Default = authRate(&orchestrator.AuthRateOptions{EliminationGapPercent: 101}, "fake_a")
		}, "default.auth_rate.elimination_gap_percent", ""},
		{"EliminationCooldownShort", func(r *orchestrator.RoutingRules) {
			r.Default = authRate(&orchestrator.AuthRateOptions{EliminationCooldownSeconds: 9}, "fake_a")
		}, "default.auth_rate.elimination_cooldown_seconds", ""},
		{"EliminationCooldownLong", func(r *orchestrator.RoutingRules) {
			r.Default = authRate(&orchestrator.AuthRateOptions{EliminationCooldownSeconds: 86401}, "fake_a")
		}, "default.auth_rate.elimination_cooldown_seconds", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRules()
			tc.change(&r)
			err := r.Validate(routingKnown)
			var e *orchestrator.Error
			if !errors.As(err, &e) || e.Code != orchestrator.CodeValidationFailed || e.Param != tc.param ||
				!strings.Contains(e.Message, tc.msg) {
				t.Fatalf("Validate: %v (param %q), want validation_failed on %q saying %q", err, paramOf(err), tc.param, tc.msg)
			}
		})
	}
}

func intp(n int) *int { return &n }

// authRate is an auth_rate choice of names with opts.
func authRate(opts *orchestrator.AuthRateOptions, names ...string) orchestrator.ConnectorChoice {
	c := priority(names...)
	c.Strategy, c.AuthRate = orchestrator.StrategyAuthRate, opts
	return c
}

func paramOf(err error) string {
	var e *orchestrator.Error
	if errors.As(err, &e) {
		return e.Param
	}
	return ""
}

func TestRoutingDecide(t *testing.T) {
	t.Parallel()
	rules := orchestrator.RoutingRules{
		Rules: []orchestrator.RoutingRule{
			{Name: "large", Match: orchestrator.RuleMatch{AmountMin: i64(100_000)}, Connectors: priority("fake_c")},
			{Name: "vip", Match: orchestrator.RuleMatch{Metadata: map[string]string{"tier": "vip", "region": ""}},
				Connectors: priority("fake_b", "fake_a")},
			{Name: "euro", Match: orchestrator.RuleMatch{Currencies: []string{"EUR"}}, Connectors: priority("fake_a", "fake_b")},
			{Name: "dollar", Match: orchestrator.RuleMatch{Currencies: []string{"USD", "CAD"}}, Connectors: priority("fake_b", "fake_a")},
			{Name: "small-mastercard", Match: orchestrator.RuleMatch{AmountMin: i64(100), AmountMax: i64(500),
				PaymentMethods: []string{"pm_card_mastercard"}}, Connectors: priority("fake_c", "fake_b")},
		},
		Default: priority("fake_c", "fake_a"),
	}
	if err := rules.Validate(routingKnown); err != nil {
		t.Fatal(err)
	}
	visa := orchestrator.DefaultPaymentMethod
	for _, tc := range []struct {
		name string
		in   orchestrator.RouteInput
		rule string
		want []string
	}{
		{"EuroToItsRule", orchestrator.RouteInput{AmountMinor: 1000, Currency: "EUR", PaymentMethod: visa}, "euro", []string{"fake_a", "fake_b"}},
		{"DollarApartFromEuro", orchestrator.RouteInput{AmountMinor: 1000, Currency: "USD", PaymentMethod: visa}, "dollar", []string{"fake_b", "fake_a"}},
		{"SecondCurrencyOfARule", orchestrator.RouteInput{AmountMinor: 1000, Currency: "CAD", PaymentMethod: visa}, "dollar", []string{"fake_b", "fake_a"}},
		{"AmountMinIsInclusive", orchestrator.RouteInput{AmountMinor: 100_000, Currency: "EUR", PaymentMethod: visa}, "large", []string{"fake_c"}},
		{"BelowAmountMin", orchestrator.RouteInput{AmountMinor: 99_999, Currency: "EUR", PaymentMethod: visa}, "euro", []string{"fake_a", "fake_b"}},
		{"AmountRangeAndMethod", orchestrator.RouteInput{AmountMinor: 500, Currency: "GBP", PaymentMethod: "pm_card_mastercard"},
			"small-mastercard", []string{"fake_c", "fake_b"}},
		{"AboveAmountMax", orchestrator.RouteInput{AmountMinor: 501, Currency: "GBP", PaymentMethod: "pm_card_mastercard"}, "", []string{"fake_c", "fake_a"}},
		{"BelowAmountMinOfRange", orchestrator.RouteInput{AmountMinor: 99, Currency: "GBP", PaymentMethod: "pm_card_mastercard"}, "", []string{"fake_c", "fake_a"}},
		{"OtherMethod", orchestrator.RouteInput{AmountMinor: 300, Currency: "GBP", PaymentMethod: visa}, "", []string{"fake_c", "fake_a"}},
		{"MetadataAllEqual", orchestrator.RouteInput{AmountMinor: 1000, Currency: "EUR", PaymentMethod: visa,
			Metadata: map[string]string{"tier": "vip", "region": "", "other": "x"}}, "vip", []string{"fake_b", "fake_a"}},
		{"MetadataKeyMissingIsNotEmpty", orchestrator.RouteInput{AmountMinor: 1000, Currency: "EUR", PaymentMethod: visa,
			Metadata: map[string]string{"tier": "vip"}}, "euro", []string{"fake_a", "fake_b"}},
		{"MetadataValueDiffers", orchestrator.RouteInput{AmountMinor: 1000, Currency: "EUR", PaymentMethod: visa,
			Metadata: map[string]string{"tier": "VIP", "region": ""}}, "euro", []string{"fake_a", "fake_b"}},
		{"NothingMatchesDefault", orchestrator.RouteInput{AmountMinor: 1000, Currency: "GBP", PaymentMethod: visa}, "", []string{"fake_c", "fake_a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.PaymentID = orchestrator.PaymentID(1, tc.name)
			rule, got := rules.Decide(tc.in)
			if rule != tc.rule || !slices.Equal(got, tc.want) {
				t.Fatalf("Decide = %q %v, want %q %v", rule, got, tc.rule, tc.want)
			}
			// The caller owns the slice: changing it changes no rule.
			got[0] = "changed"
			if _, again := rules.Decide(tc.in); !slices.Equal(again, tc.want) {
				t.Fatalf("after the caller changed its slice: %v", again)
			}
		})
	}
}

// volumeSplitTolerance: over 1,000 payments the share of a 70/30 split
// lands within ±5 percentage points of 70% (±3.4 standard deviations of a
// binomial share, 1.45 points).
const volumeSplitTolerance = 5.0

func TestRoutingVolumeSplit(t *testing.T) {
	t.Parallel()
	rules := orchestrator.RoutingRules{Default: split("fake_a", 70, "fake_b", 30)}
	if err := rules.Validate(routingKnown); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(14, 2))
	const n = 1000
	picks := map[string]int{}
	for i := range n {
		id := orchestrator.PaymentID(int64(1+r.IntN(1000)), fmt.Sprintf("order-%d-%d", i, r.Uint64()))
		in := orchestrator.RouteInput{PaymentID: id, AmountMinor: 1000, Currency: "EUR", PaymentMethod: orchestrator.DefaultPaymentMethod}
		rule, got := rules.Decide(in)
		if rule != "" || len(got) != 2 || got[0] == got[1] {
			t.Fatalf("Decide = %q %v", rule, got)
		}
		// The rest follow as fallbacks.
		if got[0] == "fake_b" && got[1] != "fake_a" || got[0] == "fake_a" && got[1] != "fake_b" {
			t.Fatalf("order %v", got)
		}
		picks[got[0]]++
		// The same payment always gets the same connectors.
		for range 3 {
			if _, again := rules.Decide(in); !slices.Equal(again, got) {
				t.Fatalf("payment %s routed %v, then %v", id, got, again)
			}
		}
	}
	share := 100 * float64(picks["fake_a"]) / n
	t.Logf("fake_a %d, fake_b %d of %d: %.1f%% to fake_a", picks["fake_a"], picks["fake_b"], n, share)
	if share < 70-volumeSplitTolerance || share > 70+volumeSplitTolerance {
		t.Fatalf("%.1f%% of payments to fake_a, want 70%% ± %.0f points", share, volumeSplitTolerance)
	}

	t.Run("FallbacksInDescendingWeight", func(t *testing.T) {
		three := orchestrator.RoutingRules{Default: split("fake_c", 20, "fake_a", 30, "fake_b", 50)}
		want := map[string][]string{
			"fake_b": {"fake_b", "fake_a", "fake_c"},
			"fake_a": {"fake_a", "fake_b", "fake_c"},
			"fake_c": {"fake_c", "fake_b", "fake_a"},
		}
		seen := map[string]bool{}
		for i := range 200 {
			_, got := three.Decide(orchestrator.RouteInput{PaymentID: orchestrator.PaymentID(7, fmt.Sprint(i))})
			if !slices.Equal(got, want[got[0]]) {
				t.Fatalf("order %v, want %v", got, want[got[0]])
			}
			seen[got[0]] = true
		}
		if len(seen) != 3 {
			t.Fatalf("200 payments picked only %v", seen)
		}
	})
}

// newRoutingService is a Service with connectors fake_a, fake_b (one fake
// provider under two names: routing never calls them) and off, disabled,
// and a clock.
func newRoutingService(t *testing.T) (*orchestrator.Service, *testkit.Clock) {
	t.Helper()
	fr, err := fake.Start("127.0.0.1:0", fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	fc := fr.Client(&http.Client{})
	clk := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	return orchestrator.NewService(orchestrator.Config{
		Pool: pgtest.DB(t), Clock: clk.Now, DefaultProvider: "fake_a",
		Providers:  map[string]providers.Provider{"fake_a": fc, "fake_b": fc, "off": fc},
		Connectors: map[string]orchestrator.ConnectorOptions{"off": {Disabled: true}},
	}), clk
}

func TestRoutingVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := newRoutingService(t)
	tenant, _, _, err := s.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	eurToB := orchestrator.RoutingRules{
		Rules:   []orchestrator.RoutingRule{{Name: "euro", Match: orchestrator.RuleMatch{Currencies: []string{"EUR"}}, Connectors: priority("fake_b")}},
		Default: priority("fake_a", "fake_b"),
	}
	splitAB := orchestrator.RoutingRules{Rules: []orchestrator.RoutingRule{}, Default: split("fake_a", 70, "fake_b", 30)}

	t.Run("NoneStoredIsTheBuiltInDefault", func(t *testing.T) {
		v, err := s.Routing(ctx, tenant.ID)
		if err != nil || v.Version != 0 || v.TenantID != tenant.ID || len(v.Rules.Rules) != 0 ||
			!slices.Equal(connectorNames(v.Rules.Default), []string{"fake_a"}) || v.Rules.Default.Strategy != "priority" {
			t.Fatalf("routing %+v %v", v, err)
		}
		b, _ := json.Marshal(v)
		if string(b) != fmt.Sprintf(`{"tenant_id":%d,"version":0,"rules":{"rules":[],"default":{"strategy":"priority","connectors":[{"name":"fake_a"}]}}}`, tenant.ID) {
			t.Fatalf("version 0 as JSON: %s", b)
		}
		if vs, more, err := s.RoutingVersions(ctx, tenant.ID, orchestrator.RoutingVersionFilter{}); err != nil || len(vs) != 0 || more {
			t.Fatalf("versions before any: %v %v %v", vs, more, err)
		}
	})

	t.Run("EachChangeIsTheNextVersion", func(t *testing.T) {
		v1, err := s.SetRouting(ctx, tenant.ID, eurToB, "key_admin1")
		if err != nil || v1.Version != 1 || v1.CreatedBy != "key_admin1" || !v1.CreatedAt.Equal(clk.Now()) {
			t.Fatalf("first PUT: %+v %v", v1, err)
		}
		clk.Add(time.Minute)
		v2, err := s.SetRouting(ctx, tenant.ID, splitAB, "key_admin2")
		if err != nil || v2.Version != 2 {
			t.Fatalf("second PUT: %+v %v", v2, err)
		}
		active, err := s.Routing(ctx, tenant.ID)
		if err != nil || active.Version != 2 || active.CreatedBy != "key_admin2" || !active.CreatedAt.Equal(clk.Now()) {
			t.Fatalf("active: %+v %v", active, err)
		}
		sameJSON(t, "active rules", active.Rules, splitAB)
		vs, more, err := s.RoutingVersions(ctx, tenant.ID, orchestrator.RoutingVersionFilter{})
		if err != nil || more || len(vs) != 2 || vs[0].Version != 2 || vs[1].Version != 1 {
			t.Fatalf("versions: %+v %v %v", vs, more, err)
		}
		sameJSON(t, "version 1's rules", vs[1].Rules, eurToB)
		// Pages, newest first.
		page, more, err := s.RoutingVersions(ctx, tenant.ID, orchestrator.RoutingVersionFilter{Limit: 1})
		if err != nil || !more || len(page) != 1 || page[0].Version != 2 {
			t.Fatalf("first page: %+v %v %v", page, more, err)
		}
		page, more, err = s.RoutingVersions(ctx, tenant.ID, orchestrator.RoutingVersionFilter{Limit: 1, StartingAfter: 2})
		if err != nil || more || len(page) != 1 || page[0].Version != 1 {
			t.Fatalf("second page: %+v %v %v", page, more, err)
		}
	})

	t.Run("TheActiveRulesAgainStoreNothing", func(t *testing.T) {
		v, err := s.SetRouting(ctx, tenant.ID, splitAB, "key_admin3")
		if err != nil || v.Version != 2 || v.CreatedBy != "key_admin2" {
			t.Fatalf("same rules again: %+v %v", v, err)
		}
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM routing_versions WHERE tenant_id = $1`, tenant.ID).Scan(&n); err != nil || n != 2 {
			t.Fatalf("%d versions stored (%v), want 2", n, err)
		}
		// Rules equal to an older version are a new version.
		if v, err := s.SetRouting(ctx, tenant.ID, eurToB, "key_admin1"); err != nil || v.Version != 3 {
			t.Fatalf("version 1's rules again: %+v %v", v, err)
		}
	})

	t.Run("UnknownOrDisabledConnectorIsRefused", func(t *testing.T) {
		for _, tc := range []struct {
			rules orchestrator.RoutingRules
			param string
			msg   string
		}{
			{orchestrator.RoutingRules{Default: priority("fake_a", "stripe")}, "default.connectors[1].name", `connector "stripe" is not configured`},
			{orchestrator.RoutingRules{Rules: []orchestrator.RoutingRule{{Name: "r", Connectors: split("off", 10, "fake_a", 90)}},
				Default: priority("fake_a")}, "rules[0].connectors.connectors[0].name", `connector "off" is disabled`},
		} {
			_, err := s.SetRouting(ctx, tenant.ID, tc.rules, "key_admin1")
			var e *orchestrator.Error
			if !errors.As(err, &e) || e.Code != orchestrator.CodeValidationFailed || e.Param != tc.param || e.Message != tc.msg {
				t.Fatalf("SetRouting: %v (param %q), want %q on %q", err, paramOf(err), tc.msg, tc.param)
			}
		}
		if v, _ := s.Routing(ctx, tenant.ID); v.Version != 3 {
			t.Fatalf("a refused change made version %d", v.Version)
		}
	})

	t.Run("UnknownTenantIsNotFound", func(t *testing.T) {
		_, err := s.SetRouting(ctx, tenant.ID+1000, splitAB, "key_admin1")
		wantCode(t, err, orchestrator.CodeNotFound)
		_, err = s.Routing(ctx, tenant.ID+1000)
		wantCode(t, err, orchestrator.CodeNotFound)
		_, _, err = s.RoutingVersions(ctx, tenant.ID+1000, orchestrator.RoutingVersionFilter{})
		wantCode(t, err, orchestrator.CodeNotFound)
		_, _, err = s.RoutingVersions(ctx, tenant.ID, orchestrator.RoutingVersionFilter{Limit: 101})
		wantCode(t, err, orchestrator.CodeValidationFailed)
	})
}

// Concurrent changes each get a version of their own, numbered without a
// gap; none is lost.
func TestRoutingConcurrentChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newRoutingService(t)
	tenant, _, _, err := s.CreateTenant(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var wg sync.WaitGroup
	versions := make([]int, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			v, err := s.SetRouting(ctx, tenant.ID, orchestrator.RoutingRules{Default: split("fake_a", 1+i, "fake_b", 50)}, fmt.Sprint("key_", i))
			versions[i], errs[i] = v.Version, err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	slices.Sort(versions)
	if !slices.Equal(versions, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("versions %v, want 1 to 5", versions)
	}
	vs, _, err := s.RoutingVersions(ctx, tenant.ID, orchestrator.RoutingVersionFilter{})
	if err != nil || len(vs) != n {
		t.Fatalf("%d versions stored (%v)", len(vs), err)
	}
	if active, err := s.Routing(ctx, tenant.ID); err != nil || active.Version != n {
		t.Fatalf("active %d (%v)", active.Version, err)
	}
}

func connectorNames(c orchestrator.ConnectorChoice) []string {
	var out []string
	for _, wc := range c.Connectors {
		out = append(out, wc.Name)
	}
	return out
}

// BenchmarkRouteDecide: the routing decision of one payment with 100
// rules, the matching one last (every rule before it is tried and
// fails on its last field). CPU only, no database.
func BenchmarkRouteDecide(b *testing.B) {
	rules := orchestrator.RoutingRules{Default: priority("fake_c")}
	for i := range 100 {
		rules.Rules = append(rules.Rules, orchestrator.RoutingRule{
			Name: fmt.Sprint("rule-", i),
			Match: orchestrator.RuleMatch{Currencies: []string{"USD", "GBP", "EUR", "JPY"}, AmountMin: i64(100), AmountMax: i64(1_000_000),
				PaymentMethods: []string{"pm_card_visa", "pm_card_mastercard"},
				Metadata:       map[string]string{"channel": "web", "segment": fmt.Sprint("s", i)}},
			Connectors: split("fake_a", 70, "fake_b", 20, "fake_c", 10),
		})
	}
	if err := rules.Validate(routingKnown); err != nil {
		b.Fatal(err)
	}
	in := orchestrator.RouteInput{PaymentID: orchestrator.PaymentID(1, "order-1"), AmountMinor: 10_000, Currency: "EUR",
		PaymentMethod: "pm_card_visa", Metadata: map[string]string{"channel": "web", "segment": "s99", "order": "1"}}
	if rule, got := rules.Decide(in); rule != "rule-99" || len(got) != 3 {
		b.Fatalf("Decide = %q %v, want rule-99", rule, got)
	}
	b.ReportAllocs()
	for b.Loop() {
		rules.Decide(in)
	}
}
