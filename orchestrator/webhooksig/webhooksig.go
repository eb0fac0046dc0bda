// Package webhooksig signs payorch's outbound webhooks and lets a merchant
// verify them.
//
// Every delivery carries two headers:
//
//	Payorch-Signature: t=1700000000,v1=3887…3789
//	Payorch-Event-Id:  evt_…
//
// t is the time of signing in Unix seconds and v1 the lowercase hex
// HMAC-SHA256, keyed with the endpoint's signing secret, of the string
// "<t>.<body>": the decimal t, a full stop, then the request body exactly
// as received (the raw bytes, before any JSON decoding). This is the scheme
// Stripe uses, so existing code and habits carry over.
//
// While a secret is being rotated a delivery carries one v1 per valid
// secret, the new one first; a receiver holding either secret verifies it.
// Schemes other than v1 (such as Stripe's v0) are ignored.
//
// The event id is the receiver's deduplication key: delivery is at least
// once, so the same event can arrive more than once.
//
// The package uses only the standard library and nothing else from payorch,
// so a merchant can import or vendor it alone. See Example_verify for a
// receiving handler.
package webhooksig

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	// Header is the request header that carries the signature.
	Header = "Payorch-Signature"
	// EventIDHeader is the request header that carries the event's id
	// (evt_…), the key a receiver deduplicates deliveries on.
	EventIDHeader = "Payorch-Event-Id"
	// DefaultTolerance is how far a signature's timestamp may be from the
	// receiver's clock, in either direction, before Verify refuses it.
	DefaultTolerance = 5 * time.Minute
)

// Bounds that Verify enforces on a header before doing any work on it.
const (
	// maxHeaderLen is the longest header Verify parses, in bytes.
	maxHeaderLen = 4 << 10
	// maxSignatures is the most v1 signatures Verify accepts in a header.
	maxSignatures = 8
	// maxTimestampDigits keeps t well inside what time.Unix represents.
	maxTimestampDigits = 18
)

// secretPrefix starts every secret NewSecret makes.
const secretPrefix = "whsec_"

// The errors Verify returns, wrapped with detail; test for them with
// errors.Is. None of them carries the secret or the expected signature.
var (
	// ErrMissingHeader: the signature header is absent or empty.
	ErrMissingHeader = errors.New("webhooksig: missing signature header")
	// ErrMalformedHeader: the header does not parse (see Verify), is too
	// long, or carries too many signatures.
	ErrMalformedHeader = errors.New("webhooksig: malformed signature header")
	// ErrTimestampOutOfTolerance: the signature is valid but its timestamp
	// is further from now than the tolerance (a replay, or a clock off).
	ErrTimestampOutOfTolerance = errors.New("webhooksig: timestamp outside the tolerance")
	// ErrNoValidSignature: no v1 signature matches the body and secret
	// (the body was altered, the secret is wrong, or the request is forged).
	ErrNoValidSignature = errors.New("webhooksig: no valid signature")
)

// Sign returns the Payorch-Signature header value for body signed at t:
// "t=<unix seconds>,v1=<hex>" with one v1 per secret, in the order given
// (during a rotation: the new secret first, then the old one). Each secret
// string is used whole, prefix included, as the HMAC key.
//
// secrets should hold between one and eight secrets: with none the header
// has no signature, and with more Verify refuses it as malformed.
func Sign(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.Grow(len("t=") + len(ts) + len(secrets)*len(",v1=") + len(secrets)*sha256.Size*2)
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

// Verify checks that header, the Payorch-Signature value of a request,
// signs body with secret, at a time within tolerance of now. It returns nil
// when the request is genuine, or an error that matches one of
// ErrMissingHeader, ErrMalformedHeader, ErrNoValidSignature or
// ErrTimestampOutOfTolerance with errors.Is.
//
// body must be the raw request body as received. secret is the endpoint's
// signing secret exactly as payorch showed it: the whole string, "whsec_"
// prefix included, is the HMAC key (do not strip or decode it). An empty
// secret verifies nothing. A tolerance of zero or less means
// DefaultTolerance; now is normally time.Now().
//
// The header is a comma-separated list of key=value items, with optional
// spaces around each item. It must hold exactly one t (decimal Unix seconds)
// and between one and eight v1 items (64 hex digits each), be at most
// 4 KiB long, and have no empty item or item without "="; items with other
// keys (v0, future schemes) are ignored. Every v1 is compared, in constant
// time, with the expected signature, and any match makes the request
// genuine. The timestamp is checked only once a signature matched, so
// ErrTimestampOutOfTolerance always means a real but late (or early)
// request, never a forgery.
func Verify(header string, body []byte, secret string, tolerance time.Duration, now time.Time) error {
	if strings.TrimSpace(header) == "" {
		return ErrMissingHeader
	}
	if secret == "" {
		return fmt.Errorf("%w: the secret is empty", ErrNoValidSignature)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	p, err := parse(header)
	if err != nil {
		return err
	}
	want := mac(secret, p.ts, body)
	matched := false
	for _, sig := range p.sigs {
		// No early exit: every signature costs the same whether or not an
		// earlier one matched.
		if hmac.Equal(sig, want) {
			matched = true
		}
	}
	if !matched {
		return ErrNoValidSignature
	}
	age := now.Sub(p.t)
	if age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)",
			ErrTimestampOutOfTolerance, p.t.UTC().Format(time.RFC3339), age.Round(time.Second), tolerance)
	}
	return nil
}

// NewSecret returns a new signing secret: "whsec_" followed by 32 random
// bytes from crypto/rand in unpadded base64url (43 characters). The error
// is the random source's, if it ever fails.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("webhooksig: reading random bytes: %w", err)
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// mac is HMAC-SHA256 keyed with secret over "<ts>.<body>"; ts is the
// timestamp as it appears in the header.
func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// parsed is a header that parsed: its timestamp, both as written (what was
// signed) and as a time, and its decoded v1 signatures.
type parsed struct {
	ts   string
	t    time.Time
	sigs [][]byte
}

// parse reads a header as Verify documents; every error it returns wraps
// ErrMalformedHeader.
func parse(header string) (parsed, error) {
	var p parsed
	if len(header) > maxHeaderLen {
		return p, malformed("the header is %d bytes, more than %d", len(header), maxHeaderLen)
	}
	seenT := false
	for _, item := range strings.Split(header, ",") {
		key, value, ok := strings.Cut(strings.Trim(item, " \t"), "=")
		if !ok || key == "" {
			return p, malformed("an item is not key=value")
		}
		switch key {
		case "t":
			if seenT {
				return p, malformed("t appears more than once")
			}
			seenT = true
			t, err := parseTimestamp(value)
			if err != nil {
				return p, err
			}
			p.ts, p.t = value, t
		case "v1":
			if len(p.sigs) == maxSignatures {
				return p, malformed("more than %d v1 signatures", maxSignatures)
			}
			sig, err := hex.DecodeString(value)
			if err != nil || len(sig) != sha256.Size {
				return p, malformed("a v1 signature is not %d hex digits", sha256.Size*2)
			}
			p.sigs = append(p.sigs, sig)
		default:
			// Another scheme (v0, or one added later): not ours to check.
		}
	}
	if !seenT {
		return p, malformed("no t")
	}
	if len(p.sigs) == 0 {
		return p, malformed("no v1 signature")
	}
	return p, nil
}

// parseTimestamp reads t's value: decimal digits only (no sign, no
// spaces), at most maxTimestampDigits of them.
func parseTimestamp(v string) (time.Time, error) {
	if v == "" || len(v) > maxTimestampDigits {
		return time.Time{}, malformed("t is not a Unix time in seconds")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return time.Time{}, malformed("t is not a Unix time in seconds")
		}
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, malformed("t is not a Unix time in seconds")
	}
	return time.Unix(sec, 0), nil
}

// malformed wraps ErrMalformedHeader with what was wrong.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformedHeader}, args...)...)
}
