package stripe

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// Metadata keys set on every PaymentIntent, so a Stripe record is matched
// back to a payment without its reference.
const (
	metaPaymentID = "payment_id"
	metaTenantID  = "tenant_id"
)

// expandCharge is expanded on every PaymentIntent answer: the hold's
// capture_before and the refunded amount live on the charge.
const expandCharge = "latest_charge"

// expandPaymentMethod is expanded where the card a PaymentIntent was
// confirmed with is compared (card.go's chargedWith).
const expandPaymentMethod = "payment_method"

// paymentMethodRE is the shape of the payment methods the adapter sends
// Stripe: PaymentMethod ids, pm_ then letters, digits and underscores
// (pm_1N…, and the test methods pm_card_visa, pm_card_chargeDeclined).
var paymentMethodRE = regexp.MustCompile(`^pm_[A-Za-z0-9_]{1,100}$`)

// CheckPaymentMethod accepts a Stripe PaymentMethod id (paymentMethodRE).
func (c *Client) CheckPaymentMethod(pm string) error {
	if !paymentMethodRE.MatchString(pm) {
		return errors.New("payment_method must look like pm_card_visa")
	}
	return nil
}

// Authorize places a hold: a PaymentIntent with capture_method=manual for
// cards, created (key req.Key+":create"; nothing is held yet), handed to
// req.OnReference, then confirmed (key req.Key+":confirm"). A retry with
// the same key finds the same PaymentIntent and replays the confirmation.
// The PaymentIntent's metadata carries payment_id and tenant_id.
//
// With req.Card set, the PaymentIntent is created without a payment method
// and the card is sent with the confirmation as payment_method_data (see
// card.go): req.PaymentMethod, the vaulted method's id, is never sent.
// Every error is then scrubbed of the card (providers.ScrubError), the
// *stripe.Error it carries included.
//
// With req.ReturnURL set, the confirmation sends return_url instead of
// error_on_requires_action: an issuer's authentication request leaves the
// PaymentIntent in requires_action and the answer is the hold with
// StatusRequiresAction and the challenge's NextActionURL (see holdOf), not
// an error. Without it, such a payment is declined authentication_required.
// req.RequestThreeDS (only with ReturnURL) is sent with the creation as
// payment_method_options[card][request_three_d_secure]=any. Stripe
// replays a retry's confirmation with the requires_action answer it stored
// when the challenge began; one retrieve then answers a challenge
// completed or failed since (authorized, or declined authentication_failed).
//
// An error from OnReference is returned wrapped, KindNotExecuted (the
// PaymentIntent exists but holds nothing; the retry confirms it). A
// decline is KindDeclined with its decline code, returned with the
// declined hold; so is card data Stripe refuses (incorrect_number,
// invalid_expiry_year, invalid_cvc, ...). When the confirmation's answer
// is lost while ctx is still live (a 5xx, a reset, the HTTP client's
// timeout), or Stripe refuses it because the PaymentIntent is past
// confirmation (its confirm key expired), or refuses a card's confirmation
// resent without its CVC (card.go), one retrieve settles it: an
// authorized, declined or requires_action PaymentIntent is the answer;
// anything else returns the confirmation's error. Other errors are
// classified as classify says.
func (c *Client) Authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Hold, error) {
	h, err := c.authorize(ctx, req)
	if req.Card != nil && err != nil {
		err = scrubbed(err, req.Card)
	}
	return h, err
}

// authorize is Authorize before its error is scrubbed. It cannot place two
// holds for one key: the create and the confirmation carry keys derived
// from it, so a retry finds the first PaymentIntent and replays (or is
// refused) its confirmation, and a PaymentIntent holds money once at most.
// Nor can it start two challenges for one key: return_url and
// request_three_d_secure are parameters of those two requests, so a retry
// sends them again unchanged and gets the stored requires_action answer
// (the same PaymentIntent, the same challenge URL); a completed challenge
// places the one PaymentIntent's one hold.
func (c *Client) authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Hold, error) {
	if err := checkWrite(opCreate, req.Key, keyConfirm, "", false); err != nil {
		return providers.Hold{}, err
	}
	switch {
	case req.AmountMinor <= 0:
		return providers.Hold{}, rejected(opCreate, fmt.Sprintf("amount %d is not positive", req.AmountMinor))
	case req.Currency == "":
		return providers.Hold{}, rejected(opCreate, "no currency")
	case req.PaymentMethod == "" && req.Card == nil:
		return providers.Hold{}, rejected(opCreate, "no payment method")
	case req.RequestThreeDS && req.ReturnURL == "":
		// Stripe would ask for a challenge nobody can take and decline
		// it (error_on_requires_action): refused before sending.
		return providers.Hold{}, rejected(opCreate, "request_three_d_secure without a return_url")
	}
	p := intentParams(req)
	p.SetIdempotencyKey(req.Key + keyCreate)
	cl := newCall(ctx, opCreate)
	p.Context = cl.ctx
	created, err := c.intents.New(p)
	if err != nil {
		return providers.Hold{}, cl.fail(err)
	}
	if req.OnReference != nil {
		if cbErr := req.OnReference(ctx, created.ID); cbErr != nil {
			return providers.Hold{}, &providers.Error{
				Kind: providers.KindNotExecuted, Code: providers.CodeProviderInternalError,
				Message: fmt.Sprintf("stripe %s: PaymentIntent %s created but OnReference failed; not confirmed", opCreate, created.ID),
				Err:     cbErr,
			}
		}
	}
	return c.confirm(ctx, req.Key+keyConfirm, created, req)
}

// intentParams are the parameters of the PaymentIntent's creation: the
// payment method, unless a card is to be sent with the confirmation, and
// the card options asked for. They depend on req alone, so a retry under
// the same key sends the same parameters and replays.
func intentParams(req providers.AuthorizeRequest) *stripego.PaymentIntentParams {
	p := &stripego.PaymentIntentParams{
		Amount:             stripego.Int64(req.AmountMinor),
		Currency:           stripego.String(strings.ToLower(req.Currency)),
		CaptureMethod:      stripego.String(string(stripego.PaymentIntentCaptureMethodManual)),
		PaymentMethodTypes: stripego.StringSlice([]string{"card"}),
	}
	if req.Card == nil {
		p.PaymentMethod = stripego.String(req.PaymentMethod)
	}
	if req.Description != "" {
		p.Description = stripego.String(req.Description)
	}
	if card := cardOptions(req); card != nil {
		p.PaymentMethodOptions = &stripego.PaymentIntentPaymentMethodOptionsParams{Card: card}
	}
	if req.PaymentID != "" {
		p.AddMetadata(metaPaymentID, req.PaymentID)
	}
	if req.TenantID != 0 {
		p.AddMetadata(metaTenantID, strconv.FormatInt(req.TenantID, 10))
	}
	return p
}

// cardOptions are the creation's payment_method_options[card], nil when
// none is asked for: request_extended_authorization=if_available,
// request_incremental_authorization, request_multicapture and
// request_overcapture=if_available (each only when asked: the card's
// network decides, and the charge says what was granted, see flexOf), and
// request_three_d_secure=any (authenticate even where Stripe would not on
// its own, after an issuer's authentication_required decline).
func cardOptions(req providers.AuthorizeRequest) *stripego.PaymentIntentPaymentMethodOptionsCardParams {
	if !req.ExtendedAuthorization && !req.RequestThreeDS && !req.RequestIncrementalAuthorization &&
		!req.RequestMulticapture && !req.RequestOvercapture {
		return nil
	}
	card := &stripego.PaymentIntentPaymentMethodOptionsCardParams{}
	if req.ExtendedAuthorization {
		card.RequestExtendedAuthorization = stripego.String(string(
			stripego.PaymentIntentPaymentMethodOptionsCardRequestExtendedAuthorizationIfAvailable))
	}
	if req.RequestIncrementalAuthorization {
		card.RequestIncrementalAuthorization = stripego.String(string(
			stripego.PaymentIntentPaymentMethodOptionsCardRequestIncrementalAuthorizationIfAvailable))
	}
	if req.RequestMulticapture {
		card.RequestMulticapture = stripego.String(string(
			stripego.PaymentIntentPaymentMethodOptionsCardRequestMulticaptureIfAvailable))
	}
	if req.RequestOvercapture {
		card.RequestOvercapture = stripego.String(string(
			stripego.PaymentIntentPaymentMethodOptionsCardRequestOvercaptureIfAvailable))
	}
	if req.RequestThreeDS {
		card.RequestThreeDSecure = stripego.String(string(
			stripego.PaymentIntentPaymentMethodOptionsCardRequestThreeDSecureAny))
	}
	return card
}

// confirm confirms a created PaymentIntent, with req.Card when set, and
// settles a lost or refused answer with one retrieve (see Authorize).
func (c *Client) confirm(ctx context.Context, key string, created *stripego.PaymentIntent, req providers.AuthorizeRequest) (providers.Hold, error) {
	card := req.Card
	p := &stripego.PaymentIntentConfirmParams{}
	if req.ReturnURL != "" {
		// A cardholder is there to authenticate: Stripe answers
		// requires_action with next_action.redirect_to_url, and sends the
		// cardholder to return_url after the challenge.
		p.ReturnURL = stripego.String(req.ReturnURL)
	} else {
		// Nobody is there to authenticate: fail (authentication_required)
		// instead of waiting in requires_action.
		p.ErrorOnRequiresAction = stripego.Bool(true)
	}
	if card != nil {
		addCard(p, card)
	}
	p.AddExpand(expandCharge)
	p.SetIdempotencyKey(key)
	cl := newCall(ctx, opConfirm)
	p.Context = cl.ctx
	pi, err := c.intents.Confirm(created.ID, p)
	if err == nil {
		h := holdOf(pi)
		if h.Status == providers.StatusRequiresAction && replayed(pi.LastResponse) {
			return c.current(ctx, h)
		}
		return h, nil
	}
	perr := cl.fail(err)
	switch {
	case perr.Kind == providers.KindDeclined:
		return declinedHold(perr, created), perr
	case perr.Kind == providers.KindUnknown && ctx.Err() == nil,
		perr.Kind == providers.KindRejected && perr.Code == providers.CodeStateConflict:
		return c.settle(ctx, created.ID, perr, nil)
	case resentWithoutCVC(perr, card):
		return c.settle(ctx, created.ID, perr, card)
	}
	return providers.Hold{}, perr
}

// settle answers a confirmation whose answer was lost or refused from the
// PaymentIntent as it now is: authorized, declined or waiting for the
// cardholder's authentication (requires_action: the challenge the first
// confirmation started, not a new one) is the answer, anything else the
// confirmation's error perr. With charged set, only a PaymentIntent
// confirmed with that card (chargedWith) is an answer.
func (c *Client) settle(ctx context.Context, ref string, perr *providers.Error, charged *providers.Card) (providers.Hold, error) {
	var expand []string
	if charged != nil {
		// A PaymentIntent waiting for the cardholder has no charge yet:
		// its payment method shows the card.
		expand = append(expand, expandPaymentMethod)
	}
	pi, lerr := c.retrieve(ctx, ref, expand...)
	if lerr != nil || (charged != nil && !chargedWith(pi, charged)) {
		return providers.Hold{}, perr
	}
	switch h := holdOf(pi); h.Status {
	case providers.StatusAuthorized, providers.StatusRequiresAction:
		return h, nil
	case providers.StatusDeclined:
		return h, declinedError(h, perr)
	}
	return providers.Hold{}, perr
}

// replayed reports whether Stripe answered with the stored answer of an
// earlier request with the same key.
func replayed(r *stripego.APIResponse) bool {
	return r != nil && r.Header.Get("Idempotent-Replayed") == "true"
}

// current answers a replayed requires_action confirmation from the
// PaymentIntent as it now is. Stripe replays the answer it stored when the
// challenge began, but the cardholder may have completed or failed it
// since: authorized or declined is the answer. Anything else (still
// waiting; canceled, which only the orchestrator's abandonment does to a
// challenge; a failed read) keeps the replayed answer. It only reads.
func (c *Client) current(ctx context.Context, waiting providers.Hold) (providers.Hold, error) {
	pi, err := c.retrieve(ctx, waiting.Ref)
	if err != nil {
		return waiting, nil
	}
	switch h := holdOf(pi); h.Status {
	case providers.StatusAuthorized:
		return h, nil
	case providers.StatusDeclined:
		return h, declinedError(h, nil)
	}
	return waiting, nil
}

// declinedError is the error of declined hold h, found by a retrieve after
// the confirmation's answer cause (nil: a replayed answer).
func declinedError(h providers.Hold, cause error) *providers.Error {
	return &providers.Error{Kind: providers.KindDeclined, Code: h.DeclineCode,
		Message: fmt.Sprintf("stripe %s: PaymentIntent %s was declined (%s)", opConfirm, h.Ref, h.DeclineCode), Err: cause}
}

// declinedHold is the declined hold a decline answer describes.
func declinedHold(perr *providers.Error, created *stripego.PaymentIntent) providers.Hold {
	if se, ok := perr.Err.(*stripego.Error); ok && se.PaymentIntent != nil && se.PaymentIntent.ID == created.ID {
		h := holdOf(se.PaymentIntent)
		h.Status, h.DeclineCode = providers.StatusDeclined, perr.Code
		return h
	}
	h := holdOf(created)
	h.Status, h.DeclineCode = providers.StatusDeclined, perr.Code
	return h
}

// Capture captures req.AmountMinor (all that is capturable when zero, sent
// as amount_to_capture otherwise) of the hold; Stripe releases the rest.
// With req.NotFinal it sends final_capture=false: on a hold granted
// multicapture Stripe keeps the rest capturable (the PaymentIntent stays
// requires_capture, amount_received the sum so far: an authorized hold
// with CapturedMinor). An amount above the hold is passed as it is: Stripe
// takes it on a hold granted overcapture, up to maximum_amount_capturable.
// Refusals are KindRejected: resource_missing, state_conflict (not
// capturable: captured, canceled, declined), hold_expired, amount_too_large
// (more than is capturable, overcapture included), not_supported
// (final_capture=false on a hold without multicapture),
// idempotency_key_mismatch (see refineRefusal for how a refusal is told).
//
// It cannot capture twice: the forwarded key makes a retry replay the
// first answer, and stripe-go never resends on its own.
func (c *Client) Capture(ctx context.Context, req providers.CaptureRequest) (providers.Hold, error) {
	if err := checkWrite(opCapture, req.Key, "", req.Ref, true); err != nil {
		return providers.Hold{}, err
	}
	if req.AmountMinor < 0 {
		return providers.Hold{}, rejected(opCapture, fmt.Sprintf("amount %d is negative", req.AmountMinor))
	}
	p := &stripego.PaymentIntentCaptureParams{}
	if req.AmountMinor > 0 {
		p.AmountToCapture = stripego.Int64(req.AmountMinor)
	}
	if req.NotFinal {
		// Sent only when asked: a final capture keeps the parameters it
		// always had, so a retry of an older request still replays.
		p.FinalCapture = stripego.Bool(false)
	}
	p.AddExpand(expandCharge)
	p.SetIdempotencyKey(req.Key)
	cl := newCall(ctx, opCapture)
	p.Context = cl.ctx
	pi, err := c.intents.Capture(req.Ref, p)
	if err != nil {
		return providers.Hold{}, c.refineRefusal(ctx, req.Ref, cl.fail(err), captureRefusal(req))
	}
	return holdOf(pi), nil
}

// Cancel voids the hold. Refusals are KindRejected: resource_missing,
// state_conflict (captured or canceled already), idempotency_key_mismatch.
func (c *Client) Cancel(ctx context.Context, req providers.CancelRequest) (providers.Hold, error) {
	if err := checkWrite(opCancel, req.Key, "", req.Ref, true); err != nil {
		return providers.Hold{}, err
	}
	p := &stripego.PaymentIntentCancelParams{}
	p.AddExpand(expandCharge)
	p.SetIdempotencyKey(req.Key)
	cl := newCall(ctx, opCancel)
	p.Context = cl.ctx
	pi, err := c.intents.Cancel(req.Ref, p)
	if err != nil {
		return providers.Hold{}, cl.fail(err)
	}
	return holdOf(pi), nil
}

// Lookup retrieves the PaymentIntent ref with its latest charge. An
// unknown reference is KindRejected with resource_missing.
func (c *Client) Lookup(ctx context.Context, ref string) (providers.Hold, error) {
	pi, err := c.retrieve(ctx, ref)
	if err != nil {
		return providers.Hold{}, err
	}
	return holdOf(pi), nil
}

// retrieve reads the PaymentIntent ref with its latest charge, and the
// fields of expand.
func (c *Client) retrieve(ctx context.Context, ref string, expand ...string) (*stripego.PaymentIntent, *providers.Error) {
	if ref == "" {
		return nil, rejected(opLookup, "empty PaymentIntent reference")
	}
	p := &stripego.PaymentIntentParams{}
	p.AddExpand(expandCharge)
	for _, f := range expand {
		p.AddExpand(f)
	}
	cl := newCall(ctx, opLookup)
	p.Context = cl.ctx
	pi, err := c.intents.Get(ref, p)
	if err != nil {
		return nil, cl.fail(err)
	}
	return pi, nil
}

// holdOf maps a PaymentIntent (latest_charge expanded, or not) to a Hold.
func holdOf(pi *stripego.PaymentIntent) providers.Hold {
	h := providers.Hold{
		Ref:           pi.ID,
		PaymentID:     pi.Metadata[metaPaymentID],
		Status:        statusOf(pi),
		AmountMinor:   pi.Amount,
		Currency:      strings.ToUpper(string(pi.Currency)),
		CapturedMinor: pi.AmountReceived,
		RefundedMinor: refundedOf(pi),
		CreatedAt:     unix(pi.Created),
	}
	if ch := pi.LatestCharge; ch != nil && ch.PaymentMethodDetails != nil && ch.PaymentMethodDetails.Card != nil {
		h.CaptureBefore = unix(ch.PaymentMethodDetails.Card.CaptureBefore)
		h.Flex = flexOf(ch.PaymentMethodDetails.Card)
	}
	switch h.Status {
	case providers.StatusDeclined:
		h.DeclineCode = declineCode(pi.LastPaymentError)
	case providers.StatusRequiresAction:
		h.NextActionURL = nextActionURL(pi.NextAction)
	}
	return h
}

// nextActionURL is where the cardholder authenticates: the URL of a
// redirect_to_url next action, which is what Stripe gives a confirmation
// that carried a return_url. Any other next action is "" and the hold
// still reads requires_action: no money is held and the PaymentIntent
// lives on, so it is neither a decline (KindRejected would say nothing
// could be completed, and leave a live intent behind unnoticed) nor an
// unknown outcome (Stripe's answer is clear). Such actions cannot be
// completed by a redirect: use_stripe_sdk (only for Stripe.js and the
// mobile SDKs, which ask for it with use_stripe_sdk=true; the adapter never
// does) and card_await_notification (the issuer notifies the cardholder
// itself; the outcome arrives by webhook). The orchestrator waits for
// that outcome or cancels the intent as an abandoned challenge.
func nextActionURL(na *stripego.PaymentIntentNextAction) string {
	if na == nil || na.Type != stripego.PaymentIntentNextActionTypeRedirectToURL || na.RedirectToURL == nil {
		return ""
	}
	return na.RedirectToURL.URL
}

// statusOf maps a PaymentIntent's status:
//
//	requires_capture                               authorized (with multicapture, amount_received
//	                                               may already be > 0: its captures so far)
//	succeeded                                      captured | partially_refunded | refunded
//	canceled after a capture (amount_received > 0,
//	  a multicapture hold whose rest was released) captured | partially_refunded | refunded
//	canceled, cancellation_reason automatic        expired (the hold lapsed)
//	canceled                                       canceled
//	requires_payment_method after a failed attempt declined (a failed challenge:
//	                                               authentication_failed, see declineCode)
//	requires_action                                requires_action (the cardholder's challenge; nothing held)
//	requires_payment_method, requires_confirmation,
//	processing                                     requires_confirmation (nothing final held)
func statusOf(pi *stripego.PaymentIntent) providers.Status {
	switch pi.Status {
	case stripego.PaymentIntentStatusRequiresCapture:
		return providers.StatusAuthorized
	case stripego.PaymentIntentStatusSucceeded:
		return capturedStatus(pi)
	case stripego.PaymentIntentStatusCanceled:
		if pi.AmountReceived > 0 {
			// What was captured stays captured; the cancel (or the
			// lapse) only released the rest, as a final capture does.
			return capturedStatus(pi)
		}
		if lapsed(pi) {
			return providers.StatusExpired
		}
		return providers.StatusCanceled
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError != nil {
			return providers.StatusDeclined
		}
	case stripego.PaymentIntentStatusRequiresAction:
		return providers.StatusRequiresAction
	}
	return providers.StatusRequiresConfirmation
}

// capturedStatus is the status of a PaymentIntent whose capture is over:
// captured, partially_refunded or refunded.
func capturedStatus(pi *stripego.PaymentIntent) providers.Status {
	switch refunded := refundedOf(pi); {
	case refunded == 0:
		return providers.StatusCaptured
	case refunded >= pi.AmountReceived:
		return providers.StatusRefunded
	default:
		return providers.StatusPartiallyRefunded
	}
}

// refundedOf is how much of the captured amount was refunded to the
// customer. Stripe counts in the charge's amount_refunded what it released
// of the hold too: the uncaptured rest of a partial capture (its balance
// transaction is a partial_capture_reversal) and all of a canceled or
// lapsed hold. Only a captured charge has customer refunds, and they are
// amount_refunded less the released rest: the PaymentIntent's amount (the
// authorized total, increments included, which Stripe documents on the
// PaymentIntent) less what was captured. Nothing is released while a
// multicapture hold is still requires_capture, nor after an overcapture
// (captured above the amount).
func refundedOf(pi *stripego.PaymentIntent) int64 {
	ch := pi.LatestCharge
	if ch == nil || !ch.Captured {
		return 0
	}
	var released int64
	if pi.Status != stripego.PaymentIntentStatusRequiresCapture {
		released = max(pi.Amount-ch.AmountCaptured, 0)
	}
	return min(max(ch.AmountRefunded-released, 0), ch.AmountCaptured)
}

// unix is a Stripe timestamp as UTC time; zero stays the zero time.
func unix(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

// ExtendHold: Stripe has no call that moves a hold's deadline. A hold
// placed with request_extended_authorization already has the longest one
// the card network grants, so its extension reads the PaymentIntent and
// answers the capture_before Stripe gives (the merchant learns the true
// deadline; nothing is sent that could change the hold). Any other hold
// cannot be extended: not_supported.
func (c *Client) ExtendHold(ctx context.Context, req providers.ExtendRequest) (providers.Hold, error) {
	if !req.ExtendedAuthorization {
		return providers.Hold{}, &providers.Error{Kind: providers.KindRejected, Code: providers.CodeNotSupported,
			Message: "stripe: a hold is extended only when it was placed with request_extended_authorization"}
	}
	return c.Lookup(ctx, req.Ref)
}
