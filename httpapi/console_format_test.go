package httpapi

import (
	"math"
	"testing"
)

func TestFormatMinor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{123456, "EUR", "1,234.56\u00a0EUR"},
		{5, "EUR", "0.05\u00a0EUR"},
		{0, "usd", "0.00\u00a0USD"},
		{-44, "EUR", "−0.44\u00a0EUR"},
		{500, "JPY", "500\u00a0JPY"},
		{1234567, "JPY", "1,234,567\u00a0JPY"},
		{1234, "KWD", "1.234\u00a0KWD"},
		{7, "KWD", "0.007\u00a0KWD"},
		{math.MaxInt64, "EUR", "92,233,720,368,547,758.07\u00a0EUR"},
		{math.MinInt64, "EUR", "−92,233,720,368,547,758.08\u00a0EUR"},
	} {
		if got := formatMinor(tc.minor, tc.currency); got != tc.want {
			t.Errorf("formatMinor(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}
