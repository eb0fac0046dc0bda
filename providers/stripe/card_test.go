package stripe

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/payorch/payorch/providers"
)

// cardAuthReq is an authorization of amount charging number, from the
// vaulted method whose id must never reach Stripe.
func cardAuthReq(amount int64, number string) providers.AuthorizeRequest {
	req := authReq(amount)
	req.PaymentMethod = "vpm_0123456789abcdef01234567"
	req.Card = &providers.Card{Number: number, ExpMonth: 11, ExpYear: time.Now().Year() + 3, CVC: "737",
		HolderName: "Jo Tester", Brand: "visa", Last4: number[len(number)-4:]}
	return req
}

func TestCardRequestShapes(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 5*time.Second)
	req := cardAuthReq(5000, "4000056655665556")
	h, err := c.Authorize(t.Context(), req)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	year := strconv.Itoa(req.Card.ExpYear)
	writes := e.recorded(req.Key)
	if len(writes) != 2 {
		t.Fatalf("authorize sent %d keyed requests, want create and confirm: %+v", len(writes), writes)
	}
	// The PaymentIntent is created without a payment method; the card
	// comes with the confirmation.
	wantWrite(t, writes[0], "/v1/payment_intents", req.Key+":create", map[string]string{
		"amount": "5000", "currency": "eur", "capture_method": "manual",
		"payment_method_types[0]": "card", "description": "order 17",
		"metadata[payment_id]": req.PaymentID, "metadata[tenant_id]": "42",
	})
	card := map[string]string{
		"expand[0]": "latest_charge", "error_on_requires_action": "true",
		"payment_method_data[type]":                  "card",
		"payment_method_data[card][number]":          "4000056655665556",
		"payment_method_data[card][exp_month]":       "11",
		"payment_method_data[card][exp_year]":        year,
		"payment_method_data[card][cvc]":             "737",
		"payment_method_data[billing_details][name]": "Jo Tester",
	}
	wantWrite(t, writes[1], "/v1/payment_intents/"+h.Ref+"/confirm", req.Key+":confirm", card)

	// Resumed without the CVC and without a holder: the confirmation
	// carries neither.
	retry := req
	noCVC := *req.Card
	noCVC.CVC, noCVC.HolderName = "", ""
	retry.Card = &noCVC
	retry.Key = fwdKey("authorize")
	if _, err := c.Authorize(t.Context(), retry); err != nil {
		t.Fatalf("Authorize without CVC: %v", err)
	}
	delete(card, "payment_method_data[card][cvc]")
	delete(card, "payment_method_data[billing_details][name]")
	retryWrites := e.recorded(retry.Key)
	wantWrite(t, retryWrites[len(retryWrites)-1], retryWrites[len(retryWrites)-1].Path, retry.Key+":confirm", card)

	for _, r := range e.recorded("") {
		for name, vs := range r.Form {
			for _, v := range vs {
				if strings.HasPrefix(v, "vpm_") {
					t.Errorf("%s %s sent the vaulted id: %s=%s", r.Method, r.Path, name, v)
				}
			}
		}
	}
}

func TestCardQuotedInAnErrorAnswerIsScrubbed(t *testing.T) {
	t.Parallel()
	const number, spaced, cvc = "4000056655665556", "4000 0566 5566 5556", "737"
	quote := fmt.Sprintf("Your card number %s (%s, cvc %s) is incorrect", number, spaced, cvc)
	for _, tc := range []struct {
		name          string
		status        int
		errType, code string
		kind          providers.Kind
	}{
		{"Declined", http.StatusPaymentRequired, "card_error", "incorrect_number", providers.KindDeclined},
		{"Refused", http.StatusBadRequest, "invalid_request_error", "", providers.KindRejected},
		{"ServerError", http.StatusInternalServerError, "api_error", "", providers.KindUnknown},
	} {
		want := map[string]string{"card_error": "incorrect_number", "invalid_request_error": providers.CodeInvalidRequest,
			"api_error": providers.CodeProviderInternalError}[tc.errType]
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEmulator(t)
			c := e.client(t, 5*time.Second)
			req := cardAuthReq(1000, number)
			req.Card.CVC = cvc
			body := map[string]any{"type": tc.errType, "message": quote,
				"payment_intent": map[string]any{"id": "pi_quoted", "object": "payment_intent", "status": "requires_payment_method",
					"last_payment_error": map[string]any{"type": tc.errType, "message": quote}}}
			if tc.code != "" {
				body["code"] = tc.code
			}
			e.arm(&emuFault{kind: faultAnswer, key: req.Key + keyConfirm, path: "/confirm", status: tc.status,
				body: map[string]any{"error": body}})
			_, err := c.Authorize(t.Context(), req)
			wantKind(t, err, tc.kind, want)
			var pe *providers.Error
			var se *stripego.Error
			if !errors.As(err, &pe) || !errors.As(err, &se) {
				t.Fatalf("error %v carries no *providers.Error and *stripe.Error", err)
			}
			if !strings.HasPrefix(se.Msg, "Your card number") {
				t.Fatalf("Stripe's message %q was not the scripted one", se.Msg)
			}
			texts := map[string]string{"Error()": err.Error(), "%+v": fmt.Sprintf("%+v", err), "Message": pe.Message,
				"stripe.Error": se.Error(), "cause": errors.Unwrap(err).Error()}
			for what, text := range texts {
				for _, secret := range []string{number, spaced, cvc} {
					if strings.Contains(text, secret) {
						t.Errorf("%s quotes %q: %s", what, secret, text)
					}
				}
			}
		})
	}
}
