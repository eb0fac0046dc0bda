package httpapi

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bojanz/currency"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

// formatMinor writes an amount in minor units with the decimal point where
// the currency puts it (JPY 0 digits, EUR 2, KWD 3), grouped by thousands,
// followed by the currency code. Integer arithmetic only.
func formatMinor(minor int64, code string) string {
	digits, ok := currency.GetDigits(strings.ToUpper(code))
	if !ok {
		digits = 2
	}
	neg := minor < 0
	var u uint64
	if neg {
		u = uint64(-(minor + 1)) + 1 // safe for math.MinInt64
	} else {
		u = uint64(minor)
	}
	s := strconv.FormatUint(u, 10)
	if len(s) <= int(digits) {
		s = strings.Repeat("0", int(digits)-len(s)+1) + s
	}
	whole, frac := s[:len(s)-int(digits)], s[len(s)-int(digits):]
	var b strings.Builder
	if neg {
		b.WriteString("−")
	}
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if digits > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	if code != "" {
		b.WriteString("\u00a0")
		b.WriteString(strings.ToUpper(code))
	}
	return b.String()
}

// paymentBadges is the badge of each payment state (one for each of
// orchestrator.Statuses, as TestPaymentStatusesAgree checks).
var paymentBadges = map[orchestrator.Status]string{
	orchestrator.StatusPending:           "warn",
	orchestrator.StatusRequiresAction:    "warn",
	orchestrator.StatusAuthorized:        "good",
	orchestrator.StatusFailed:            "bad",
	orchestrator.StatusCaptured:          "good",
	orchestrator.StatusCanceled:          "neutral",
	orchestrator.StatusExpired:           "bad",
	orchestrator.StatusPartiallyRefunded: "warn",
	orchestrator.StatusRefunded:          "neutral",
}

// statusBadge is the CSS class of a status badge: good, bad, warn or
// neutral. Payment states have theirs (paymentBadges); the other words
// are those of operations, runs, discrepancies, provider calls, webhook
// deliveries and flexible-hold grants (unavailable is neutral: the card
// does not offer it, nothing failed).
func statusBadge(status string) string {
	if badge, ok := paymentBadges[orchestrator.Status(status)]; ok {
		return badge
	}
	switch status {
	case "succeeded", "resolved", "ok", "success", "completed", "closed", "delivered", string(orchestrator.GrantAvailable):
		return "good"
	case "declined", "error", "open":
		return "bad"
	case "running", "unknown", "timeout", "half_open", string(orchestrator.GrantRequested):
		return "warn"
	}
	return "neutral"
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return formatTime(*t)
}

func derefString(p *string) string {
	if p == nil {
		return "—"
	}
	return *p
}

func derefInt(p *int64) string {
	if p == nil {
		return "—"
	}
	return strconv.FormatInt(*p, 10)
}

func compactJSON(v any) string {
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func discrepancyCategories() []string { return reconcile.Categories }

func formatMillis(p *float64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatFloat(*p, 'f', 0, 64) + " ms"
}

// discrepancyValue shows an expected or actual value of a discrepancy: an
// amount (minor units in the discrepancy's currency; a part_mismatch's
// are amounts or "absent"; a fee_mismatch's fees, a payout_unexplained's
// sums, a payout's amount and its bank line's, a payout missing in the
// bank's expected amount and an unmatched credit's amount are amounts
// too) formatted as money, anything else ("absent", "a payout", "none")
// as it is.
func discrepancyValue(d reconcile.Discrepancy, v string) string {
	switch d.Category {
	case reconcile.AmountMismatch, reconcile.PartMismatch, reconcile.FeeMismatch, reconcile.PayoutUnexplained,
		reconcile.PayoutMissingInBank, reconcile.PayoutAmountMismatch, reconcile.BankCreditUnmatched:
	default:
		return v
	}
	if d.Currency == "" {
		return v
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return v
	}
	return formatMinor(n, d.Currency)
}

// eventAttempt names the attempt an event belongs to, "#2 on fake_b", from
// its detail (provider calls and attempt_started events carry it); ""
// for other events.
func eventAttempt(ev orchestrator.Event) string {
	n, ok := ev.Detail["attempt"]
	if !ok {
		return ""
	}
	s := "#" + detailText(n)
	for _, k := range []string{"connector", "provider"} {
		if c, ok := ev.Detail[k].(string); ok && c != "" {
			return s + " on " + c
		}
	}
	return s
}

// eventDetail is an event's detail for people: a sentence for an
// attempt_started event (which connector the payment left and why), the
// detail's JSON otherwise.
func eventDetail(ev orchestrator.Event) string {
	if ev.Type != "attempt_started" {
		return compactJSON(ev.Detail)
	}
	prev, _ := ev.Detail["previous_connector"].(string)
	reason, _ := ev.Detail["reason"].(string)
	switch {
	case prev != "" && reason != "":
		return "Failed over from " + prev + " after " + reason
	case prev != "":
		return "Failed over from " + prev
	}
	return compactJSON(ev.Detail)
}

// operationChange is what a state change made by a capture, increment,
// cancel or refund did, for people: "Captured a part: 3.00 EUR", "Raised
// the hold to 14.00 EUR". Nil for any other event. A part of a
// multicapture hold, or an increment, leaves the payment authorized, so
// its change alone (authorized → authorized) says nothing; the detail's
// operation id (its prefix is its kind) and amount say what happened.
func operationChange(ev orchestrator.Event, currency string) *opChange {
	id, _ := ev.Detail["operation_id"].(string)
	// JSON numbers arrive as float64, exact for whole numbers up to 2^53
	// (amounts stay far below); anything else is not an amount.
	amount, ok := ev.Detail["amount_minor"].(float64)
	if ev.Type != "state_changed" || id == "" || !ok || ev.ToStatus == nil ||
		amount != math.Trunc(amount) || amount < 0 || amount > 1<<53 {
		return nil
	}
	money := formatMinor(int64(amount), currency)
	c := &opChange{OperationID: id}
	switch kind, _, _ := strings.Cut(id, "_"); kind {
	case "cap":
		c.Text = "Captured " + money
		if *ev.ToStatus == string(orchestrator.StatusAuthorized) {
			c.Text = "Captured a part: " + money
		}
	case "inc":
		c.Text = "Raised the hold to " + money
	case "re":
		c.Text = "Refunded " + money
	case "cnl":
		c.Text = "Canceled the hold"
	default:
		return nil
	}
	if src, _ := ev.Detail["source"].(string); src == "provider_webhook" {
		c.Text += ", made at the provider"
	}
	return c
}

// opChange is an operation's state change on a payment's timeline.
type opChange struct {
	Text        string
	OperationID string
}

// detailText writes a value of an event's detail (JSON numbers arrive as
// float64).
func detailText(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		return x
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// routingText says what routed a payment: its tenant's routing version, or
// none (the connector the request named, or the default one).
func routingText(v *int) string {
	if v == nil {
		return "no routing rules: the provider the request named, or the default"
	}
	return "routing v" + strconv.Itoa(*v)
}
