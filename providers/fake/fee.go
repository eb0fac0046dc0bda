package fake

import (
	"errors"
	"fmt"
	"math"
)

// FeeRule is what the fake charges on one currency's movements, in that
// currency's minor unit (cents, or yen for a zero-decimal currency).
type FeeRule struct {
	// PercentBP is the share of a charge's gross taken as fee, in basis
	// points (1/100 of a percent: 140 is 1.4 %), 0 to 10000.
	PercentBP int64 `json:"percent_bp"`
	// FixedMinor is added to the fee of every charge, 0 to 10^12.
	FixedMinor int64 `json:"fixed_minor"`
	// DisputeMinor is the fee of a dispute's withdrawal, 0 to 10^12.
	DisputeMinor int64 `json:"dispute_minor"`
}

// validate names the first bad field.
func (r FeeRule) validate() error {
	switch {
	case r.PercentBP < 0 || r.PercentBP > 10000:
		return fmt.Errorf("PercentBP must be within [0, 10000], got %d", r.PercentBP)
	case r.FixedMinor < 0 || r.FixedMinor > maxFeeMinor:
		return fmt.Errorf("FixedMinor must be within [0, %d], got %d", int64(maxFeeMinor), r.FixedMinor)
	case r.DisputeMinor < 0 || r.DisputeMinor > maxFeeMinor:
		return fmt.Errorf("DisputeMinor must be within [0, %d], got %d", int64(maxFeeMinor), r.DisputeMinor)
	}
	return nil
}

// ChargeFee is the fee of a charge of gross: gross × PercentBP / 10000
// rounded half up to a whole minor unit, plus FixedMinor. The product is
// never formed whole (gross is split at 10000), so no gross overflows;
// the sum saturates at math.MaxInt64. A gross of zero or less pays none.
func (r FeeRule) ChargeFee(gross int64) int64 {
	if gross <= 0 {
		return 0
	}
	q, rem := gross/10000, gross%10000
	// q×PercentBP ≤ gross, and rem×PercentBP < 10^8: neither overflows.
	pct := q*r.PercentBP + (rem*r.PercentBP+5000)/10000
	return addSat(pct, r.FixedMinor)
}

// feeRule is the rule of currency: Config.Fees', else Config.DefaultFee.
func (s *Server) feeRule(currency string) FeeRule {
	if r, ok := s.cfg.Fees[currency]; ok {
		return r
	}
	return *s.cfg.DefaultFee
}

// addSat is a + b for b ≥ 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// netOf is gross − fee for fee ≥ 0, saturating at math.MinInt64 (a
// dispute of a near-maximal amount).
func netOf(gross, fee int64) int64 {
	if gross < math.MinInt64+fee {
		return math.MinInt64
	}
	return gross - fee
}

// errSumOverflow says a payout's items no longer fit an int64 amount.
var errSumOverflow = errors.New("sum overflows int64")

// addChecked is a + b, or errSumOverflow.
func addChecked(a, b int64) (int64, error) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, errSumOverflow
	}
	return a + b, nil
}
