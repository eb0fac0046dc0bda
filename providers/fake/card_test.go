package fake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// cardReq is an authorization of amount charging number (CVC 123, or 1234
// for an amex), expiring in two years, with a fresh key. PaymentMethod is
// the vaulted method's id, which must never reach the provider.
func cardReq(t *testing.T, amount int64, number string) providers.AuthorizeRequest {
	req := authReq(t, amount)
	cvc := "123"
	if strings.HasPrefix(number, "34") || strings.HasPrefix(number, "37") {
		cvc = "1234"
	}
	req.PaymentMethod = "vpm_0123456789abcdef01234567"
	req.Card = &providers.Card{Number: number, ExpMonth: 12, ExpYear: time.Now().Year() + 2, CVC: cvc,
		HolderName: "Jo Tester", Brand: "visa", Last4: number[len(number)-4:]}
	return req
}

func TestCardNumbersGiveStripesOutcomes(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	for _, tc := range []struct {
		name, number, brand, decline string
	}{
		{"Visa", "4242424242424242", "visa", ""},
		{"VisaDebit", "4000056655665556", "visa", ""},
		{"Mastercard", "5555555555554444", "mastercard", ""},
		{"Mastercard2Series", "2223003122003222", "mastercard", ""},
		{"Amex", "378282246310005", "amex", ""},
		{"Discover", "6011111111111117", "discover", ""},
		{"JCB", "3566002020360505", "jcb", ""},
		{"Diners14Digits", "36227206271667", "diners", ""},
		{"UnionPay19Digits", "6205500000000000004", "unionpay", ""},
		{"AnyOtherLuhnValid", "4111111111111111", "visa", ""},
		{"GenericDecline", "4000000000000002", "visa", providers.CodeCardDeclined},
		{"InsufficientFunds", "4000000000009995", "visa", providers.CodeInsufficientFunds},
		{"LostCard", "4000000000009987", "visa", "lost_card"},
		{"StolenCard", "4000000000009979", "visa", "stolen_card"},
		{"ExpiredCard", "4000000000000069", "visa", "expired_card"},
		{"IncorrectCVC", "4000000000000127", "visa", "incorrect_cvc"},
		{"CVCCheckFails", "4000000000000101", "visa", "incorrect_cvc"},
		{"ProcessingError", "4000000000000119", "visa", "processing_error"},
		{"VelocityExceeded", "4000000000006975", "visa", "card_velocity_exceeded"},
		{"Fraudulent", "4100000000000019", "visa", "fraudulent"},
		{"IssuerUnavailable", fake.TestCardIssuerUnavailable, "visa", "issuer_not_available"},
		{"TryAgainLater", fake.TestCardTryAgainLater, "visa", "try_again_later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := cardReq(t, 1500, tc.number)
			h, err := c.Authorize(t.Context(), req)
			if tc.decline == "" {
				if err != nil || h.Status != providers.StatusAuthorized {
					t.Fatalf("Authorize = %s, %v; want authorized", h.Status, err)
				}
			} else {
				wantKind(t, err, providers.KindDeclined, tc.decline)
				if h.Status != providers.StatusDeclined || h.DeclineCode != tc.decline {
					t.Fatalf("declined hold: %s %q, want declined %q", h.Status, h.DeclineCode, tc.decline)
				}
			}
			if n := len(operations(t, c, req.Key)); n != 1 {
				t.Errorf("%d operations executed, want 1", n)
			}
			// The hold shows the card's brand and last four digits, and
			// never the number.
			raw := lookupRaw(t, r, h.Ref)
			var v struct {
				PaymentMethod string            `json:"payment_method"`
				Card          map[string]string `json:"card"`
			}
			if err := json.Unmarshal(raw.body, &v); err != nil {
				t.Fatalf("lookup: %v: %s", err, raw.body)
			}
			want := map[string]string{"brand": tc.brand, "last4": tc.number[len(tc.number)-4:]}
			if fmt.Sprint(v.Card) != fmt.Sprint(want) || v.PaymentMethod != "" {
				t.Errorf("hold shows card %v, payment_method %q; want %v and none", v.Card, v.PaymentMethod, want)
			}
			if bytes.Contains(raw.body, []byte(tc.number)) {
				t.Errorf("hold quotes the card number: %s", raw.body)
			}
		})
	}
}

func TestCardDataTheFakeRefuses(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	now := time.Now()
	for _, tc := range []struct {
		name string
		edit func(*providers.Card)
		code string
	}{
		{"NotLuhnValid", func(c *providers.Card) { c.Number = "4242424242424241" }, "incorrect_number"},
		{"TooShort", func(c *providers.Card) { c.Number = "424242424242" }, "invalid_number"},
		{"NotDigits", func(c *providers.Card) { c.Number = "4242 4242 4242 4242" }, "invalid_number"},
		{"ExpiredLastYear", func(c *providers.Card) { c.ExpYear = now.Year() - 1 }, "invalid_expiry_year"},
		{"MonthThirteen", func(c *providers.Card) { c.ExpMonth = 13 }, "invalid_expiry_month"},
		{"CVCTwoDigits", func(c *providers.Card) { c.CVC = "12" }, "invalid_cvc"},
		{"CVCFourDigitsOnAVisa", func(c *providers.Card) { c.CVC = "1234" }, "invalid_cvc"},
		{"CVCThreeDigitsOnAnAmex", func(c *providers.Card) { c.Number, c.CVC = "378282246310005", "123" }, "invalid_cvc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := cardReq(t, 1500, "4242424242424242")
			tc.edit(req.Card)
			var refs []string
			req.OnReference = func(_ context.Context, ref string) error { refs = append(refs, ref); return nil }
			_, err := c.Authorize(t.Context(), req)
			if len(refs) != 0 {
				t.Errorf("OnReference given %q for card data refused before any hold", refs)
			}
			wantKind(t, err, providers.KindDeclined, tc.code)
			if strings.Contains(err.Error(), req.Card.Number) {
				t.Errorf("refusal quotes the number: %v", err)
			}
			if n := len(operations(t, c, req.Key)); n != 0 {
				t.Errorf("%d operations executed for refused card data, want 0", n)
			}
		})
	}
}

func TestCardRetryWithoutCVCReplaysAcrossARestart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "fake-provider.json")
	r1, c1 := start(t, fake.Config{StateFile: file})
	ctx := t.Context()
	approved := cardReq(t, 2500, "4242424242424242")
	first, err := c1.Authorize(ctx, approved)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	declined := cardReq(t, 2500, "4000000000000002")
	firstDecline, err := c1.Authorize(ctx, declined)
	wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
	noCVC := func(req providers.AuthorizeRequest) providers.AuthorizeRequest {
		card := *req.Card
		card.CVC = ""
		req.Card = &card
		return req
	}

	// The vault erased the CVC after the first answer: the resumed
	// attempt resends the card without it, even to a restarted fake.
	for i, c := range []*fake.Client{c1, nil} {
		if i == 1 {
			shutdown(t, r1)
			_, c = start(t, fake.Config{StateFile: file})
		}
		again, err := c.Authorize(ctx, noCVC(approved))
		if err != nil {
			t.Fatalf("retry %d without CVC: %v", i, err)
		}
		if again.Ref != first.Ref || again.Status != providers.StatusAuthorized {
			t.Fatalf("retry %d without CVC: hold %s %s, want %s authorized", i, again.Ref, again.Status, first.Ref)
		}
		againDecline, err := c.Authorize(ctx, noCVC(declined))
		wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
		if againDecline.Ref != firstDecline.Ref {
			t.Fatalf("retry %d of the decline without CVC: hold %s, want %s", i, againDecline.Ref, firstDecline.Ref)
		}
		if n := len(operations(t, c, approved.Key)) + len(operations(t, c, declined.Key)); n != 2 {
			t.Errorf("after retry %d: %d operations executed, want 2 (one per key)", i, n)
		}
	}
}

func TestCardOtherThanTheCVCUnderTheSameKeyIsMismatch(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	req := cardReq(t, 2500, "4242424242424242")
	if _, err := c.Authorize(t.Context(), req); err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	for name, edit := range map[string]func(*providers.Card){
		"Number":     func(c *providers.Card) { c.Number = "5555555555554444" },
		"ExpiryYear": func(c *providers.Card) { c.ExpYear++ },
		"HolderName": func(c *providers.Card) { c.HolderName = "Someone Else" },
		"NoCVCAndAnotherNumber": func(c *providers.Card) {
			c.Number, c.CVC = "4000056655665556", ""
		},
	} {
		other := req
		card := *req.Card
		edit(&card)
		other.Card = &card
		_, err := c.Authorize(t.Context(), other)
		if providers.CodeOf(err) != providers.CodeIdempotencyMismatch {
			t.Errorf("%s changed under the same key: %v, want idempotency_key_mismatch", name, err)
		}
	}
	if n := len(operations(t, c, req.Key)); n != 1 {
		t.Errorf("%d operations executed, want 1", n)
	}
}

// lockedBuffer is a log sink for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestCardIsNeverKept(t *testing.T) {
	t.Parallel()
	var hooks lockedBuffer
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = hooks.Write(append(b, '\n'))
	}))
	t.Cleanup(hs.Close)
	var logs lockedBuffer
	file := filepath.Join(t.TempDir(), "fake-provider.json")
	r, c := start(t, fake.Config{StateFile: file, WebhookURL: hs.URL, WebhookSecret: hookSecret,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := t.Context()

	numbers := []string{"4242424242424242", "4000000000000002", "378282246310005", "4000000000000119"}
	var refs []string
	for _, n := range numbers {
		req := cardReq(t, 1800, n)
		h, _ := c.Authorize(ctx, req)
		refs = append(refs, h.Ref)
		if h.Status == providers.StatusAuthorized {
			if _, err := c.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
				t.Fatalf("Capture: %v", err)
			}
		}
		_, _ = c.Authorize(ctx, req) // a replay
	}
	waitFor(t, "the webhooks of the captures", func() bool { return strings.Count(hooks.String(), "hold.captured") == 2 })

	state, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	places := map[string]string{"state file": string(state), "log": logs.String(), "webhooks": hooks.String()}
	for i, ref := range refs {
		places[fmt.Sprintf("hold %d", i)] = string(lookupRaw(t, r, ref).body)
	}
	places["operations"] = string(do(t, http.MethodGet, r.URL()+"/_admin/operations", nil, nil).body)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	places["report"] = string(do(t, http.MethodGet, r.URL()+"/v1/report?from="+day.Format(time.RFC3339)+
		"&to="+day.Add(48*time.Hour).Format(time.RFC3339), nil, nil).body)
	if !strings.Contains(places["state file"], `"card":{"brand":"visa"`) {
		t.Fatalf("the state file does not hold the cards' holds: %s", state)
	}
	for where, text := range places {
		for _, n := range numbers {
			if strings.Contains(text, n) {
				t.Errorf("the %s holds the card number %s", where, n)
			}
		}
		if strings.Contains(text, `"1234"`) || strings.Contains(text, `"123"`) {
			t.Errorf("the %s holds a CVC: %s", where, text)
		}
	}
}

func TestCardQuotedInAnErrorAnswerIsScrubbed(t *testing.T) {
	t.Parallel()
	// A provider that quotes the request back in its error answers, in
	// every way an answer reaches the client.
	for _, tc := range []struct {
		name   string
		status int
		kind   providers.Kind
	}{
		{"Refused", http.StatusBadRequest, providers.KindRejected},
		{"Declined", http.StatusPaymentRequired, providers.KindDeclined},
		{"Unavailable", http.StatusServiceUnavailable, providers.KindUnknown},
		{"InternalError", http.StatusInternalServerError, providers.KindUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var in struct {
					Card struct {
						Number, CVC string
					} `json:"card"`
				}
				_ = json.NewDecoder(r.Body).Decode(&in)
				n := in.Card.Number
				spaced := n[0:4] + " " + n[4:8] + " " + n[8:12] + " " + n[12:]
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{
					"type": "card_error", "code": "incorrect_number",
					"message": fmt.Sprintf("card %s (%s) with cvc %s is refused", n, spaced, in.Card.CVC),
				}})
			}))
			t.Cleanup(echo.Close)
			c := fake.NewClient(echo.URL, nil)
			req := cardReq(t, 1000, "4000056655665556")
			req.Card.CVC = "737"
			_, err := c.Authorize(t.Context(), req)
			wantKind(t, err, tc.kind, "")
			var pe *providers.Error
			var ae *fake.APIError
			if !errors.As(err, &pe) || !errors.As(err, &ae) {
				t.Fatalf("error %v carries no *providers.Error and *fake.APIError", err)
			}
			if !strings.HasPrefix(ae.Message, "card ") {
				t.Fatalf("the answer's message %q was not the echo", ae.Message)
			}
			for what, text := range map[string]string{
				"Error()": err.Error(), "%+v": fmt.Sprintf("%+v", err), "Message": pe.Message,
				"APIError": ae.Error(), "cause": errors.Unwrap(err).Error(),
			} {
				for _, secret := range []string{"4000056655665556", "4000 0566 5566 5556", "737"} {
					if strings.Contains(text, secret) {
						t.Errorf("%s quotes %q: %s", what, secret, text)
					}
				}
			}
		})
	}
}
