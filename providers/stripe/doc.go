// Package stripe is the providers.Provider for Stripe, on stripe-go v76
// (API version 2023-10-16); it is the only package that imports stripe-go.
//
// A hold is a PaymentIntent for cards with capture_method=manual, created
// first and confirmed second: its id reaches the orchestrator (through
// AuthorizeRequest.OnReference) before any money is held, so a lost
// confirmation answer is settled by one retrieve. Captures use
// amount_to_capture (Stripe releases the rest), cancels void the hold,
// refunds are POST /v1/refunds against the PaymentIntent, and a hold's
// capture_before is read from its charge (latest_charge expanded,
// payment_method_details.card.capture_before). The PaymentIntent's
// metadata carries payment_id and tenant_id.
//
// # Cards
//
// A card from payorch's vault (AuthorizeRequest.Card) is sent with the
// confirmation as payment_method_data[type]=card and
// payment_method_data[card][number|exp_month|exp_year|cvc] (the CVC only
// while the vault still has it), with payment_method_data[billing_details]
// [name] when the card has a holder; the PaymentIntent is then created
// without a payment method, and the vaulted method's id is never sent. A
// live or test account must be enabled for raw card data first (see
// card.go: Stripe support, with a PCI DSS SAQ D or Attestation of
// Compliance, every year); until then every card authorization fails with
// an invalid_request_error and moves no money. A card's retry without its
// CVC settles from the PaymentIntent (card.go). No error the adapter
// returns for a card authorization quotes the number or the CVC: messages
// are scrubbed (providers.ScrubCard), Stripe's included.
//
// # Idempotency
//
// Every write carries the forwarded key the orchestrator derived
// (providers.ForwardedKey), set explicitly: stripe-go would otherwise invent
// a random key per call, and a retry would place a second hold. Stripe
// scopes keys by account, not by endpoint, so the two requests of an
// authorization carry key+":create" and key+":confirm". Keys stay under
// Stripe's 255 characters. stripe-go never retries (MaxNetworkRetries 0):
// the orchestrator and its resolver retry with the same key, and decide
// what an unknown outcome means. Telemetry is off.
//
// # Errors
//
// Failures are classified once (the table is on classify, in error.go):
// declines are final
// (KindDeclined with the decline code), a 409 key in use, a 429, a refused
// connection are safe to retry (KindNotExecuted), a 5xx or a timeout after
// sending are unknown outcomes (KindUnknown), other refusals are
// KindRejected with a code (resource_missing, state_conflict,
// amount_too_large, hold_expired, idempotency_key_mismatch).
//
// # 3-D Secure
//
// With AuthorizeRequest.ReturnURL the confirmation carries return_url (and
// not error_on_requires_action); RequestThreeDS adds
// payment_method_options[card][request_three_d_secure]=any to the
// creation. Both are parameters of the keyed requests, so a retry replays
// the one challenge. Stripe's states map to the seam as:
//
//	requires_action, next_action redirect_to_url      requires_action, NextActionURL = redirect_to_url.url
//	requires_action, any other next_action            requires_action, no URL (see nextActionURL)
//	requires_capture (challenge completed)            authorized, capture_before from the charge
//	requires_payment_method, last_payment_error
//	  payment_intent_authentication_failure           declined, authentication_failed
//	402 card_error authentication_required            KindDeclined authentication_required (no return_url)
//	canceled (the challenge abandoned and canceled)   canceled
//
// Webhooks: payment_intent.requires_action (requires_action),
// payment_intent.amount_capturable_updated (authorized),
// payment_intent.payment_failed (authorization_failed, FailureCode
// authentication_failed or the decline code); enable them on the
// account's webhook endpoint.
//
// # Flexible holds
//
// Incremental authorization, multicapture and overcapture are asked for at
// creation, each only when the AuthorizeRequest asks, as
// payment_method_options[card][request_incremental_authorization|
// request_multicapture|request_overcapture]=if_available (parameters of the
// keyed creation, so a retry replays). Stripe grants them per card
// (network, merchant category, country) and reports it on the charge;
// FlexibleHolds says all three can be asked for. The mapping:
//
//	charge payment_method_details.card.incremental_authorization.status available   Flex.IncrementalAuthorization
//	charge payment_method_details.card.multicapture.status available                Flex.Multicapture
//	charge payment_method_details.card.overcapture.status available                 Flex.Overcapture,
//	  and overcapture.maximum_amount_capturable                                     Flex.MaxCapturableMinor (the most in all)
//	(Stripe states no increment limit)                                              Flex.MaxAmountMinor 0
//	IncrementAuthorization                 POST /v1/payment_intents/{id}/increment_authorization amount=<new total>
//	402 card_error on an increment         KindDeclined, decline code; the hold unchanged
//	CaptureRequest.NotFinal                final_capture=false: requires_capture stays, amount_received the
//	                                       sum so far (authorized, CapturedMinor > 0)
//	capture above the amount               amount_to_capture passed as it is (overcapture)
//	canceled after captures                captured (the rest released); the captures stand
//
// Refusals of an increment or a capture are told from the PaymentIntent,
// read once after Stripe refused (it executed nothing), since Stripe does
// not document their codes: not_supported (increment without the grant,
// final_capture=false without multicapture), amount_too_large (more than
// is capturable, overcapture's maximum included), state_conflict or
// hold_expired (no longer requires_capture), invalid_request (an increment
// not above the current amount; Stripe's 10 increment attempts per
// PaymentIntent, declines included, used up). Each increment and capture
// carries its forwarded key, so a retry replays and never raises or
// captures twice. Stripe keeps no list of a hold's increments or parts on
// the PaymentIntent or the charge, so report rows carry totals only
// (ReportRow.Parts nil).
//
// Stripe offers the three to accounts on IC+ pricing; an account on
// standard (blended) pricing asks Stripe support for them first, and until
// then its holds are not granted them. Stripe's pages also say
// incremental authorization is not offered where Strong Customer
// Authentication applies to both the business and the cardholder, and
// that the card networks restrict each feature by merchant category (and
// overcapture to a percentage of the authorized amount).
//
// # Daily report
//
// Report lists the PaymentIntents created in the day, the PaymentIntents
// behind the day's balance transactions (captures, partial capture
// reversals, refunds) and those canceled in the day (events), one row each
// in its current state.
//
// # Money movements
//
// The Client is a providers.MoneyReporter. BalanceTransactions lists the
// window's balance transactions (GET /v1/balance_transactions, source
// expanded) and Payouts the window's payouts (GET /v1/payouts), both by
// creation time. A transaction's type is read from its reporting category:
//
//	charge                                   charge
//	refund, refund_failure                   refund
//	dispute, dispute_reversal                dispute
//	payout                                   payout
//	partial_capture_reversal, payout_reversal,
//	  fee, other_adjustment, anything else   adjustment
//
// Gross, fee and net are Stripe's amount, fee and net (net = gross − fee;
// out of the balance is negative, a fee returned negative), the currency
// upper case; HoldRef is the PaymentIntent behind a charge, refund or
// dispute, PaymentID a charge's metadata payment_id. Stripe names no payout
// on a transaction: PayoutID is found by listing, for each automatic payout
// created since the window's start, the window's transactions it paid (GET
// /v1/balance_transactions?payout=po_…), one list per payout; a manual
// payout's items cannot be listed and keep PayoutID "". OperationKey is
// always "": Stripe keeps no idempotency key on its objects. A payout's
// ArrivalDate is the UTC date of its arrival_date, its Reference the
// statement descriptor ("" when it has none: stripe-go v76 has no trace
// id).
//
// # Running against Stripe test mode
//
// Stripe's test mode is a full Stripe account that moves no money. To run
// payorch on it:
//
//  1. In the Stripe Dashboard, switch to test mode and copy the secret key
//     from Developers → API keys ("sk_test_…"). A restricted key
//     ("rk_test_…") works too if it may write PaymentIntents and Refunds and
//     read Balance (balance transactions), Payouts and Events.
//
//  2. Configure the provider with the variables below.
//
//  3. Create payments with "provider": "stripe" and one of Stripe's test
//     payment methods: pm_card_visa approves; pm_card_chargeDeclined
//     declines (card_declined); pm_card_chargeDeclinedInsufficientFunds
//     declines (insufficient_funds); pm_card_visa_chargeDeclinedExpiredCard
//     declines (expired_card). Methods that need 3-D Secure
//     (pm_card_threeDSecure2Required, pm_card_authenticationRequired) wait
//     for the cardholder's challenge when the payment has a return_url
//     (see 3-D Secure below), and without one are declined
//     authentication_required at confirmation (error_on_requires_action)
//     instead of waiting for a customer who is not there;
//     pm_card_threeDSecureOptional passes without a challenge. With an
//     account enabled for raw card data (card.go),
//     vaulted cards with Stripe's test numbers work too: 4242424242424242
//     approves, 4000000000000002 declines (card_declined),
//     4000000000009995 (insufficient_funds), 4000000000000119
//     (processing_error, a soft decline).
//
//  4. The payment's provider_ref is the PaymentIntent id (pi_…): find it in
//     the Dashboard under Payments, with payment_id and tenant_id in its
//     metadata. Holds lapse after 7 days (capture_before).
//
//  5. `payorch reconcile --provider stripe --date YYYY-MM-DD` reads the
//     day's PaymentIntents, balance transactions and events from the test
//     account. Test-mode balance transactions appear at once; events are
//     kept 30 days, so reconcile recent days.
//
// The variables, as cmd/payorch reads them into a Config:
//
//	STRIPE_SECRET_KEY=sk_test_…              Config.SecretKey: required for the stripe provider
//	STRIPE_API_BASE=https://api.stripe.com   Config.APIBase: the default; a proxy, or stripe-mock
//	STRIPE_TIMEOUT=30s                       Config.Timeout: one HTTP request; default 30s
//
// Test keys and live keys never mix: objects of one mode are invisible to
// the other (a test key looking up a live pi_… gets resource_missing).
// Plain-http API bases are refused for live keys unless on loopback.
//
// For the request shapes without an account, run stripe-mock
// (`go install github.com/stripe/stripe-mock@v0.203.0`, as .ci/run does)
// and point STRIPE_API_BASE at it: `stripe-mock -http-addr
// 127.0.0.1:12111`, STRIPE_API_BASE=http://127.0.0.1:12111, any
// sk_test_… key. stripe-mock is stateless: it checks requests against
// Stripe's OpenAPI spec and answers fixtures, so it cannot show declines,
// captures or idempotency. The public spec leaves raw card parameters out,
// so stripe-mock refuses payment_method_data[type]=card; the package's
// tests have it check the card hash as the PaymentMethod it creates. The package's tests do both: a stateful
// Stripe-shaped server runs the provider behaviour suite, and stripe-mock
// validates every request the adapter sends.
package stripe
