package providers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestScrubCard(t *testing.T) {
	t.Parallel()
	card := &Card{Number: "4000056655665556", CVC: "737", ExpMonth: 12, ExpYear: 2034, Brand: "visa", Last4: "5556"}
	for _, tc := range []struct {
		name string
		c    *Card
		in   string
		want string
	}{
		{"TheCardsNumber", card, "Your card number is incorrect: 4000056655665556.",
			"Your card number is incorrect: [redacted]."},
		{"TheCardsNumberInGroups", card, "number 4000 0566 5566 5556 refused",
			"number [redacted] refused"},
		{"TheCardsNumberWithDashes", card, "number=4000-0566-5566-5556&x", "number=[redacted]&x"},
		{"AnyLuhnValidRun", nil, `{"number":"378282246310005"}`, `{"number":"[redacted]"}`},
		{"NineteenDigits", nil, "pan 6205500000000000004 end", "pan [redacted] end"},
		{"GluedToOtherDigits", nil, "ref 99994242424242424242", "ref [redacted]"},
		{"TheCVCAlone", card, `{"cvc":"737","amount":7370}`, `{"cvc":"[redacted]","amount":7370}`},
		{"AfterAStatus", nil, "HTTP 402 4242 4242 4242 4242", "HTTP 402 [redacted]"},
		{"NotLuhnValid", nil, "order 4242424242424241 id", "order 4242424242424241 id"},
		{"ShortRunsStay", card, "HTTP 402: amount 1234 of 2026-01-02", "HTTP 402: amount 1234 of 2026-01-02"},
		{"NothingToScrub", card, "fake authorize: HTTP 503: unavailable", "fake authorize: HTTP 503: unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ScrubCard(tc.in, tc.c); got != tc.want {
				t.Errorf("ScrubCard(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestScrubErrorScrubsMessageAndCause(t *testing.T) {
	t.Parallel()
	card := &Card{Number: "4242424242424242", CVC: "123"}
	cause := fmt.Errorf("answer echoed number=4242424242424242 cvc=123")
	err := error(&Error{Kind: KindDeclined, Code: "incorrect_number",
		Message: "stripe confirm: Your card number is incorrect: 4242 4242 4242 4242 (cvc 123)", Err: cause})
	got := ScrubError(err, card)
	for _, text := range []string{got.Error(), fmt.Sprintf("%+v", got), errors.Unwrap(got).Error()} {
		if strings.Contains(text, "4242") || strings.Contains(text, "123") {
			t.Errorf("scrubbed error still quotes the card: %q", text)
		}
	}
	if !errors.Is(got, cause) {
		t.Error("the scrubbed error no longer wraps its cause")
	}
	if KindOf(got) != KindDeclined || CodeOf(got) != "incorrect_number" {
		t.Errorf("kind %s code %s, want declined incorrect_number", KindOf(got), CodeOf(got))
	}
	if pe := err.(*Error); !strings.Contains(pe.Message, "4242") {
		t.Error("ScrubError changed the error it was given instead of a copy")
	}
	quoting := ScrubError(&Error{Kind: KindDeclined, Code: "do_not_honor_4242424242424242_cvc_123"}, card)
	if code := CodeOf(quoting); strings.Contains(code, "4242") || strings.Contains(code, "123") {
		t.Errorf("a code quoting the card is kept: %q", code)
	}
	if ScrubError(nil, card) != nil {
		t.Error("ScrubError(nil) is not nil")
	}
}

func TestLuhnValid(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"4242424242424242": true, "4242424242424241": false, "378282246310005": true,
		"4242 4242 4242 4242": false, "": false, "0": false, "00": true,
	} {
		if got := LuhnValid(in); got != want {
			t.Errorf("LuhnValid(%q) = %v, want %v", in, got, want)
		}
	}
}
