package main

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/payorch/payorch/orchestrator"
)

// A connector is a named, configured instance of a provider adapter
// (PAYORCH_CONNECTORS=fake_a=fake,fake_b=fake,stripe=stripe). Each reads
// its settings from PAYORCH_CONNECTOR_<NAME>_<SETTING>, NAME upper-cased;
// connectors literally named fake and stripe fall back on the older
// variables (PAYORCH_FAKE_*, STRIPE_*), which alone, with
// PAYORCH_CONNECTORS unset, still configure one fake (outside production)
// and one stripe (with its secret key).

// Provider adapters a connector may use.
const (
	adapterFake   = "fake"
	adapterStripe = "stripe"
)

// connectorName is what a connector's name must match: it names
// variables, metric labels and payments.provider.
var connectorName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// declineCode is what a soft decline code must match.
var declineCode = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// softDeclinesNone is the _SOFT_DECLINES value that lists no code.
const softDeclinesNone = "none"

// Connector settings, the suffixes of PAYORCH_CONNECTOR_<NAME>_….
const (
	settingURL          = "URL"
	settingToken        = "TOKEN"
	settingState        = "STATE"
	settingSecretKey    = "SECRET_KEY"
	settingAPIBase      = "API_BASE"
	settingTimeout      = "TIMEOUT"
	settingDisabled     = "DISABLED"
	settingSoftDeclines = "SOFT_DECLINES"
	settingWebhook      = "WEBHOOK_SECRET"
)

// defaultStripeTimeout bounds one request to Stripe when nothing says
// otherwise.
const defaultStripeTimeout = 30 * time.Second

// devConnectorNames are the embedded fakes `dev` runs when
// PAYORCH_CONNECTORS is unset, the first being the default provider.
var devConnectorNames = []string{"fake_a", "fake_b"}

// connectorConfig is one connector: its adapter's settings and its
// options (orchestrator.ConnectorOptions).
type connectorConfig struct {
	// Name is the connector's name, as payments.provider holds it.
	Name string
	// Adapter is the provider adapter it is an instance of: fake or stripe.
	Adapter string
	// URL (_URL) is a standalone fake's base URL; empty means a fake
	// embedded in this process, outside production only.
	URL string
	// Token (_TOKEN) is the fake's bearer secret: the standalone fake's
	// (required with URL), or the embedded fake's (empty: generated at each
	// start, known only to this process's client).
	Token string
	// State (_STATE) is the file an embedded fake keeps its state in;
	// empty means memory only. `dev` defaults it to
	// DataDir/fake-provider-<name>.json.
	State string
	// SecretKey (_SECRET_KEY) is a stripe connector's API key (required).
	SecretKey string
	// APIBase (_API_BASE) points a stripe connector elsewhere (stripe-mock,
	// a proxy); empty means Stripe's API.
	APIBase string
	// Timeout (_TIMEOUT) bounds one request of a stripe connector.
	Timeout time.Duration
	// Disabled (_DISABLED): no new payment is routed to it; the payments it
	// holds are still captured, canceled, refunded, resolved and
	// reconciled there.
	Disabled bool
	// WebhookSecret (_WEBHOOK_SECRET) verifies the connector's webhooks
	// to POST /webhooks/<name>: a stripe connector's endpoint signing
	// secret, a standalone fake's --webhook-secret. Empty: its webhooks are
	// refused, but for an embedded fake, which gets one generated at each
	// start (and its webhooks sent to this process).
	WebhookSecret string
	// SoftDeclines (_SOFT_DECLINES) are the decline codes after which the
	// next connector of a payment's route is tried; nil means
	// orchestrator.DefaultSoftDeclines, empty (`none`) none.
	SoftDeclines []string
	// implicit marks the fake of the older configuration (PAYORCH_CONNECTORS
	// unset): it exists only outside production.
	implicit bool
	// vars names the variable each setting was read from, or would be, by
	// setting (for messages).
	vars map[string]string
}

// connectorVar is the variable of connector name's setting.
func connectorVar(name, setting string) string {
	return "PAYORCH_CONNECTOR_" + strings.ToUpper(name) + "_" + setting
}

// varOf names the variable cc's setting was read from (or, unset, the one
// to set).
func (cc connectorConfig) varOf(setting string) string {
	if v := cc.vars[setting]; v != "" {
		return v
	}
	return connectorVar(cc.Name, setting)
}

// options are cc's orchestrator.ConnectorOptions.
func (cc connectorConfig) options() orchestrator.ConnectorOptions {
	return orchestrator.ConnectorOptions{Disabled: cc.Disabled, SoftDeclines: cc.SoftDeclines}
}

// legacySetting returns the older variable that connector name's setting
// falls back on, and its value (as loadConfig read it): only the
// connectors named fake and stripe have one.
func (c config) legacySetting(name, setting string) (variable, value string) {
	switch [2]string{name, setting} {
	case [2]string{"fake", settingURL}:
		return "PAYORCH_FAKE_URL", c.FakeURL
	case [2]string{"fake", settingToken}:
		return "PAYORCH_FAKE_TOKEN", c.FakeToken
	case [2]string{"fake", settingState}:
		return "PAYORCH_FAKE_STATE", c.FakeState
	case [2]string{"stripe", settingSecretKey}:
		return "STRIPE_SECRET_KEY", c.StripeSecretKey
	case [2]string{"stripe", settingAPIBase}:
		return "STRIPE_API_BASE", c.StripeAPIBase
	case [2]string{"stripe", settingTimeout}:
		return "STRIPE_TIMEOUT", c.StripeTimeout.String()
	case [2]string{"stripe", settingWebhook}:
		return "STRIPE_WEBHOOK_SECRET", c.StripeWebhookSecret
	case [2]string{"fake", settingWebhook}:
		return "PAYORCH_FAKE_WEBHOOK_SECRET", c.FakeWebhookSecret
	}
	return "", ""
}

// connectorReader reads connector settings from the environment, over the
// older variables as loadConfig read them.
type connectorReader struct {
	getenv func(string) string
	cfg    config
	// legacy: PAYORCH_CONNECTORS is unset, so the settings of the
	// connectors named fake and stripe are the older variables' when their
	// own are unset, and messages name the older variables.
	legacy bool
	errs   []error
}

// setting returns connector name's setting and records in vars the
// variable it came from: PAYORCH_CONNECTOR_<NAME>_<SETTING>, else the
// older variable of the connectors named fake and stripe.
func (r *connectorReader) setting(name, setting string, vars map[string]string) string {
	v := connectorVar(name, setting)
	if s := r.getenv(v); s != "" {
		vars[setting] = v
		return s
	}
	if old, s := r.cfg.legacySetting(name, setting); old != "" && (r.getenv(old) != "" || r.legacy) {
		vars[setting] = old
		return s
	}
	return ""
}

// read returns connector name of adapter with its settings, collecting
// errors in r.errs.
func (r *connectorReader) read(name, adapter string) connectorConfig {
	cc := connectorConfig{Name: name, Adapter: adapter, vars: map[string]string{}}
	switch adapter {
	case adapterFake:
		cc.URL = r.setting(name, settingURL, cc.vars)
		cc.Token = r.setting(name, settingToken, cc.vars)
		cc.State = r.setting(name, settingState, cc.vars)
	case adapterStripe:
		cc.SecretKey = r.setting(name, settingSecretKey, cc.vars)
		cc.APIBase = r.setting(name, settingAPIBase, cc.vars)
		cc.Timeout = defaultStripeTimeout
		if s := r.setting(name, settingTimeout, cc.vars); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				r.errs = append(r.errs, fmt.Errorf("%s: connector %s: %q is not a duration (e.g. 30s)", cc.varOf(settingTimeout), name, s))
			}
			cc.Timeout = d
		}
	}
	cc.WebhookSecret = r.setting(name, settingWebhook, cc.vars)
	if s := r.setting(name, settingDisabled, cc.vars); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: connector %s: %q is not true or false", cc.varOf(settingDisabled), name, s))
		}
		cc.Disabled = b
	}
	if s := r.setting(name, settingSoftDeclines, cc.vars); s != "" {
		sd, err := parseSoftDeclines(s)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: connector %s: %w", cc.varOf(settingSoftDeclines), name, err))
		}
		cc.SoftDeclines = sd
	}
	return cc
}

// parseSoftDeclines parses a _SOFT_DECLINES value: decline codes separated
// by commas, or `none` for no code at all.
func parseSoftDeclines(s string) ([]string, error) {
	if strings.TrimSpace(s) == softDeclinesNone {
		return []string{}, nil
	}
	codes := []string{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !declineCode.MatchString(f) {
			return nil, fmt.Errorf("%q is not a decline code (lower-case letters, digits and _, such as processing_error), "+
				"and the list is codes separated by commas, or none", f)
		}
		if !slices.Contains(codes, f) {
			codes = append(codes, f)
		}
	}
	return codes, nil
}

// readConnectors returns the connectors of PAYORCH_CONNECTORS
// (name=adapter, separated by commas) with their settings, or, unset,
// those of the older variables: fake (offered outside production only)
// and stripe when its secret key is set. It also returns whether
// PAYORCH_CONNECTORS was set.
func readConnectors(getenv func(string) string, c config) (conns []connectorConfig, listed bool, err error) {
	list := getenv("PAYORCH_CONNECTORS")
	r := &connectorReader{getenv: getenv, cfg: c, legacy: strings.TrimSpace(list) == ""}
	if r.legacy {
		fk := r.read("fake", adapterFake)
		fk.implicit = true
		conns = append(conns, fk)
		if st := r.read("stripe", adapterStripe); st.SecretKey != "" {
			conns = append(conns, st)
		}
		return conns, false, errors.Join(r.errs...)
	}
	for _, entry := range strings.Split(list, ",") {
		name, adapter, ok := strings.Cut(strings.TrimSpace(entry), "=")
		name, adapter = strings.TrimSpace(name), strings.TrimSpace(adapter)
		switch {
		case !ok:
			r.errs = append(r.errs, fmt.Errorf("PAYORCH_CONNECTORS: %q is not name=adapter (such as fake_a=fake or stripe=stripe)", strings.TrimSpace(entry)))
			continue
		case !connectorName.MatchString(name):
			r.errs = append(r.errs, fmt.Errorf("PAYORCH_CONNECTORS: connector %q: a name is a lower-case letter, then lower-case letters, digits or _, at most 32 in all", name))
			continue
		case adapter != adapterFake && adapter != adapterStripe:
			r.errs = append(r.errs, fmt.Errorf("PAYORCH_CONNECTORS: connector %s: %q is not an adapter (fake, stripe)", name, adapter))
			continue
		case slices.ContainsFunc(conns, func(c connectorConfig) bool { return c.Name == name }):
			r.errs = append(r.errs, fmt.Errorf("PAYORCH_CONNECTORS: connector %s is listed twice", name))
			continue
		}
		conns = append(conns, r.read(name, adapter))
	}
	return conns, true, errors.Join(r.errs...)
}

// readDevConnectors returns the embedded fakes `dev` runs when
// PAYORCH_CONNECTORS is unset (devConnectorNames), with their settings.
func readDevConnectors(getenv func(string) string, c config) ([]connectorConfig, error) {
	r := &connectorReader{getenv: getenv, cfg: c}
	var conns []connectorConfig
	for _, name := range devConnectorNames {
		conns = append(conns, r.read(name, adapterFake))
	}
	return conns, errors.Join(r.errs...)
}

// activeConnectors returns the connectors this command runs with: all of
// them, but the older configuration's fake in production.
func (c config) activeConnectors() []connectorConfig {
	out := make([]connectorConfig, 0, len(c.Connectors))
	for _, cc := range c.Connectors {
		if cc.implicit && c.Environment == envProduction {
			continue
		}
		out = append(out, cc)
	}
	return out
}

// connector returns the active connector named name.
func (c config) connector(name string) (connectorConfig, bool) {
	active := c.activeConnectors()
	i := slices.IndexFunc(active, func(cc connectorConfig) bool { return cc.Name == name })
	if i < 0 {
		return connectorConfig{}, false
	}
	return active[i], true
}

// connectorOptions returns the active connectors' options by name, for
// orchestrator.Config.Connectors.
func (c config) connectorOptions() map[string]orchestrator.ConnectorOptions {
	opts := map[string]orchestrator.ConnectorOptions{}
	for _, cc := range c.activeConnectors() {
		opts[cc.Name] = cc.options()
	}
	return opts
}

// connectorNames returns the active connectors' names, in order, for
// messages.
func (c config) connectorNames() string {
	var names []string
	for _, cc := range c.activeConnectors() {
		names = append(names, cc.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// validateConnectors checks each active connector's settings and the
// default provider (validateFake has refused the fake in production).
func (c config) validateConnectors() error {
	for _, cc := range c.activeConnectors() {
		if err := cc.validate(); err != nil {
			return err
		}
	}
	def, ok := c.connector(c.DefaultProvider)
	switch {
	case !ok && c.DefaultProvider == "stripe" && !c.ConnectorsListed:
		return errors.New("PAYORCH_DEFAULT_PROVIDER: stripe needs STRIPE_SECRET_KEY")
	case !ok:
		return fmt.Errorf("PAYORCH_DEFAULT_PROVIDER: %q is not a configured connector (%s)", c.DefaultProvider, c.connectorNames())
	case def.Disabled:
		return fmt.Errorf("PAYORCH_DEFAULT_PROVIDER: connector %s is disabled (%s)", def.Name, def.varOf(settingDisabled))
	}
	return nil
}

// validate checks one connector's settings.
func (cc connectorConfig) validate() error {
	if strings.ContainsAny(cc.WebhookSecret, " \t\r\n") {
		return fmt.Errorf("%s: connector %s: must not contain white space", cc.varOf(settingWebhook), cc.Name)
	}
	switch cc.Adapter {
	case adapterFake:
		if cc.URL != "" {
			if u, err := url.Parse(cc.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%s: connector %s: %q is not an http(s) URL such as http://127.0.0.1:8081", cc.varOf(settingURL), cc.Name, cc.URL)
			}
			if cc.Token == "" {
				return fmt.Errorf("%s: connector %s: required with %s: the token the standalone fake provider was started with "+
					"(payorch fakeprovider --admin-token)", cc.varOf(settingToken), cc.Name, cc.varOf(settingURL))
			}
		}
		if strings.ContainsAny(cc.Token, " \t\r\n") {
			return fmt.Errorf("%s: connector %s: must not contain white space", cc.varOf(settingToken), cc.Name)
		}
	case adapterStripe:
		if cc.SecretKey == "" {
			return fmt.Errorf("%s: connector %s (adapter stripe) needs a secret key", cc.varOf(settingSecretKey), cc.Name)
		}
		if cc.Timeout <= 0 {
			return fmt.Errorf("%s: connector %s: must be positive", cc.varOf(settingTimeout), cc.Name)
		}
	}
	return nil
}
