package fake

import (
	"net/http"
	"time"
)

// Op names an operation of the fake provider, in its operations log and in
// faults.
type Op string

// Operations. The writes (authorize, which is the confirmation of a
// created hold, capture, cancel, refund, extend, increment) are logged;
// faults can target every one.
const (
	// OpCreate creates a hold in requires_confirmation; nothing is held.
	OpCreate    Op = "create"
	OpAuthorize Op = "authorize"
	OpCapture   Op = "capture"
	OpCancel    Op = "cancel"
	OpRefund    Op = "refund"
	// OpExtend moves an authorized hold's deadline later (no money moves).
	OpExtend Op = "extend"
	// OpIncrement raises an authorized hold granted incremental
	// authorization to a new total.
	OpIncrement Op = "increment"
	// OpAuthenticate is the cardholder completing (or failing) a 3-D
	// Secure challenge: the hold placed (or declined) at last. It is
	// logged with the key of the confirmation that started the challenge;
	// faults cannot target it (it is the shopper's click, not a call).
	OpAuthenticate Op = "authenticate"
	OpLookup       Op = "lookup"
	OpReport       Op = "report"
	// OpBalanceTransactions and OpPayouts list the money the fake moved
	// (money.go); like the report, they are not logged.
	OpBalanceTransactions Op = "balance_transactions"
	OpPayouts             Op = "payouts"
)

// valid reports whether o is a known operation.
func (o Op) valid() bool {
	switch o {
	case OpCreate, OpAuthorize, OpCapture, OpCancel, OpRefund, OpExtend, OpIncrement, OpLookup, OpReport,
		OpBalanceTransactions, OpPayouts:
		return true
	}
	return false
}

// OutcomeSucceeded is the Outcome of an operation that did what it was
// asked; OutcomeRequiresAction that of an authorization whose issuer
// challenged the cardholder (nothing held yet); any other Outcome is the
// error code it answered with.
const (
	OutcomeSucceeded      = "succeeded"
	OutcomeRequiresAction = "requires_action"
)

// Operation is one write the fake provider actually executed: never a
// replay, a refused idempotency key or a request a fault stopped before
// executing. Counting a key's operations is how tests prove exactly-once at
// the provider.
type Operation struct {
	// Seq numbers executed operations from 1, in execution order.
	Seq            int64  `json:"seq"`
	Operation      Op     `json:"operation"`
	IdempotencyKey string `json:"idempotency_key"`
	// Ref is the hold's reference (for a refund too).
	Ref string `json:"ref"`
	// RefundRef is the refund's reference, for a successful refund.
	RefundRef string `json:"refund_ref,omitempty"`
	PaymentID string `json:"payment_id,omitempty"`
	// AmountMinor is the amount authorized, captured, released by the
	// cancel, or refunded, or the new total of an increment; the
	// requested amount when refused.
	AmountMinor int64 `json:"amount_minor"`
	// Outcome is OutcomeSucceeded or the error code answered
	// (card_declined, state_conflict, ...).
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
}

// operationList is the body of GET /_admin/operations.
type operationList struct {
	Data []Operation `json:"data"`
}

// Operations returns the executed operations, all of them when key is
// empty, else those carrying key.
func (s *Server) Operations(key string) []Operation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.operationsLocked(key)
}

// handleOperations serves GET /_admin/operations[?idempotency_key=K].
func (s *Server) handleOperations(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, operationList{Data: s.Operations(r.URL.Query().Get("idempotency_key"))})
}
