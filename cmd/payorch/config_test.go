package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

func TestConsoleSignInLimitConfig(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]int{"": 10, "0": 0, "25": 25} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_CONSOLE_SIGNIN_LIMIT": env}))
		if err != nil || cfg.ConsoleSignInLimit != want {
			t.Errorf("PAYORCH_CONSOLE_SIGNIN_LIMIT=%q: %d (%v), want %d", env, cfg.ConsoleSignInLimit, err, want)
		}
	}
	for _, bad := range []string{"-1", "many"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_CONSOLE_SIGNIN_LIMIT": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_CONSOLE_SIGNIN_LIMIT") {
			t.Errorf("PAYORCH_CONSOLE_SIGNIN_LIMIT=%q: err %v", bad, err)
		}
	}
}

func TestAuthFailureLimitConfig(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]int{"": 30, "0": 0, "100": 100} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_AUTH_FAILURE_LIMIT": env}))
		if err != nil || cfg.AuthFailureLimit != want {
			t.Errorf("PAYORCH_AUTH_FAILURE_LIMIT=%q: %d (%v), want %d", env, cfg.AuthFailureLimit, err, want)
		}
	}
	for _, bad := range []string{"-1", "many"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_AUTH_FAILURE_LIMIT": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_AUTH_FAILURE_LIMIT") {
			t.Errorf("PAYORCH_AUTH_FAILURE_LIMIT=%q: err %v", bad, err)
		}
	}
}

func TestTrustedProxiesConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(nil))
	if err != nil || cfg.TrustedProxies != nil {
		t.Fatalf("default trusted proxies %v (%v), want none", cfg.TrustedProxies, err)
	}
	cfg, err = loadConfig(envOf(map[string]string{"PAYORCH_TRUSTED_PROXIES": "10.0.0.7, 10.1.2.3/16,fd00::/8 ,::1"}))
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::1/128")}
	if err != nil || !slices.Equal(cfg.TrustedProxies, want) {
		t.Fatalf("trusted proxies %v (%v), want %v", cfg.TrustedProxies, err, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.internal", "10.0.0.1,"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_TRUSTED_PROXIES": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_TRUSTED_PROXIES") {
			t.Errorf("PAYORCH_TRUSTED_PROXIES=%q: err %v", bad, err)
		}
	}
}

func TestBackofficeMaxConnsConfig(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]int{"": 4, "2": 2, "12": 12} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_BACKOFFICE_MAX_CONNS": env}))
		if err != nil || cfg.BackofficeMaxConns != want {
			t.Errorf("PAYORCH_BACKOFFICE_MAX_CONNS=%q: %d (%v), want %d", env, cfg.BackofficeMaxConns, err, want)
		}
	}
	for _, bad := range []string{"1", "0", "-3", "4000", "few"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_BACKOFFICE_MAX_CONNS": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_BACKOFFICE_MAX_CONNS") {
			t.Errorf("PAYORCH_BACKOFFICE_MAX_CONNS=%q: err %v", bad, err)
		}
	}
}

// withEnv returns base with the variables of kv (name, value, …) added.
func withEnv(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// connectorSummary is what a test compares of a connector.
type connectorSummary struct {
	Name, Adapter, URL, Token, State, SecretKey, APIBase string
	Timeout                                              time.Duration
	Disabled                                             bool
	SoftDeclines                                         []string
}

func summarize(conns []connectorConfig) []connectorSummary {
	var out []connectorSummary
	for _, cc := range conns {
		out = append(out, connectorSummary{cc.Name, cc.Adapter, cc.URL, cc.Token, cc.State, cc.SecretKey, cc.APIBase,
			cc.Timeout, cc.Disabled, cc.SoftDeclines})
	}
	return out
}

// TestLegacyConnectors: with PAYORCH_CONNECTORS unset the older variables
// configure what they always did: one connector fake (outside production
// only) from PAYORCH_FAKE_*, the default provider, and stripe from
// STRIPE_* when its secret key is set.
func TestLegacyConnectors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env         map[string]string
		environment string
		want        []connectorSummary
		def         string
	}{
		"Nothing": {nil, envTest,
			[]connectorSummary{{Name: "fake", Adapter: "fake"}}, "fake"},
		"StandaloneFake": {map[string]string{"PAYORCH_FAKE_URL": "http://127.0.0.1:9", "PAYORCH_FAKE_TOKEN": "t", "PAYORCH_FAKE_STATE": "ignored.json"}, envTest,
			[]connectorSummary{{Name: "fake", Adapter: "fake", URL: "http://127.0.0.1:9", Token: "t", State: "ignored.json"}}, "fake"},
		"Stripe": {map[string]string{"STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_API_BASE": "http://127.0.0.1:12111", "STRIPE_TIMEOUT": "5s"}, envTest,
			[]connectorSummary{{Name: "fake", Adapter: "fake"},
				{Name: "stripe", Adapter: "stripe", SecretKey: "sk_test_1", APIBase: "http://127.0.0.1:12111", Timeout: 5 * time.Second}}, "fake"},
		"StripeInProduction": {map[string]string{"STRIPE_SECRET_KEY": "sk_live_1", "PAYORCH_DEFAULT_PROVIDER": "stripe"}, envProduction,
			[]connectorSummary{{Name: "stripe", Adapter: "stripe", SecretKey: "sk_live_1", Timeout: 30 * time.Second}}, "stripe"},
		"OwnVariablesWin": {map[string]string{"PAYORCH_FAKE_TOKEN": "old", "PAYORCH_CONNECTOR_FAKE_TOKEN": "new",
			"PAYORCH_CONNECTOR_FAKE_SOFT_DECLINES": "none", "STRIPE_SECRET_KEY": "sk_test_old", "PAYORCH_CONNECTOR_STRIPE_SECRET_KEY": "sk_test_new",
			"PAYORCH_CONNECTOR_STRIPE_DISABLED": "true"}, envTest,
			[]connectorSummary{{Name: "fake", Adapter: "fake", Token: "new", SoftDeclines: []string{}},
				{Name: "stripe", Adapter: "stripe", SecretKey: "sk_test_new", Timeout: 30 * time.Second, Disabled: true}}, "fake"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(envOf(withEnv(tc.env, "PAYORCH_ENVIRONMENT", tc.environment)))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ConnectorsListed || cfg.DefaultProvider != tc.def {
				t.Errorf("listed %v, default %q, want unlisted, %q", cfg.ConnectorsListed, cfg.DefaultProvider, tc.def)
			}
			if got := summarize(cfg.activeConnectors()); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("connectors\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

// TestListedConnectors: PAYORCH_CONNECTORS lists connectors by name and
// adapter, each configured by its own variables (the older ones being
// fallbacks for the connectors named fake and stripe), and they reach the
// orchestrator's options; the default provider is the first enabled one.
func TestListedConnectors(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(map[string]string{
		"PAYORCH_ENVIRONMENT": "test",
		"PAYORCH_CONNECTORS":  " fake_a=fake, fake_b = fake ,stripe_eu=stripe,fake=fake,stripe=stripe",

		"PAYORCH_CONNECTOR_FAKE_A_DISABLED": "true",
		"PAYORCH_CONNECTOR_FAKE_B_URL":      "http://127.0.0.1:9",
		"PAYORCH_CONNECTOR_FAKE_B_TOKEN":    "tb",
		"PAYORCH_CONNECTOR_FAKE_A_STATE":    "a.json",

		"PAYORCH_CONNECTOR_FAKE_B_SOFT_DECLINES":    "try_again_later, do_not_honor,try_again_later",
		"PAYORCH_CONNECTOR_STRIPE_EU_SECRET_KEY":    "sk_test_eu",
		"PAYORCH_CONNECTOR_STRIPE_EU_API_BASE":      "http://127.0.0.1:12111",
		"PAYORCH_CONNECTOR_STRIPE_EU_TIMEOUT":       "7s",
		"PAYORCH_CONNECTOR_STRIPE_EU_SOFT_DECLINES": "none",

		"PAYORCH_FAKE_TOKEN": "legacy-token", "STRIPE_SECRET_KEY": "sk_test_legacy", "STRIPE_TIMEOUT": "9s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []connectorSummary{
		{Name: "fake_a", Adapter: "fake", State: "a.json", Disabled: true},
		{Name: "fake_b", Adapter: "fake", URL: "http://127.0.0.1:9", Token: "tb", SoftDeclines: []string{"try_again_later", "do_not_honor"}},
		{Name: "stripe_eu", Adapter: "stripe", SecretKey: "sk_test_eu", APIBase: "http://127.0.0.1:12111", Timeout: 7 * time.Second, SoftDeclines: []string{}},
		{Name: "fake", Adapter: "fake", Token: "legacy-token"},
		{Name: "stripe", Adapter: "stripe", SecretKey: "sk_test_legacy", Timeout: 9 * time.Second},
	}
	if got := summarize(cfg.activeConnectors()); !cfg.ConnectorsListed || !reflect.DeepEqual(got, want) {
		t.Fatalf("connectors (listed %v)\n %+v\nwant\n %+v", cfg.ConnectorsListed, got, want)
	}
	if cfg.DefaultProvider != "fake_b" {
		t.Errorf("default provider %q, want fake_b (the first enabled)", cfg.DefaultProvider)
	}
	opts := cfg.connectorOptions()
	if len(opts) != 5 || !opts["fake_a"].Disabled || opts["fake_b"].Disabled || opts["fake"].SoftDeclines != nil ||
		!slices.Equal(opts["fake_b"].SoftDeclines, []string{"try_again_later", "do_not_honor"}) ||
		opts["stripe_eu"].SoftDeclines == nil || len(opts["stripe_eu"].SoftDeclines) != 0 {
		t.Errorf("orchestrator options %+v", opts)
	}
	cfg, err = loadConfig(envOf(map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,fake_b=fake", "PAYORCH_DEFAULT_PROVIDER": "fake_b"}))
	if err != nil || cfg.DefaultProvider != "fake_b" {
		t.Errorf("PAYORCH_DEFAULT_PROVIDER=fake_b: %q (%v)", cfg.DefaultProvider, err)
	}
}

// TestAttemptsAndBreakerConfig: the attempt cap and the breaker default
// to the orchestrator's defaults and take the environment's values.
func TestAttemptsAndBreakerConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(nil))
	if err != nil || cfg.MaxAttempts != orchestrator.DefaultMaxAttempts || cfg.Breaker != orchestrator.DefaultBreaker {
		t.Fatalf("defaults: attempts %d, breaker %+v (%v)", cfg.MaxAttempts, cfg.Breaker, err)
	}
	cfg, err = loadConfig(envOf(map[string]string{"PAYORCH_MAX_ATTEMPTS": "1", "PAYORCH_BREAKER_WINDOW": "2m",
		"PAYORCH_BREAKER_MIN_CALLS": "20", "PAYORCH_BREAKER_ERROR_PERCENT": "75", "PAYORCH_BREAKER_COOLDOWN": "10s"}))
	want := orchestrator.BreakerConfig{Window: 2 * time.Minute, MinCalls: 20, ErrorPercent: 75, Cooldown: 10 * time.Second}
	if err != nil || cfg.MaxAttempts != 1 || cfg.Breaker != want {
		t.Fatalf("set: attempts %d, breaker %+v (%v)", cfg.MaxAttempts, cfg.Breaker, err)
	}
}

// TestWebhookSecretsConfig: each connector's webhook secret comes from
// PAYORCH_CONNECTOR_<NAME>_WEBHOOK_SECRET, the connectors named stripe
// and fake fall back on STRIPE_WEBHOOK_SECRET and
// PAYORCH_FAKE_WEBHOOK_SECRET.
func TestWebhookSecretsConfig(t *testing.T) {
	t.Parallel()
	secrets := func(env map[string]string) map[string]string {
		t.Helper()
		cfg, err := loadConfig(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, cc := range cfg.activeConnectors() {
			out[cc.Name] = cc.WebhookSecret
		}
		return out
	}
	if got := secrets(map[string]string{"STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_legacy",
		"PAYORCH_FAKE_WEBHOOK_SECRET": "whsec_fake"}); got["stripe"] != "whsec_legacy" || got["fake"] != "whsec_fake" {
		t.Errorf("legacy: %v", got)
	}
	got := secrets(map[string]string{"PAYORCH_CONNECTORS": "stripe=stripe,stripe_eu=stripe,fake_a=fake",
		"PAYORCH_CONNECTOR_STRIPE_SECRET_KEY": "sk_test_1", "PAYORCH_CONNECTOR_STRIPE_EU_SECRET_KEY": "sk_test_2",
		"STRIPE_WEBHOOK_SECRET": "whsec_old", "PAYORCH_CONNECTOR_STRIPE_EU_WEBHOOK_SECRET": "whsec_eu"})
	if got["stripe"] != "whsec_old" || got["stripe_eu"] != "whsec_eu" || got["fake_a"] != "" {
		t.Errorf("listed: %v", got)
	}
	if got := secrets(map[string]string{"PAYORCH_CONNECTORS": "stripe=stripe", "PAYORCH_CONNECTOR_STRIPE_SECRET_KEY": "sk_test_1",
		"STRIPE_WEBHOOK_SECRET": "whsec_old", "PAYORCH_CONNECTOR_STRIPE_WEBHOOK_SECRET": "whsec_new"}); got["stripe"] != "whsec_new" {
		t.Errorf("the connector's own variable wins: %v", got)
	}
}

// TestConnectorConfigErrors: every bad connector setting stops start-up
// with an error naming the connector and the variable to fix.
func TestConnectorConfigErrors(t *testing.T) {
	t.Parallel()
	two := map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,fake_b=fake"}
	for name, tc := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"UnknownAdapter":            {map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,ady=adyen"}, []string{"PAYORCH_CONNECTORS", "ady", `"adyen"`}},
		"NotNameAdapter":            {map[string]string{"PAYORCH_CONNECTORS": "fake_a"}, []string{"PAYORCH_CONNECTORS", `"fake_a"`}},
		"EmptyEntry":                {map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,"}, []string{"PAYORCH_CONNECTORS", `""`}},
		"UpperCaseName":             {map[string]string{"PAYORCH_CONNECTORS": "Fake_A=fake"}, []string{"PAYORCH_CONNECTORS", `"Fake_A"`}},
		"NameWithDash":              {map[string]string{"PAYORCH_CONNECTORS": "fake-a=fake"}, []string{"PAYORCH_CONNECTORS", `"fake-a"`}},
		"NameStartsWithADigit":      {map[string]string{"PAYORCH_CONNECTORS": "1fake=fake"}, []string{"PAYORCH_CONNECTORS", `"1fake"`}},
		"NameTooLong":               {map[string]string{"PAYORCH_CONNECTORS": strings.Repeat("a", 33) + "=fake"}, []string{"PAYORCH_CONNECTORS", strings.Repeat("a", 33)}},
		"Duplicate":                 {map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,fake_a=stripe"}, []string{"PAYORCH_CONNECTORS", "fake_a", "twice"}},
		"StripeWithoutKey":          {map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,stripe_eu=stripe"}, []string{"PAYORCH_CONNECTOR_STRIPE_EU_SECRET_KEY", "stripe_eu"}},
		"StripeBadTimeout":          {withEnv(nil, "PAYORCH_CONNECTORS", "s=stripe", "PAYORCH_CONNECTOR_S_SECRET_KEY", "sk", "PAYORCH_CONNECTOR_S_TIMEOUT", "soon"), []string{"PAYORCH_CONNECTOR_S_TIMEOUT", "connector s:", `"soon"`}},
		"StripeNegativeTimeout":     {withEnv(nil, "PAYORCH_CONNECTORS", "s=stripe", "PAYORCH_CONNECTOR_S_SECRET_KEY", "sk", "PAYORCH_CONNECTOR_S_TIMEOUT", "-1s"), []string{"PAYORCH_CONNECTOR_S_TIMEOUT", "connector s"}},
		"FakeInProduction":          {withEnv(two, "PAYORCH_ENVIRONMENT", "production"), []string{"PAYORCH_CONNECTORS", "fake_a", "PAYORCH_ENVIRONMENT"}},
		"FakeURLWithoutToken":       {withEnv(two, "PAYORCH_CONNECTOR_FAKE_B_URL", "http://127.0.0.1:9"), []string{"PAYORCH_CONNECTOR_FAKE_B_TOKEN", "PAYORCH_CONNECTOR_FAKE_B_URL", "fake_b"}},
		"FakeBadURL":                {withEnv(two, "PAYORCH_CONNECTOR_FAKE_B_URL", "127.0.0.1:9", "PAYORCH_CONNECTOR_FAKE_B_TOKEN", "t"), []string{"PAYORCH_CONNECTOR_FAKE_B_URL", "fake_b"}},
		"FakeTokenWithSpace":        {withEnv(two, "PAYORCH_CONNECTOR_FAKE_B_TOKEN", "a b"), []string{"PAYORCH_CONNECTOR_FAKE_B_TOKEN", "fake_b"}},
		"BadDisabled":               {withEnv(two, "PAYORCH_CONNECTOR_FAKE_B_DISABLED", "maybe"), []string{"PAYORCH_CONNECTOR_FAKE_B_DISABLED", "connector fake_b"}},
		"WebhookSecretWithSpace":    {withEnv(two, "PAYORCH_CONNECTOR_FAKE_B_WEBHOOK_SECRET", "a b"), []string{"PAYORCH_CONNECTOR_FAKE_B_WEBHOOK_SECRET", "fake_b"}},
		"LegacyStripeWebhookSpace":  {map[string]string{"STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec a"}, []string{"STRIPE_WEBHOOK_SECRET", "stripe"}},
		"BadSoftDecline":            {withEnv(two, "PAYORCH_CONNECTOR_FAKE_A_SOFT_DECLINES", "processing_error,Try Again"), []string{"PAYORCH_CONNECTOR_FAKE_A_SOFT_DECLINES", "connector fake_a", `"Try Again"`}},
		"EmptySoftDecline":          {withEnv(two, "PAYORCH_CONNECTOR_FAKE_A_SOFT_DECLINES", "processing_error,,"), []string{"PAYORCH_CONNECTOR_FAKE_A_SOFT_DECLINES"}},
		"DefaultNotConfigured":      {withEnv(two, "PAYORCH_DEFAULT_PROVIDER", "fake"), []string{"PAYORCH_DEFAULT_PROVIDER", `"fake"`, "fake_a, fake_b"}},
		"DefaultDisabled":           {withEnv(two, "PAYORCH_DEFAULT_PROVIDER", "fake_b", "PAYORCH_CONNECTOR_FAKE_B_DISABLED", "1"), []string{"PAYORCH_DEFAULT_PROVIDER", "fake_b", "PAYORCH_CONNECTOR_FAKE_B_DISABLED"}},
		"AllDisabled":               {withEnv(two, "PAYORCH_CONNECTOR_FAKE_A_DISABLED", "true", "PAYORCH_CONNECTOR_FAKE_B_DISABLED", "true"), []string{"PAYORCH_DEFAULT_PROVIDER", "fake_a", "disabled"}},
		"LegacyUnknownDefault":      {map[string]string{"PAYORCH_DEFAULT_PROVIDER": "adyen"}, []string{"PAYORCH_DEFAULT_PROVIDER", `"adyen"`}},
		"LegacyStripeWithoutKey":    {map[string]string{"PAYORCH_DEFAULT_PROVIDER": "stripe"}, []string{"PAYORCH_DEFAULT_PROVIDER", "STRIPE_SECRET_KEY"}},
		"LegacyFakeURLWithoutToken": {map[string]string{"PAYORCH_FAKE_URL": "http://127.0.0.1:9"}, []string{"PAYORCH_FAKE_TOKEN", "PAYORCH_FAKE_URL"}},
		"LegacyDefaultDisabled":     {map[string]string{"PAYORCH_CONNECTOR_FAKE_DISABLED": "true"}, []string{"PAYORCH_DEFAULT_PROVIDER", "PAYORCH_CONNECTOR_FAKE_DISABLED"}},
		"LegacyFakeInProduction":    {map[string]string{"PAYORCH_ENVIRONMENT": "production"}, []string{"PAYORCH_DEFAULT_PROVIDER", "PAYORCH_ENVIRONMENT"}},
		"LegacyFakeURLInProduction": {map[string]string{"PAYORCH_ENVIRONMENT": "production", "PAYORCH_DEFAULT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk",
			"PAYORCH_FAKE_URL": "http://127.0.0.1:9", "PAYORCH_FAKE_TOKEN": "t"}, []string{"PAYORCH_FAKE_URL", "PAYORCH_ENVIRONMENT"}},
		"MaxAttemptsZero":        {map[string]string{"PAYORCH_MAX_ATTEMPTS": "0"}, []string{"PAYORCH_MAX_ATTEMPTS"}},
		"MaxAttemptsEleven":      {map[string]string{"PAYORCH_MAX_ATTEMPTS": "11"}, []string{"PAYORCH_MAX_ATTEMPTS"}},
		"MaxAttemptsWord":        {map[string]string{"PAYORCH_MAX_ATTEMPTS": "three"}, []string{"PAYORCH_MAX_ATTEMPTS"}},
		"WebhookSendersZero":     {map[string]string{"PAYORCH_WEBHOOK_SENDERS": "0"}, []string{"PAYORCH_WEBHOOK_SENDERS"}},
		"WebhookSendersHuge":     {map[string]string{"PAYORCH_WEBHOOK_SENDERS": "1000"}, []string{"PAYORCH_WEBHOOK_SENDERS"}},
		"WebhookTimeoutShort":    {map[string]string{"PAYORCH_WEBHOOK_TIMEOUT": "100ms"}, []string{"PAYORCH_WEBHOOK_TIMEOUT"}},
		"WebhookTimeoutLong":     {map[string]string{"PAYORCH_WEBHOOK_TIMEOUT": "1m"}, []string{"PAYORCH_WEBHOOK_TIMEOUT"}},
		"RetentionNegative":      {map[string]string{"PAYORCH_HISTORY_RETENTION_MONTHS": "-1"}, []string{"PAYORCH_HISTORY_RETENTION_MONTHS"}},
		"EventsRetentionTooLong": {map[string]string{"PAYORCH_EVENTS_RETENTION_MONTHS": "1201"}, []string{"PAYORCH_EVENTS_RETENTION_MONTHS"}},
		"HoldSweepNegative":      {map[string]string{"PAYORCH_HOLD_SWEEP_INTERVAL": "-1s"}, []string{"PAYORCH_HOLD_SWEEP_INTERVAL"}},
		"HoldLeadZero":           {map[string]string{"PAYORCH_HOLD_EXPIRING_LEAD": "0s"}, []string{"PAYORCH_HOLD_EXPIRING_LEAD"}},
		"HoldActionBeforeSweep":  {map[string]string{"PAYORCH_HOLD_SWEEP_INTERVAL": "10m", "PAYORCH_HOLD_ACTION_LEAD": "15m"}, []string{"PAYORCH_HOLD_ACTION_LEAD", "PAYORCH_HOLD_SWEEP_INTERVAL"}},
		"BreakerWindowShort":     {map[string]string{"PAYORCH_BREAKER_WINDOW": "500ms"}, []string{"PAYORCH_BREAKER_WINDOW"}},
		"BreakerWindowLong":      {map[string]string{"PAYORCH_BREAKER_WINDOW": "25h"}, []string{"PAYORCH_BREAKER_WINDOW"}},
		"BreakerWindowWord":      {map[string]string{"PAYORCH_BREAKER_WINDOW": "minute"}, []string{"PAYORCH_BREAKER_WINDOW"}},
		"BreakerMinCallsZero":    {map[string]string{"PAYORCH_BREAKER_MIN_CALLS": "0"}, []string{"PAYORCH_BREAKER_MIN_CALLS"}},
		"BreakerPercentZero":     {map[string]string{"PAYORCH_BREAKER_ERROR_PERCENT": "0"}, []string{"PAYORCH_BREAKER_ERROR_PERCENT"}},
		"BreakerPercentOver":     {map[string]string{"PAYORCH_BREAKER_ERROR_PERCENT": "101"}, []string{"PAYORCH_BREAKER_ERROR_PERCENT"}},
		"BreakerCooldownZero":    {map[string]string{"PAYORCH_BREAKER_COOLDOWN": "0s"}, []string{"PAYORCH_BREAKER_COOLDOWN"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadConfig(envOf(tc.env))
			if err == nil {
				t.Fatalf("loadConfig succeeded, want an error naming %v", tc.want)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestDevConnectors: unless told otherwise, dev runs two embedded fakes,
// fake_a (the default) and fake_b, each with its own state file in the
// data folder; stripe stays when configured; the single fake of an
// earlier data folder stays, disabled, for the payments it holds.
func TestDevConnectors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dev := func(t *testing.T, env map[string]string) config {
		t.Helper()
		cfg, err := loadConfig(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Environment = envDevelopment
		cfg = devConnectors(cfg, dir)
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	names := func(cfg config) []string {
		var out []string
		for _, cc := range cfg.activeConnectors() {
			out = append(out, fmt.Sprintf("%s:%s:%s:%v", cc.Name, cc.Adapter, cc.State, cc.Disabled))
		}
		return out
	}
	a, b := "fake_a:fake:"+filepath.Join(dir, "fake-provider-fake_a.json")+":false", "fake_b:fake:"+filepath.Join(dir, "fake-provider-fake_b.json")+":false"
	for name, tc := range map[string]struct {
		env  map[string]string
		want []string
		def  string
	}{
		"Default":          {nil, []string{a, b}, "fake_a"},
		"WithStripe":       {map[string]string{"STRIPE_SECRET_KEY": "sk_test_1"}, []string{a, b, "stripe:stripe::false"}, "fake_a"},
		"StripeTheDefault": {map[string]string{"STRIPE_SECRET_KEY": "sk_test_1", "PAYORCH_DEFAULT_PROVIDER": "stripe"}, []string{a, b, "stripe:stripe::false"}, "stripe"},
		"OwnState":         {map[string]string{"PAYORCH_CONNECTOR_FAKE_B_STATE": "/tmp/b.json"}, []string{a, "fake_b:fake:/tmp/b.json:false"}, "fake_a"},
		"StandaloneFake":   {map[string]string{"PAYORCH_FAKE_URL": "http://127.0.0.1:9", "PAYORCH_FAKE_TOKEN": "t"}, []string{"fake:fake::false"}, "fake"},
		"Listed": {map[string]string{"PAYORCH_CONNECTORS": "x=fake,y=fake", "PAYORCH_CONNECTOR_Y_URL": "http://127.0.0.1:9", "PAYORCH_CONNECTOR_Y_TOKEN": "t"},
			[]string{"x:fake:" + filepath.Join(dir, "fake-provider-x.json") + ":false", "y:fake::false"}, "x"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := dev(t, tc.env)
			if got := names(cfg); !slices.Equal(got, tc.want) || cfg.DefaultProvider != tc.def {
				t.Errorf("dev connectors %v default %q, want %v default %q", got, cfg.DefaultProvider, tc.want, tc.def)
			}
		})
	}
	t.Run("EarlierDataFolder", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, "fake-provider.json"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := dev(t, nil)
		want := []string{a, b, "fake:fake:" + filepath.Join(dir, "fake-provider.json") + ":true"}
		if got := names(cfg); !slices.Equal(got, want) || cfg.DefaultProvider != "fake_a" {
			t.Errorf("dev connectors %v default %q, want %v default fake_a", got, cfg.DefaultProvider, want)
		}
	})
}

// TestOneShotCommandsNeedStandaloneFakes: resolve and reconcile cannot ask
// a fake they would embed (it starts empty) about earlier payments: each
// fake connector they work with needs its URL, named in the error.
func TestOneShotCommandsNeedStandaloneFakes(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) config {
		cfg, err := loadConfig(envOf(withEnv(env, "PAYORCH_ENVIRONMENT", "test")))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	legacy := load(nil)
	if err := legacy.needStandaloneFakes("resolve"); err == nil || !strings.Contains(err.Error(), "PAYORCH_FAKE_URL") {
		t.Errorf("resolve on the embedded fake: %v, want an error naming PAYORCH_FAKE_URL", err)
	}
	if err := legacy.needStandaloneFakes("reconcile", "stripe"); err != nil {
		t.Errorf("reconcile of another connector: %v", err)
	}
	half := load(map[string]string{"PAYORCH_CONNECTORS": "fake_a=fake,fake_b=fake",
		"PAYORCH_CONNECTOR_FAKE_A_URL": "http://127.0.0.1:9", "PAYORCH_CONNECTOR_FAKE_A_TOKEN": "t"})
	for _, tc := range []struct {
		cmd   string
		names []string
		want  string
	}{
		{"resolve", nil, "PAYORCH_CONNECTOR_FAKE_B_URL"},
		{"reconcile", []string{"fake_b"}, "PAYORCH_CONNECTOR_FAKE_B_URL"},
		{"reconcile", []string{"fake_a"}, ""},
	} {
		err := half.needStandaloneFakes(tc.cmd, tc.names...)
		if (tc.want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.cmd))) {
			t.Errorf("%s %v: %v, want an error naming %q", tc.cmd, tc.names, err, tc.want)
		}
	}
}

// TestDevBannerListsConnectors: dev's banner lists its connectors with the
// embedded fakes' URLs, and shows how to arm a fault on the default fake
// when its token is known to the shell (never the token itself).
func TestDevBannerListsConnectors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"TokenSet": {map[string]string{"PAYORCH_CONNECTOR_FAKE_A_TOKEN": "secret-a"}, []string{"connectors (default fake_a)",
			"fake_a       fake    http://127.0.0.1:1001", "fake_b       fake    http://127.0.0.1:1002",
			`curl -s -X POST http://127.0.0.1:1001/_admin/faults -H "Authorization: Bearer $PAYORCH_CONNECTOR_FAKE_A_TOKEN"`}},
		"TokenUnset": {nil, []string{"fake_a       fake    http://127.0.0.1:1001", "set PAYORCH_CONNECTOR_FAKE_A_TOKEN to drive fake_a's admin API"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Environment = envDevelopment
			cfg = devConnectors(cfg, t.TempDir())
			provs := map[string]providers.Provider{"fake_a": fake.NewClient("http://127.0.0.1:1001", nil).WithToken("secret-a"),
				"fake_b": fake.NewClient("http://127.0.0.1:1002", nil)}
			var out strings.Builder
			printDevConnectors(&out, cfg, provs)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("banner lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "secret-a") {
				t.Errorf("banner shows the token:\n%s", out.String())
			}
		})
	}
}

func TestReadReplicaConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(nil))
	if err != nil || cfg.DatabaseReadURL != "" || cfg.ReadReplicaMaxWait != 2*time.Second || readReplicaMaxWait(cfg) != 2*time.Second {
		t.Fatalf("defaults: %q %v (%v)", cfg.DatabaseReadURL, cfg.ReadReplicaMaxWait, err)
	}
	cfg, err = loadConfig(envOf(map[string]string{"DATABASE_READ_URL": "postgres://payorch@replica:5432/payorch",
		"PAYORCH_READ_REPLICA_MAX_WAIT": "0"}))
	if err != nil || cfg.DatabaseReadURL == "" || cfg.ReadReplicaMaxWait != 0 || readReplicaMaxWait(cfg) >= 0 {
		t.Fatalf("set: %q %v (%v)", cfg.DatabaseReadURL, cfg.ReadReplicaMaxWait, err)
	}
	for name, env := range map[string]map[string]string{
		"DATABASE_READ_URL":              {"DATABASE_READ_URL": "postgres://payorch@replica:notaport/payorch"},
		"PAYORCH_READ_REPLICA_MAX_WAIT":  {"PAYORCH_READ_REPLICA_MAX_WAIT": "-1s"},
		"PAYORCH_READ_REPLICA_MAX_WAIT:": {"PAYORCH_READ_REPLICA_MAX_WAIT": "2m"},
	} {
		if _, err := loadConfig(envOf(env)); err == nil || !strings.HasPrefix(err.Error(), strings.TrimSuffix(name, ":")) {
			t.Errorf("%v: err %v", env, err)
		}
	}
}

func TestRequireSyncStandbyConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_REQUIRE_SYNC_STANDBY": "true"}))
	if err != nil || !cfg.RequireSyncStandby {
		t.Fatalf("PAYORCH_REQUIRE_SYNC_STANDBY=true: %v (%v)", cfg.RequireSyncStandby, err)
	}
	if cfg, err := loadConfig(envOf(nil)); err != nil || cfg.RequireSyncStandby {
		t.Fatalf("default: %v (%v), want off", cfg.RequireSyncStandby, err)
	}
	// A transaction pooler passes no session setting: the role carries it.
	_, err = loadConfig(envOf(map[string]string{"PAYORCH_REQUIRE_SYNC_STANDBY": "true", "PAYORCH_DATABASE_POOLER": "transaction"}))
	if err == nil || !strings.Contains(err.Error(), "ALTER ROLE") {
		t.Fatalf("with a transaction pooler: %v, want an error naming ALTER ROLE", err)
	}
}
