package stripe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/balancetransaction"
	"github.com/stripe/stripe-go/v76/event"
	"github.com/stripe/stripe-go/v76/paymentintent"
	"github.com/stripe/stripe-go/v76/payout"
	"github.com/stripe/stripe-go/v76/refund"

	"github.com/payorch/payorch/providers"
)

// Defaults applied by New.
const (
	// DefaultAPIBase is Stripe's API.
	DefaultAPIBase = "https://api.stripe.com"
	// DefaultTimeout bounds one HTTP request (connect, send, whole answer)
	// when Config.HTTPClient is nil.
	DefaultTimeout = 30 * time.Second
)

// listPageSize is the page size of the report's lists: Stripe's maximum.
const listPageSize = 100

// Config configures a Client. Only SecretKey is required.
type Config struct {
	// SecretKey is the account's secret key ("sk_test_…", "sk_live_…") or
	// a restricted key ("rk_…") allowed to write PaymentIntents and Refunds
	// and to read Balance (balance transactions), Payouts and Events.
	SecretKey string
	// APIBase is the base URL of the API; default DefaultAPIBase. Point it
	// at stripe-mock ("http://127.0.0.1:12111") or at an egress proxy. Plain
	// http is refused for a live key unless the host is loopback.
	APIBase string
	// Timeout bounds one HTTP request when HTTPClient is nil; default
	// DefaultTimeout. Bound each call with its context too: the orchestrator
	// does.
	Timeout time.Duration
	// HTTPClient, when set, carries every request as it is (its own Timeout
	// applies; Timeout is ignored).
	HTTPClient *http.Client
	// WebhookSecret is the signing secret of the account's webhook endpoint
	// pointing at payorch ("whsec_…", STRIPE_WEBHOOK_SECRET or
	// PAYORCH_CONNECTOR_<NAME>_WEBHOOK_SECRET); empty: every webhook is
	// refused (ParseWebhook).
	WebhookSecret string
}

// withDefaults fills in the defaults, the one place they live.
func (c Config) withDefaults() Config {
	if c.APIBase == "" {
		c.APIBase = DefaultAPIBase
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// validate names the first bad field.
func (c Config) validate() error {
	key := c.SecretKey
	switch {
	case key == "":
		return errors.New("stripe: Config.SecretKey is required (STRIPE_SECRET_KEY)")
	case !strings.HasPrefix(key, "sk_") && !strings.HasPrefix(key, "rk_"):
		return errors.New("stripe: Config.SecretKey must be a secret (sk_…) or restricted (rk_…) key, not a publishable one")
	case strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }):
		return errors.New("stripe: Config.SecretKey has spaces or non-ASCII characters")
	case c.Timeout < 0:
		return fmt.Errorf("stripe: Config.Timeout %s is negative", c.Timeout)
	}
	u, err := url.Parse(c.APIBase)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("stripe: Config.APIBase %q is not an http(s) base URL", c.APIBase)
	}
	if u.Scheme == "http" && !isTestKey(key) && !isLoopback(u.Hostname()) {
		return fmt.Errorf("stripe: Config.APIBase %q is plain http: a live key only travels over https (or to loopback)", c.APIBase)
	}
	return nil
}

func isTestKey(key string) bool {
	return strings.HasPrefix(key, "sk_test_") || strings.HasPrefix(key, "rk_test_")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Client is the providers.Provider for one Stripe account, on stripe-go
// v76. It holds its own backend (base URL, HTTP client, no retries, no
// telemetry), so several Clients for several accounts coexist; the global
// stripe.Key is never used.
//
// Every error it returns is a *providers.Error; answers of Stripe carry a
// *stripe.Error (from stripe-go, PaymentIntent client secret removed) as
// Err. See Authorize and classify for the kinds.
type Client struct {
	intents  paymentintent.Client
	refunds  refund.Client
	balance  balancetransaction.Client
	events   event.Client
	payouts  payout.Client
	pageSize int64
	// webhookSecret verifies webhooks (webhook.go).
	webhookSecret string
}

var _ providers.Provider = (*Client)(nil)

// New returns a Client for cfg. Errors name the bad Config field.
//
// stripe-go does not retry (MaxNetworkRetries 0: the orchestrator and its
// resolver retry with the same forwarded key, and a library retry would
// hide an unknown outcome), sends no telemetry header and logs nothing
// (every failure is returned).
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:               stripego.String(cfg.APIBase),
		HTTPClient:        hc,
		MaxNetworkRetries: stripego.Int64(0),
		EnableTelemetry:   stripego.Bool(false),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	return &Client{
		intents:  paymentintent.Client{B: backend, Key: cfg.SecretKey},
		refunds:  refund.Client{B: backend, Key: cfg.SecretKey},
		balance:  balancetransaction.Client{B: backend, Key: cfg.SecretKey},
		events:   event.Client{B: backend, Key: cfg.SecretKey},
		payouts:  payout.Client{B: backend, Key: cfg.SecretKey},
		pageSize: listPageSize,

		webhookSecret: cfg.WebhookSecret,
	}, nil
}

// Name returns "stripe".
func (c *Client) Name() string { return "stripe" }

// call is one adapter request: its context, traced to learn whether a
// connection to Stripe was ever obtained (before that, nothing can have
// reached Stripe).
type call struct {
	op   string
	ctx  context.Context
	sent atomic.Bool
}

func newCall(ctx context.Context, op string) *call {
	c := &call{op: op}
	c.ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { c.sent.Store(true) },
	})
	return c
}

// fail classifies err (see classify).
func (c *call) fail(err error) *providers.Error {
	return classify(c.op, err, c.sent.Load())
}

// Operation names, in error messages.
const (
	opCreate  = "authorize (create)"
	opConfirm = "authorize (confirm)"
	opCapture = "capture"
	opCancel  = "cancel"
	opRefund  = "refund"
	opLookup  = "lookup"
	opReport  = "report"
)

// Forwarded keys: Stripe's limit, and the suffixes deriving the keys of an
// authorization's two writes (Stripe scopes keys by account, not endpoint).
const (
	maxKeyLen  = 255
	keyCreate  = ":create"
	keyConfirm = ":confirm"
)

// checkWrite refuses, before anything is sent, a write stripe-go would
// otherwise send with a random key (none given) or refuse itself (too
// long), and an empty reference.
func checkWrite(op, key, suffix, ref string, needRef bool) *providers.Error {
	switch {
	case key == "":
		return rejected(op, "no forwarded idempotency key: refusing a write that could act twice")
	case len(key+suffix) > maxKeyLen:
		return rejected(op, fmt.Sprintf("forwarded key of %d characters is over Stripe's %d", len(key+suffix), maxKeyLen))
	case needRef && ref == "":
		return rejected(op, "empty PaymentIntent reference")
	}
	return nil
}

// rejected is a refusal decided before sending.
func rejected(op, msg string) *providers.Error {
	return &providers.Error{Kind: providers.KindRejected, Code: providers.CodeInvalidRequest,
		Message: fmt.Sprintf("stripe %s: %s", op, msg)}
}
