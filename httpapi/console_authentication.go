package httpapi

import (
	"fmt"
	"net/url"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// The console's view of 3-D Secure challenges (orchestrator's
// authentication.go): the payments waiting for their shopper on the Holds
// page, and a payment's challenge, step by step, on its page. Both are
// read from what the payment and its history already record; nothing here
// asks a provider.

// maxConsoleWaiting bounds the waiting payments the Holds page lists.
const maxConsoleWaiting = 100

// waitingRow is a payment waiting for its shopper, as the Holds page
// lists it.
type waitingRow struct {
	Payment orchestrator.Payment
	// Waiting is how long the challenge has been open ("4m").
	Waiting string
	// Abandon says when the sweeper abandons it: "in 26m", or "due now"
	// once its deadline passed.
	Abandon string
}

// newWaitingRow is p's row at now. A payment's updated_at is when it
// entered requires_action (orchestrator.WaitingPayments).
func newWaitingRow(p orchestrator.Payment, now time.Time) waitingRow {
	return waitingRow{Payment: p, Waiting: formatSpan(now.Sub(p.UpdatedAt)), Abandon: abandonIn(p.ActionExpiresAt, now)}
}

// abandonIn says when a challenge due at expires is abandoned: "in 26m",
// "due now" once past, "" when it has no deadline.
func abandonIn(expires *time.Time, now time.Time) string {
	if expires == nil {
		return ""
	}
	if left := expires.Sub(now); left > 0 {
		// Counted down to the next whole minute: 17m59s left is "in 18m".
		return "in " + formatSpan((left + time.Minute - 1).Truncate(time.Minute))
	}
	return "due now"
}

// formatSpan writes a duration for people to the minute: "<1m", "26m",
// "3h 05m".
func formatSpan(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "<1m"
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
}

// authenticationView is a payment's challenge as its page shows it.
type authenticationView struct {
	IssuedAt time.Time
	// Connector and Attempt are those of the payment: no attempt follows
	// a challenge (no failover once the shopper was challenged).
	Connector string
	Attempt   int
	ReturnURL string
	// ChallengeHost is the host of the challenge page only: its URL can
	// carry the provider's client secret, not for anyone's eyes.
	ChallengeHost string
	ExpiresAt     *time.Time
	// Waiting is set while the payment is requires_action, with how long
	// it has waited ("4m") and when it is abandoned ("in 26m", "due now").
	Waiting    bool
	WaitingFor string
	AbandonIn  string
	End        *authenticationEnd
	// Cancels are the provider calls that canceled the intent of an
	// abandoned challenge.
	Cancels []orchestrator.Event
	// Webhooks are the provider's webhooks about the challenge.
	Webhooks []orchestrator.Event
}

// authenticationEnd is how a challenge ended.
type authenticationEnd struct {
	At time.Time
	// Outcome is completed, failed or abandoned.
	Outcome     string
	To          string
	FailureCode string
	// FoundBy says who found it ended, for people.
	FoundBy        string
	ProviderStatus string
}

// foundBy names, for people, who found a challenge ended (the detail
// found_by of its state change).
func foundBy(by string) string {
	switch by {
	case "webhook":
		return "the provider's webhook"
	case "confirm":
		return "the merchant's confirm (POST /v1/payments/{id}/confirm)"
	case "sweeper":
		return "the hold sweeper"
	case "":
		return "—"
	}
	return by
}

// challengeWebhookKinds are the provider webhooks about a challenge
// whenever they arrive; a hold_canceled is about it only while it waits
// or when it did not end authorized (the cancel of an abandoned one).
var challengeWebhookKinds = map[string]bool{
	string(providers.WebhookRequiresAction):      true,
	string(providers.WebhookAuthorized):          true,
	string(providers.WebhookAuthorizationFailed): true,
}

// newAuthenticationView reads payment p's challenge from its history evs
// (oldest first) at now: nil when p never had one (no pending →
// requires_action state change).
func newAuthenticationView(p orchestrator.Payment, evs []orchestrator.Event, now time.Time) *authenticationView {
	issued := -1
	for i, ev := range evs {
		if stateChange(ev, orchestrator.StatusPending, orchestrator.StatusRequiresAction) {
			issued = i
			break
		}
	}
	if issued < 0 {
		return nil
	}
	v := &authenticationView{IssuedAt: evs[issued].CreatedAt, Connector: p.Provider, Attempt: p.Attempt,
		ExpiresAt: p.ActionExpiresAt, Waiting: p.Status == orchestrator.StatusRequiresAction}
	if p.ReturnURL != nil {
		v.ReturnURL = *p.ReturnURL
	}
	if p.NextActionURL != nil {
		if u, err := url.Parse(*p.NextActionURL); err == nil {
			v.ChallengeHost = u.Host
		}
	}
	if v.Waiting {
		v.WaitingFor, v.AbandonIn = formatSpan(now.Sub(v.IssuedAt)), abandonIn(p.ActionExpiresAt, now)
	}
	ended := false
	for _, ev := range evs[issued+1:] {
		switch {
		case ev.FromStatus != nil && *ev.FromStatus == string(orchestrator.StatusRequiresAction) && ev.Type == "state_changed":
			v.End, ended = newAuthenticationEnd(ev), true
		case ev.Type == "provider_call" && !ended && derefString(ev.Operation) == "cancel":
			v.Cancels = append(v.Cancels, ev)
		case ev.Type == "provider_event" && challengeWebhook(ev, v.Connector, ended, v.End):
			v.Webhooks = append(v.Webhooks, ev)
		}
	}
	if v.End == nil || v.End.Outcome != "abandoned" {
		v.Cancels = nil
	}
	return v
}

// challengeWebhook reports whether provider event ev, received after the
// challenge was issued (after it ended when ended), is about the challenge
// of the payment's connector.
func challengeWebhook(ev orchestrator.Event, connector string, ended bool, end *authenticationEnd) bool {
	if c, _ := ev.Detail["connector"].(string); c != connector || ev.Operation == nil {
		return false
	}
	kind := *ev.Operation
	if challengeWebhookKinds[kind] {
		return true
	}
	return kind == string(providers.WebhookHoldCanceled) && (!ended || end.To != string(orchestrator.StatusAuthorized))
}

// stateChange reports whether ev is the state change from → to.
func stateChange(ev orchestrator.Event, from, to orchestrator.Status) bool {
	return ev.Type == "state_changed" && ev.FromStatus != nil && *ev.FromStatus == string(from) &&
		ev.ToStatus != nil && *ev.ToStatus == string(to)
}

// newAuthenticationEnd reads how a challenge ended from its state change
// out of requires_action (orchestrator's settleAction records found_by,
// provider_status and failure_code).
func newAuthenticationEnd(ev orchestrator.Event) *authenticationEnd {
	end := &authenticationEnd{At: ev.CreatedAt, To: derefString(ev.ToStatus)}
	by, _ := ev.Detail["found_by"].(string)
	end.FoundBy = foundBy(by)
	end.ProviderStatus, _ = ev.Detail["provider_status"].(string)
	end.FailureCode, _ = ev.Detail["failure_code"].(string)
	switch {
	case end.To == string(orchestrator.StatusAuthorized):
		end.Outcome = "completed"
	case end.FailureCode == orchestrator.FailureAuthenticationAbandoned:
		end.Outcome = "abandoned"
	default:
		end.Outcome = "failed"
	}
	return end
}
