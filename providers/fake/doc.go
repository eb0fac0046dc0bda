// Package fake is payorch's own payment provider: a real HTTP service that
// keeps holds and refunds in memory (and, with Config.StateFile, in a file
// that survives restarts), honours idempotency keys the way Stripe
// does, declines on Stripe's test payment methods and test card numbers,
// injects faults on request
// and serves a daily report, plus the Client that implements
// providers.Provider against it.
//
// The server runs embedded (Start, used by `payorch dev` and by tests) or
// standalone (ListenAndServe, used by `payorch fakeprovider`).
//
// # Endpoints
//
//	POST   /v1/holds                  create a hold, nothing held (operation "create", not logged);
//	                                  payment_method or card (see Cards)
//	POST   /v1/holds/{ref}/confirm    authorize the created hold (operation "authorize"), or
//	                                  challenge the cardholder (see 3-D Secure)
//	POST   /v1/holds/{ref}/capture    capture, 0/omitted = the rest; final_capture false keeps
//	                                  the hold open (operation "capture", see Flexible holds)
//	POST   /v1/holds/{ref}/increment  raise to a new total       (operation "increment")
//	POST   /v1/holds/{ref}/extend     a new capture_before       (operation "extend")
//	POST   /v1/holds/{ref}/cancel     void an authorized hold, or end a challenge (operation "cancel")
//	POST   /v1/holds/{ref}/refunds    refund, 0/omitted = rest   (operation "refund")
//	GET    /v1/holds/{ref}            look a hold up             (operation "lookup")
//	GET    /v1/report?from=&to=       JSON lines, [from, to)     (operation "report")
//	GET    /v1/balance_transactions?from=&to=  JSON lines, [from, to) (see Money)
//	GET    /v1/balance_transactions?payout=ID  JSON lines, the payout's items (see Money)
//	GET    /v1/payouts?from=&to=      JSON lines, [from, to)     (see Money)
//	GET    /healthz                   200 "ok"
//	GET    /_admin/operations[?idempotency_key=K]   executed operations
//	GET    /_admin/faults             armed faults
//	POST   /_admin/faults             arm a Fault
//	DELETE /_admin/faults             disarm every fault
//	POST   /_admin/report/drift       alter the report output (Drift)
//	DELETE /_admin/report/drift       clear every drift
//	POST   /_admin/money/drift        alter the money listings (MoneyDrift)
//	DELETE /_admin/money/drift        clear every money drift
//	POST   /_admin/holds              seed holds (JSON lines of SeedHold)
//	GET    /_admin/webhooks           what happened to the webhooks sent (WebhookDelivery)
//	GET    /_admin/webhooks/faults    armed webhook faults
//	POST   /_admin/webhooks/faults    arm a WebhookFault (drop, duplicate, delay, reorder)
//	DELETE /_admin/webhooks/faults    disarm every webhook fault
//	POST   /_admin/disputes           simulate a dispute of a captured hold (Dispute): its
//	                                  withdrawal is booked; dispute.created sent with webhooks
//	POST   /_admin/holds/{ref}/authenticate  {"result":"complete"|"fail"}: what the challenge
//	                                  page's buttons do, without the redirect
//	GET    /3ds/{ref}?token=T         the challenge page (HTML, no bearer token: see 3-D Secure)
//	POST   /3ds/{ref}                 its form: token=T&result=complete|fail, then 303 to return_url
//
// Every POST under /v1 requires an Idempotency-Key header (1 to 255
// printable ASCII characters). Keys are scoped per endpoint (route pattern)
// and key. The same key with the same parameters (path and canonical JSON
// body) replays the stored first answer byte for byte with
// "Idempotent-Replayed: true"; with other parameters it is a 400
// idempotency_key_mismatch; while the first request still executes it is a
// 409 idempotency_key_in_use. Answers are stored once the operation has
// executed, business refusals (decline, state_conflict, amount_too_large,
// hold_expired, resource_missing, not_supported, an increment's
// invalid_request) included; validation errors are not.
// A card in the body is compared without its CVC and by an HMAC of its
// number (see Cards).
// Admin endpoints need no Idempotency-Key.
//
// # Authentication
//
// Every request, to every endpoint (the admin API and /healthz included)
// but the challenge pages under /3ds/, carries "Authorization: Bearer
// <token>", the server's Config.Token: one
// given (`payorch fakeprovider --admin-token`, PAYORCH_FAKE_TOKEN) or, when
// empty, a random one generated at start (Server.Token, Running.Token;
// Running.Client sends it). The token is compared in constant time;
// without it the answer is 401 unauthorized and nothing changes, so no
// other local process, and no page in a browser, can arm faults, seed
// rows or move holds. The challenge pages are opened by a shopper's
// browser, which has no token: each is guarded by the unguessable token
// of its own hold in its URL (256 bits, compared in constant time), can
// only complete or fail that hold's challenge, and answers a wrong token
// and an unknown hold with the same 404 page.
//
// Request bodies are JSON (Content-Type application/json), at most 64 KiB,
// decoded strictly: unknown fields and trailing data are a 400.
//
// # State file
//
// With Config.StateFile set, the server loads its state from that file when
// it starts and rewrites the file, atomically and under the state lock,
// after every request that changed the state: keyed writes (creates and
// every executed operation, refusals included, with their stored answers),
// seeding, disputes, drift changes and listings that made payouts (see
// Money). Packed holds (see Compaction) are written out in full, as if
// live; each key names the hold it answered for ("hold_ref"), so that
// it is packed with it after a restart (keys of older files stay
// unpacked). Files of builds before the money load as a fake that moved
// none; what they hold is not booked after the fact. The file is a JSON document with a "version";
// a missing file is an empty state, an unreadable or invalid one makes
// Start fail. Armed faults and idempotency keys still executing are not
// kept.
//
// # Compaction
//
// A fake left running (`make run`, long benchmarks) keeps its memory
// small without changing any answer. A hold unchanged for
// Config.HoldRetention by Config.Clock (default 48 hours; an authorized
// hold counts from its capture_before when that is later), or beyond the
// Config.MaxLiveHolds (default 10,000) changed most recently, is packed
// every Config.CompactEvery (default 10 s; Server.Compact does it at
// once): the hold, its refunds and the stored answers of its idempotency
// keys go into one flate-compressed record, in the state file's own
// encoding, and only two small indexes by hash stay in memory. Lookups,
// replays (byte for byte), key mismatches, the report and the challenge
// pages read the record as they read the hold; a write to a packed hold
// (a refund, a dispute, a capture, ...) unpacks it first. An authorized
// hold whose hold.expired webhook is still to be sent is never packed.
// The operations log is packed likewise, 1024 operations at a time
// (GET /_admin/operations then decodes the whole log). Nothing is ever
// dropped. Balance transactions and payouts stay as they are. Measured
// (BenchmarkHoldFootprint): about 4,000 bytes of heap per payment
// (authorize and capture) live, 1,300 packed, some 400 of which are its
// balance transaction.
//
// # Webhooks
//
// With Config.WebhookURL (and Config.WebhookSecret) set, the server POSTs
// an Event for every hold authorized (hold.authorized), waiting for its
// cardholder's authentication (hold.requires_action), failed after it
// (hold.payment_failed, failure_code authentication_failed), captured
// (hold.captured, one per capture with that capture's amount, or
// capture.failed when an executed capture was refused), raised by an
// increment (hold.amount_updated, amount_minor the new total; none for a
// refused or declined increment), canceled (hold.canceled), lapsed (hold.expired, found every
// Config.ExpiryCheck by Config.Clock), refunded (refund.succeeded, or
// refund.failed) and disputed (dispute.created, POST /_admin/disputes).
// Each is signed like Stripe's webhooks, in the Fake-Signature header:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>". Events
// caused by a request carry its idempotency_key; those of a completed
// challenge carry the key of the confirmation that started it. They are sent from a
// queue by a goroutine of their own, never while an API request waits,
// and a delivery that fails is tried again up to 5 times. Webhook faults
// drop, duplicate, delay or reorder them.
//
// # 3-D Secure
//
// Stripe's test methods and numbers keep their meaning (the card numbers
// work with any future expiry and CVC):
//
//	pm_card_threeDSecure2Required   4000000000003220  always challenged; without return_url
//	                                                  declined authentication_required
//	pm_card_threeDSecureOptional    4000000000003055  authorized at once (frictionless);
//	                                                  challenged with request_three_d_secure
//	pm_card_authenticationRequired  4000002760003184  declined authentication_required unless
//	                                                  request_three_d_secure, then challenged
//
// Any other card is challenged only with request_three_d_secure (as
// Stripe's request_three_d_secure=any does on a test card that supports
// 3-D Secure); one that declines declines at once, before any challenge.
// POST /v1/holds and the confirmation take "return_url" (an absolute
// http(s) URL: the cardholder is there to authenticate and comes back to
// it) and "request_three_d_secure" (true: challenge; needs a return_url);
// the confirmation's, when given, replace the create's, and both are in
// the fingerprint of their keys.
//
// A challenged confirmation answers 200 with the hold in status
// requires_action, nothing held (no capture_before), and
// "next_action": {"type": "redirect_to_url", "url", "return_url"}; the
// url is the fake's challenge page, Config.PublicURL (else the scheme and
// Host the confirmation came to) + /3ds/{ref}?token=<64 hex digits>. The
// answer is stored under the key like any other, so a retry gets the
// same challenge, never a second. The operation is logged with outcome
// requires_action and hold.requires_action is sent.
//
// The page shows the amount, the description, the card's brand and last
// four digits (or the payment method) and two buttons, Complete and Fail.
// Either moves the hold once: to authorized, with capture_before a
// HoldLifetime from then, or to declined authentication_failed; it logs
// an "authenticate" operation and sends hold.authorized or
// hold.payment_failed, both under the confirmation's key; then it answers
// 303 See Other to return_url with payment_intent=<ref> and
// redirect_status=succeeded|failed appended to its query. Another submit
// changes nothing and redirects the same way; one after the hold was
// canceled answers 410 with a page saying the challenge expired. The
// pages are HTML under a Content-Security-Policy that loads nothing but
// their own style, forbids framing, and sends no Referer (the URL holds
// the token).
//
// Cancel ends a challenge nobody completed: requires_action to canceled,
// nothing released (amount_minor 0), hold.canceled sent. Capture, extend
// and refund of a hold waiting for its cardholder are state_conflict. The
// report lists it with status requires_action.
//
// # Errors
//
// Errors are {"error":{"type","code","message","param","hold"}} with 400
// (invalid request or business refusal), 401 (unauthorized: no token),
// 402 (declined; "hold" carries the declined hold; a card_error about card
// data carries none), 404
// (resource_missing), 409 (idempotency_key_in_use), 413 (body too large),
// 415 (not JSON) and 503 provider_unavailable (a fault that ran nothing).
//
// # Payment methods
//
// pm_card_visa (also the default) approves; pm_card_chargeDeclined declines
// with card_declined; pm_card_chargeDeclinedInsufficientFunds declines with
// insufficient_funds. Three decline with the codes of a soft decline (the
// issuer or the processor could not decide now):
// pm_card_chargeDeclinedProcessingError with processing_error,
// pm_card_issuerUnavailable with issuer_not_available and
// pm_card_tryAgainLater with try_again_later. A decline still creates a
// hold in status declined.
// Two approve and are for flexible holds: pm_card_flexUnavailable is
// granted none of the features asked for, pm_card_incrementDeclined is
// granted them but every increment is declined card_declined.
// Any other payment method is a 400 invalid_request.
//
// # Cards
//
// Instead of payment_method, POST /v1/holds takes a card in the clear:
// "card": {"number", "exp_month", "exp_year", "cvc" (optional),
// "holder_name" (optional)}; both at once is a 400. Stripe's test numbers
// give the outcomes of the matching pm_card_* methods:
//
//	4000000000000002  card_declined          4000000000000069  expired_card
//	4000000000009995  insufficient_funds     4000000000000127  incorrect_cvc
//	4000000000000119  processing_error       4000000000000101  incorrect_cvc when a CVC is given
//	4000000000009987  lost_card              4000000000006975  card_velocity_exceeded
//	4000000000009979  stolen_card            4100000000000019  fraudulent
//
// and two numbers of the fake's own, for soft declines Stripe has no test
// card for: 4000009900000012 (TestCardIssuerUnavailable) declines with
// issuer_not_available, 4000009900000020 (TestCardTryAgainLater) with
// try_again_later; and two for flexible holds, which approve:
// 4000009900000038 (TestCardFlexUnavailable) is granted none of the
// features, 4000009900000046 (TestCardIncrementDeclined) has every
// increment declined. Any other number that passes the Luhn check approves
// (4242424242424242, 5555555555554444, 378282246310005, ...).
//
// Card data that cannot be right is refused when the hold is created, as
// Stripe refuses it, with a 402 card_error naming the field and no hold:
// invalid_number (not 13 to 19 digits), incorrect_number (fails the Luhn
// check), invalid_expiry_month (not 1 to 12, or past in the current year),
// invalid_expiry_year (past, or more than 50 years ahead), invalid_cvc (a
// CVC not of 3 digits, 4 for American Express).
//
// The fake never keeps a card: its outcome is decided when the hold is
// created, and the hold keeps, shows and stores only "card": {"brand",
// "last4"}. No answer, log line, webhook or state file holds the number or
// the CVC. The idempotency fingerprint covers the card without its CVC (a
// retry that lacks it is the same request: payorch's vault erases the CVC
// after the first answer) and its number only as an HMAC under a key
// derived from the server's token, so the state file holds nothing a
// guessed number can be tested against; after a restart with another
// token, a retried card authorization is a mismatch.
//
// # Flexible holds
//
// POST /v1/holds and the confirmation take "request_incremental_authorization",
// "request_multicapture" and "request_overcapture" (booleans, Stripe's
// request_*=if_available; asked at either counts, and both are in the
// fingerprint of their keys). When the hold is authorized (at once or
// when its challenge is completed) every approving card is granted what
// it asked for, but pm_card_flexUnavailable and TestCardFlexUnavailable,
// granted none. A hold that asked for any shows, once authorized,
// "flex": {"incremental_authorization", "multicapture", "overcapture":
// "available"|"unavailable", "maximum_amount_capturable" (with
// overcapture: amount × (100 + Config.OvercapturePercent) / 100, rounded
// down, following the amount), "maximum_amount" (with increments: the
// first amount × (100 + Config.IncrementPercent) / 100)}.
//
// POST /v1/holds/{ref}/increment {"amount_minor"} raises the hold to that
// new total (never the difference), once per key. Refused, the hold
// unchanged: 404 resource_missing; 400 state_conflict unless authorized
// (captured, canceled, requires_action, expired, declined); not_supported
// without incremental authorization; invalid_request when not above the
// current amount; amount_too_large above maximum_amount; 402
// card_declined (the hold in the error) for pm_card_incrementDeclined,
// TestCardIncrementDeclined, or a decline fault. capture_before stays
// where it was.
//
// A capture with "final_capture": false (which needs a positive
// amount_minor) on a hold granted multicapture captures that amount and
// leaves the hold authorized, captured_minor the sum so far, until a
// capture is final (the default: its amount, zero meaning what remains of
// the authorized amount, then the rest released) or nothing is left to
// capture. final_capture false without multicapture is not_supported.
// Captures add up to at most the authorized amount, or with overcapture
// maximum_amount_capturable: above it, amount_too_large and no change.
// The captured part of a hold still authorized can be refunded (the hold
// stays authorized); a cancel after partial captures releases the rest
// and ends the hold captured (Stripe's PaymentIntent ends succeeded), as
// does its lapse (hold.expired then carries the amount released).
//
// Every increment and capture is a part of its hold: the report's rows
// carry "parts": [{"kind": "increment"|"capture", "amount_minor" (the new
// total, or the amount captured), "idempotency_key", "created_at"}], in
// order; seeded holds have none. Drifts part_amount, part_drop and
// part_add alter them in the report only.
//
// # Money
//
// The fake keeps a balance, as Stripe does, and reports its movements.
// Every money movement books one balance transaction: each capture (each
// part of a multicapture hold too) a charge of the amount captured; each
// refund a refund (gross negative); each dispute (POST /_admin/disputes)
// the withdrawal of the disputed amount (gross negative); a seeded hold a
// charge of its captured_minor and a refund of its refunded_minor, at its
// updated_at. Authorizations, increments, cancels, expiries and declines
// move no money and book nothing. A movement carries the hold
// (hold_ref), the payment (payment_id, from the metadata), the
// idempotency key of the request that made it (operation_key; none for
// disputes and seeds), and its source: the hold for a charge, the refund,
// the dispute, the payout.
//
// Fees follow the fake's schedule, Config.Fees by currency, else
// Config.DefaultFee (default 140 basis points + 25 minor units a charge,
// 1500 a dispute): a charge pays gross × percent_bp / 10000 rounded half
// up to a whole minor unit, plus fixed_minor (int64 throughout, never a
// float; a fee may exceed a tiny charge, its net then negative); a refund
// pays none and returns none of the charge's fee (as at Stripe); a
// dispute pays dispute_minor. Net is gross − fee.
//
// Payouts are daily at T+N (N = Config.PayoutDelayDays, default 2, UTC
// days): a movement booked on day T is available at midnight of T+N
// (available_on). Each day D, per currency, the movements available by D
// and not yet paid out are paid out in one payout created at D's
// midnight, when their nets add up to more than zero; otherwise they are
// carried to the next day that has more (a negative balance carries over
// as at Stripe). A payout books its own movement (type payout, gross and
// net −amount, payout_id its own); every item gets payout_id. Its
// arrival_date is the next midnight; its status is in_transit until then
// by Config.Clock, then paid; its reference "FAKEPAYOUT-" and its id's
// hex digits in upper case. Payouts are made when asked for (a listing,
// a money drift) for every day up to the clock's, and kept, so answers
// are stable and a settable clock decides them. A movement seeded with a
// time whose payout day was already made goes into the next day's.
//
// GET /v1/balance_transactions?from=&to= streams one JSON line per
// movement created in [from, to) ({"object":"balance_transaction","id",
// "type","source","hold_ref","payment_id","operation_key","gross_minor",
// "fee_minor","net_minor","currency","payout_id","created_at",
// "available_on"}) then {"object":"balance_transactions_end","count":N};
// GET /v1/payouts?from=&to= one per payout created in [from, to)
// ({"object":"payout","id","amount_minor","currency","status",
// "arrival_date","reference","created_at"}) then
// {"object":"payouts_end","count":N}. GET
// /v1/balance_transactions?payout=ID lists the movements payout ID paid
// out, whenever created, and its own, as Stripe's payout filter does
// (a window is refused; an unknown payout is 404 resource_missing).
// Faults target them as operations balance_transactions and payouts.
//
// Money drifts (POST /_admin/money/drift, a MoneyDrift) alter these
// listings (a payout's items too), never the balance: fee (a wrong fee,
// the net and the payout following), balance_transaction_drop,
// payout_item_drop (the item without its payout, the payout's amount
// unchanged), payout_item_add (an
// unknown item, the payout's amount following), payout_amount and
// payout_status (failed, or in_transit forever).
package fake
