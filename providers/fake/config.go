package fake

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by NewServer to zero Config fields.
const (
	DefaultHoldLifetime = 7 * 24 * time.Hour
	DefaultTimeoutHang  = 30 * time.Second
	// DefaultExpiryCheck is how often a server that sends webhooks looks
	// for holds that lapsed (Config.ExpiryCheck).
	DefaultExpiryCheck = time.Second
	// DefaultOvercapturePercent is how far above its amount a hold
	// granted overcapture may be captured (Config.OvercapturePercent).
	DefaultOvercapturePercent = 20
	// DefaultIncrementPercent is how far above its first amount a hold
	// granted incremental authorization may be raised
	// (Config.IncrementPercent).
	DefaultIncrementPercent = 100
	// DefaultPayoutDelayDays is how many days after it is booked a
	// movement becomes available and is paid out (Config.PayoutDelayDays).
	DefaultPayoutDelayDays = 2
	// The fee rule of every currency Config.Fees does not name, unless
	// Config.DefaultFee says otherwise: 1.4 % + 25 minor units a charge,
	// 1500 minor units a dispute (money.go).
	DefaultFeePercentBP    = 140
	DefaultFeeFixedMinor   = 25
	DefaultDisputeFeeMinor = 1500
	// DefaultHoldRetention is how long a hold stays as it is after its
	// last change before it is compacted (Config.HoldRetention).
	DefaultHoldRetention = 48 * time.Hour
	// DefaultMaxLiveHolds is how many compactable holds stay as they are
	// at most (Config.MaxLiveHolds).
	DefaultMaxLiveHolds = 10_000
	// DefaultCompactEvery is how often the server compacts
	// (Config.CompactEvery).
	DefaultCompactEvery = 10 * time.Second
)

// maxPayoutDelayDays bounds Config.PayoutDelayDays.
const maxPayoutDelayDays = 30

// maxFeeMinor bounds the fixed parts of a FeeRule, so that a fee stays far
// from overflowing int64.
const maxFeeMinor = 1_000_000_000_000

// maxFlexPercent bounds Config.OvercapturePercent and IncrementPercent.
const maxFlexPercent = 1000

// maxBodyBytes bounds every request body except seeding.
const maxBodyBytes = 64 << 10

// Config configures a fake provider Server. The zero Config is valid.
type Config struct {
	// HoldLifetime is how long an authorized hold can be captured:
	// capture_before = created + HoldLifetime. Default 7 days (Stripe's
	// card authorization window).
	HoldLifetime time.Duration
	// Clock returns the current time; every timestamp and expiry decision
	// uses it. Default time.Now.
	Clock func() time.Time
	// Logger receives executed operations and fired faults. Default: a
	// logger that discards.
	Logger *slog.Logger
	// TimeoutHang is the longest a timeout_after_execute fault holds a
	// connection open before aborting it, when the client does not give up
	// first. Default 30 s.
	TimeoutHang time.Duration
	// StateFile, when set, keeps the server's state across restarts: it is
	// loaded when the server starts (a missing file is an empty state and
	// is created; an unreadable or invalid one is an error, never a silent
	// reset) and rewritten atomically (temporary file, fsync, rename) after
	// every request that changes the state: holds, refunds, completed
	// idempotency keys and their answers, the operations log, drifts,
	// balance transactions, payouts and money drifts (a listing that made
	// payouts rewrites it too).
	// Armed faults are not kept. Every change writes the whole state, so
	// this suits development, not load. Empty (the default): memory only.
	StateFile string
	// Token is the bearer secret every request must carry, admin and
	// health check included (Authorization: Bearer <Token>); a request
	// without it is a 401 and changes nothing. Empty (the default): a
	// random one is generated (NewToken), read it back with Server.Token
	// or Running.Token; Running.Client sends it.
	Token string
	// WebhookURL, when set, is where the server POSTs its webhooks
	// (webhooksend.go): hold authorized, captured (or capture failed),
	// canceled, expired, refund succeeded (or failed), dispute created.
	// They are sent from a queue of their own, never while an API request
	// waits. Empty (the default): none are sent.
	WebhookURL string
	// WebhookSecret signs every webhook (SignatureHeader); required with
	// WebhookURL.
	WebhookSecret string
	// ExpiryCheck is how often a server with a WebhookURL looks for holds
	// whose capture_before passed (by Clock) to send hold.expired.
	// Default DefaultExpiryCheck.
	ExpiryCheck time.Duration
	// WebhookClient sends the webhooks; default an http.Client with a 10 s
	// timeout.
	WebhookClient *http.Client
	// PublicURL is the base URL a shopper's browser reaches the fake at,
	// for the 3-D Secure challenge pages (next_action URLs:
	// PublicURL/3ds/{ref}?token=…), when that is not the URL payorch
	// calls it by (a container's name, a proxy). Empty (the default): the
	// scheme and Host of the confirmation request that started the
	// challenge.
	PublicURL string
	// OvercapturePercent is how much more than its authorized amount a
	// hold granted overcapture may be captured in all:
	// maximum_amount_capturable = amount × (100 + OvercapturePercent) /
	// 100, rounded down, following the amount as increments raise it.
	// Taken when the hold is authorized. 1 to 1000; default (0)
	// DefaultOvercapturePercent, 20.
	OvercapturePercent int
	// IncrementPercent is how much a hold granted incremental
	// authorization may be raised: maximum_amount = its first amount ×
	// (100 + IncrementPercent) / 100, rounded down, fixed when it is
	// authorized. 1 to 1000; default (0) DefaultIncrementPercent, 100
	// (up to twice the first amount).
	IncrementPercent int
	// Fees is the fee schedule of this fake (of the connector it plays),
	// by currency (ISO 4217, upper case): what it charges on each charge
	// and dispute it books (money.go). A rule given here is taken as it
	// is, zero fields meaning no fee. Default: none, every currency
	// under DefaultFee.
	Fees map[string]FeeRule
	// DefaultFee is the rule of every currency Fees does not name. Nil
	// (the default): DefaultFeePercentBP (1.4 %), DefaultFeeFixedMinor
	// (25) and DefaultDisputeFeeMinor (1500); &FeeRule{} charges nothing.
	DefaultFee *FeeRule
	// PayoutDelayDays is N of the payout schedule, daily at T+N: what is
	// booked on day T (UTC) becomes available at midnight of day T+N and
	// is paid out that day. 1 to 30; default (0) DefaultPayoutDelayDays,
	// 2.
	PayoutDelayDays int
	// HoldRetention is how long, by Clock, a hold stays as it is after
	// its last change; then it is compacted (compact.go): packed with
	// its stored answers into a compressed record that still answers
	// everything the hold did, byte for byte, and is unpacked again when
	// a write reaches it. An authorized hold whose hold.expired webhook
	// is still to be sent is never compacted. Default (0)
	// DefaultHoldRetention, 48 hours.
	HoldRetention time.Duration
	// MaxLiveHolds bounds the holds that could be compacted but are not:
	// beyond it, those changed longest ago are compacted before their
	// HoldRetention has passed. Default (0) DefaultMaxLiveHolds, 10,000.
	MaxLiveHolds int
	// CompactEvery is how often the server compacts the holds past
	// HoldRetention or MaxLiveHolds, and packs the operations log
	// likewise. Default (0) DefaultCompactEvery, 10 s.
	CompactEvery time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.HoldLifetime == 0 {
		c.HoldLifetime = DefaultHoldLifetime
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TimeoutHang == 0 {
		c.TimeoutHang = DefaultTimeoutHang
	}
	if c.Token == "" {
		c.Token = NewToken()
	}
	if c.ExpiryCheck == 0 {
		c.ExpiryCheck = DefaultExpiryCheck
	}
	if c.OvercapturePercent == 0 {
		c.OvercapturePercent = DefaultOvercapturePercent
	}
	if c.IncrementPercent == 0 {
		c.IncrementPercent = DefaultIncrementPercent
	}
	// Copied, so a caller changing its map later changes nothing here.
	c.Fees = maps.Clone(c.Fees)
	if c.DefaultFee == nil {
		c.DefaultFee = &FeeRule{PercentBP: DefaultFeePercentBP, FixedMinor: DefaultFeeFixedMinor, DisputeMinor: DefaultDisputeFeeMinor}
	}
	if c.PayoutDelayDays == 0 {
		c.PayoutDelayDays = DefaultPayoutDelayDays
	}
	if c.HoldRetention == 0 {
		c.HoldRetention = DefaultHoldRetention
	}
	if c.MaxLiveHolds == 0 {
		c.MaxLiveHolds = DefaultMaxLiveHolds
	}
	if c.CompactEvery == 0 {
		c.CompactEvery = DefaultCompactEvery
	}
	if c.WebhookClient == nil {
		c.WebhookClient = &http.Client{Timeout: 10 * time.Second}
	}
	return c
}

// validate names the first bad field.
func (c Config) validate() error {
	if c.HoldLifetime < 0 {
		return fmt.Errorf("fake: Config.HoldLifetime must not be negative, got %s", c.HoldLifetime)
	}
	if c.TimeoutHang < 0 {
		return fmt.Errorf("fake: Config.TimeoutHang must not be negative, got %s", c.TimeoutHang)
	}
	if strings.ContainsAny(c.Token, " \t\r\n") {
		return errors.New("fake: Config.Token must not contain white space")
	}
	if c.WebhookURL != "" {
		if u, err := url.Parse(c.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("fake: Config.WebhookURL %q is not an http(s) URL", c.WebhookURL)
		}
		if c.WebhookSecret == "" {
			return errors.New("fake: Config.WebhookSecret is required with Config.WebhookURL")
		}
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("fake: Config.PublicURL %q is not an http(s) base URL (no query, fragment or credentials)", c.PublicURL)
		}
	}
	if c.OvercapturePercent < 0 || c.OvercapturePercent > maxFlexPercent {
		return fmt.Errorf("fake: Config.OvercapturePercent must be within [0, %d], got %d", maxFlexPercent, c.OvercapturePercent)
	}
	if c.IncrementPercent < 0 || c.IncrementPercent > maxFlexPercent {
		return fmt.Errorf("fake: Config.IncrementPercent must be within [0, %d], got %d", maxFlexPercent, c.IncrementPercent)
	}
	if c.ExpiryCheck < 0 {
		return fmt.Errorf("fake: Config.ExpiryCheck must not be negative, got %s", c.ExpiryCheck)
	}
	if c.HoldRetention < 0 || c.MaxLiveHolds < 0 || c.CompactEvery < 0 {
		return fmt.Errorf("fake: Config.HoldRetention, MaxLiveHolds and CompactEvery must not be negative, got %s, %d, %s",
			c.HoldRetention, c.MaxLiveHolds, c.CompactEvery)
	}
	return c.validateMoney()
}

// validateMoney checks the fee and payout schedules.
func (c Config) validateMoney() error {
	if c.PayoutDelayDays < 0 || c.PayoutDelayDays > maxPayoutDelayDays {
		return fmt.Errorf("fake: Config.PayoutDelayDays must be within [0, %d], got %d", maxPayoutDelayDays, c.PayoutDelayDays)
	}
	for cur, r := range c.Fees {
		if !validCurrency(cur) {
			return fmt.Errorf("fake: Config.Fees: %q is not an ISO 4217 code in upper case", cur)
		}
		if err := r.validate(); err != nil {
			return fmt.Errorf("fake: Config.Fees[%s]: %w", cur, err)
		}
	}
	if c.DefaultFee != nil {
		if err := c.DefaultFee.validate(); err != nil {
			return fmt.Errorf("fake: Config.DefaultFee: %w", err)
		}
	}
	return nil
}
