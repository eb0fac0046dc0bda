package vault

import (
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
)

func TestValidateCardAcceptsEveryNetwork(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)
	for number, brand := range map[string]string{
		"4242424242424242":    "visa",
		"4000 0000 0000 0002": "visa",
		"4222222222222":       "visa",
		"5555555555554444":    "mastercard",
		"2223003122003222":    "mastercard",
		"2720990000000007":    "mastercard",
		"378282246310005":     "amex",
		"6011111111111117":    "discover",
		"6445644564456445":    "discover",
		"3056930009020004":    "diners",
		"36227206271667":      "diners",
		"3566002020360505":    "jcb",
		"6200000000000005":    "unionpay",
		"6759649826438453":    "maestro",
		"5018000000000009":    "maestro",
	} {
		cvc := "123"
		if brand == "amex" {
			cvc = "1234"
		}
		in := CardInput{Number: number, ExpMonth: 6, ExpYear: 2030, CVC: cvc}
		if err := ValidateCard(in, now); err != nil {
			t.Errorf("%s: %v", brand, err)
		}
		if got, _ := cardBrand(normalizeNumber(number)); got != brand {
			t.Errorf("brand of a %s number: %q", brand, got)
		}
	}
}

func TestValidateCardNamesTheFieldNotTheValue(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)
	good := CardInput{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2034, CVC: "123", HolderName: "Ada"}
	for _, tc := range []struct {
		name  string
		edit  func(*CardInput)
		param string
		value string // must not be in the message
	}{
		{"LuhnFails", func(c *CardInput) { c.Number = "4242424242424241" }, "card.number", "4242424242424241"},
		{"Dashes", func(c *CardInput) { c.Number = "4242-4242-4242-4242" }, "card.number", "4242-4242-4242-4242"},
		{"Letters", func(c *CardInput) { c.Number = "4242424242424a42" }, "card.number", "4242424242424a42"},
		{"Empty", func(c *CardInput) { c.Number = "" }, "card.number", ""},
		{"TabsAreNotSpaces", func(c *CardInput) { c.Number = "4242\t4242424242424242" }, "card.number", "4242"},
		{"TooLong", func(c *CardInput) { c.Number = strings.Repeat("4", 80) }, "card.number", "4444"},
		{"VisaOfFifteen", func(c *CardInput) { c.Number = "424242424242426" }, "card.number", "424242424242426"},
		{"AmexOfSixteen", func(c *CardInput) { c.Number = "3782822463100055" }, "card.number", "3782822463100055"},
		{"UnknownNetwork", func(c *CardInput) { c.Number = "9999999999999995" }, "card.number", "9999999999999995"},
		{"MonthZero", func(c *CardInput) { c.ExpMonth = 0 }, "card.exp_month", ""},
		{"MonthThirteen", func(c *CardInput) { c.ExpMonth = 13 }, "card.exp_month", "13"},
		{"YearOfTwoDigits", func(c *CardInput) { c.ExpYear = 34 }, "card.exp_year", "34"},
		{"YearPast", func(c *CardInput) { c.ExpYear = 2029 }, "card.exp_year", "2029"},
		{"MonthPast", func(c *CardInput) { c.ExpYear, c.ExpMonth = 2030, 5 }, "card.exp_month", "2030"},
		{"CVCOfTwo", func(c *CardInput) { c.CVC = "12" }, "card.cvc", "12"},
		{"CVCOfFourOnVisa", func(c *CardInput) { c.CVC = "1234" }, "card.cvc", "1234"},
		{"CVCOfThreeOnAmex", func(c *CardInput) { c.Number, c.CVC = "378282246310005", "123" }, "card.cvc", "123"},
		{"CVCLetters", func(c *CardInput) { c.CVC = "12a" }, "card.cvc", "12a"},
		{"HolderTooLong", func(c *CardInput) { c.HolderName = strings.Repeat("é", 201) }, "card.holder_name", "éé"},
		{"HolderNUL", func(c *CardInput) { c.HolderName = "A\x00B" }, "card.holder_name", "A\x00B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := good
			tc.edit(&in)
			err := ValidateCard(in, now)
			wantCode(t, err, orchestrator.CodeValidationFailed, tc.param)
			if msg := err.(*orchestrator.Error).Message; tc.value != "" && strings.Contains(msg, tc.value) {
				t.Fatalf("message %q quotes the value", msg)
			}
		})
	}
}

func TestExpiryIsTheEndOfTheMonthInUTC(t *testing.T) {
	t.Parallel()
	in := CardInput{Number: "4242424242424242", ExpMonth: 6, ExpYear: 2030}
	last := time.Date(2030, 6, 30, 23, 59, 59, 0, time.UTC)
	if err := ValidateCard(in, last); err != nil {
		t.Fatalf("last second of the month: %v", err)
	}
	// Already July in UTC though still June in New York.
	ny, _ := time.LoadLocation("America/New_York")
	july := time.Date(2030, 6, 30, 21, 0, 0, 0, ny)
	wantCode(t, ValidateCard(in, july), orchestrator.CodeValidationFailed, "card.exp_month")
}

func TestBillingDetailsAndMetadataAreValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b     *BillingDetails
		param string
	}{
		{&BillingDetails{Name: strings.Repeat("n", 201)}, "billing_details.name"},
		{&BillingDetails{Email: "a\x00b"}, "billing_details.email"},
		{&BillingDetails{Address: &Address{Country: "de"}}, "billing_details.address.country"},
		{&BillingDetails{Address: &Address{PostalCode: strings.Repeat("1", 21)}}, "billing_details.address.postal_code"},
	} {
		wantCode(t, ValidateBilling(tc.b), orchestrator.CodeValidationFailed, tc.param)
	}
	if err := ValidateBilling(&BillingDetails{Name: "Ada", Address: &Address{Country: "GB", City: "London"}}); err != nil {
		t.Fatal(err)
	}
	big := map[string]string{}
	for i := range 51 {
		big[strings.Repeat("k", i+1)] = "v"
	}
	wantCode(t, orchestrator.ValidateMetadata(big), orchestrator.CodeValidationFailed, "metadata")
	wantCode(t, orchestrator.ValidateMetadata(map[string]string{"": "v"}), orchestrator.CodeValidationFailed, "metadata")
}
