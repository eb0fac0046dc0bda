package reconcile

// Fee schedules: the fees agreed with each connector, and its payout
// terms, versioned like routing rules (table fee_schedules, append-only;
// the highest version is active). Settlement reconciliation holds each of
// the provider's balance transactions for a charge to the schedule
// (fee_mismatch) and each charge to the payout terms (not_paid_out).

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payorch/payorch/orchestrator"
)

// FeeRule is the fee of a charge in one currency: PercentBP basis points
// (hundredths of a percent) of the gross, rounded half up to the minor
// unit, plus FixedMinor. Integers only: no fee is ever a float.
type FeeRule struct {
	PercentBP  int64 `json:"percent_bp"`
	FixedMinor int64 `json:"fixed_minor"`
}

// FeeSchedule is the fees agreed with one connector.
type FeeSchedule struct {
	// Currencies holds the rule of each currency (ISO 4217, upper case).
	Currencies map[string]FeeRule `json:"currencies"`
	// Default is the rule of every other currency; nil: no fee agreed
	// for them, and their fees are not checked.
	Default *FeeRule `json:"default"`
	// ToleranceMinor is how far a provider's fee may be from the agreed
	// one and still agree, in minor units.
	ToleranceMinor int64 `json:"tolerance_minor"`
	// PayoutDelayDays is N of the connector's payout schedule, daily at
	// T+N: a charge booked on day X is due in a payout created by day
	// X+N. Nil: the schedule is not known, and no charge is judged
	// not_paid_out.
	PayoutDelayDays *int `json:"payout_delay_days"`
	// PayoutGraceDays is how many days a payout may come after X+N and
	// still be on time: the run of day D judges the charges of day
	// D − N − grace. 0 to 7; nil (omitted) is DefaultPayoutGraceDays, and
	// a stored schedule always holds the number.
	PayoutGraceDays *int `json:"payout_grace_days"`
}

// DefaultPayoutGraceDays is FeeSchedule.PayoutGraceDays when omitted.
const DefaultPayoutGraceDays = 1

// Limits of a fee schedule's payout terms, in days.
const (
	maxPayoutDelayDays = 30
	maxPayoutGraceDays = 7
)

// graceDays is the schedule's payout grace in days.
func (s FeeSchedule) graceDays() int {
	if s.PayoutGraceDays == nil {
		return DefaultPayoutGraceDays
	}
	return *s.PayoutGraceDays
}

// FeeVersion is one version of a connector's fee schedule.
type FeeVersion struct {
	Connector string      `json:"connector"`
	Version   int         `json:"version"`
	Schedule  FeeSchedule `json:"schedule"`
	CreatedBy string      `json:"created_by"`
	CreatedAt time.Time   `json:"created_at"`
}

// Limits of a fee schedule.
const (
	maxFeeCurrencies = 200
	maxFeeBP         = 10_000 // 100%
	maxFeeTolerance  = 1_000_000
)

// Validate checks a schedule. Errors: validation_failed naming the field.
func (s FeeSchedule) Validate() error {
	if len(s.Currencies) > maxFeeCurrencies {
		return orchestrator.ParamError("currencies", "at most %d currencies", maxFeeCurrencies)
	}
	for _, cur := range slices.Sorted(maps.Keys(s.Currencies)) {
		if _, err := orchestrator.ValidateCurrency(cur); err != nil {
			return orchestrator.ParamError("currencies."+cur, "%s is not an ISO 4217 currency in upper case", cur)
		}
		if err := s.Currencies[cur].validate("currencies." + cur); err != nil {
			return err
		}
	}
	if s.Default != nil {
		if err := s.Default.validate("default"); err != nil {
			return err
		}
	}
	if s.ToleranceMinor < 0 || s.ToleranceMinor > maxFeeTolerance {
		return orchestrator.ParamError("tolerance_minor", "tolerance_minor must be 0 to %d minor units", maxFeeTolerance)
	}
	if d := s.PayoutDelayDays; d != nil && (*d < 0 || *d > maxPayoutDelayDays) {
		return orchestrator.ParamError("payout_delay_days", "payout_delay_days must be 0 to %d days, or null", maxPayoutDelayDays)
	}
	if g := s.PayoutGraceDays; g != nil && (*g < 0 || *g > maxPayoutGraceDays) {
		return orchestrator.ParamError("payout_grace_days", "payout_grace_days must be 0 to %d days", maxPayoutGraceDays)
	}
	return nil
}

func (r FeeRule) validate(field string) error {
	if r.PercentBP < 0 || r.PercentBP > maxFeeBP {
		return orchestrator.ParamError(field+".percent_bp", "percent_bp must be 0 to %d basis points", maxFeeBP)
	}
	if r.FixedMinor < 0 || r.FixedMinor > orchestrator.MaxAmountMinor {
		return orchestrator.ParamError(field+".fixed_minor", "fixed_minor must be 0 to %d minor units",
			int64(orchestrator.MaxAmountMinor))
	}
	return nil
}

// Expected is the fee agreed for a charge of gross (minor units, not
// negative, at most orchestrator.MaxAmountMinor: the product cannot
// overflow) in currency; ok is false when the schedule agrees none.
func (s FeeSchedule) Expected(currency string, gross int64) (fee int64, ok bool) {
	rule, ok := s.Currencies[currency]
	if !ok {
		if s.Default == nil {
			return 0, false
		}
		rule = *s.Default
	}
	return (gross*rule.PercentBP+5_000)/10_000 + rule.FixedMinor, true
}

// Agrees reports whether a provider's fee for a charge of gross in
// currency agrees with the schedule (within its tolerance); a currency
// with no agreed fee always agrees.
func (s FeeSchedule) Agrees(currency string, gross, fee int64) bool {
	want, ok := s.Expected(currency, gross)
	return !ok || abs(fee-want) <= s.ToleranceMinor
}

// normalize fills what a schedule may omit: no currencies is an empty
// map, no payout grace the default. A version stored before payout terms
// existed reads with the default grace and no delay.
func (s *FeeSchedule) normalize() {
	if s.Currencies == nil {
		s.Currencies = map[string]FeeRule{}
	}
	if s.PayoutGraceDays == nil {
		g := DefaultPayoutGraceDays
		s.PayoutGraceDays = &g
	}
}

// isNoRows reports pgx.ErrNoRows.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// isUniqueViolation reports a unique violation (another writer took the
// version number).
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// feeRow is a row of fee_schedules.
type feeRow struct {
	Connector string    `db:"connector"`
	Version   int       `db:"version"`
	Schedule  []byte    `db:"schedule"`
	CreatedBy string    `db:"created_by"`
	CreatedAt time.Time `db:"created_at"`
}

func (r feeRow) version() (FeeVersion, error) {
	v := FeeVersion{Connector: r.Connector, Version: r.Version, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC()}
	if err := json.Unmarshal(r.Schedule, &v.Schedule); err != nil {
		return FeeVersion{}, orchestrator.Internalf("fee schedule %d of %s: %w", r.Version, r.Connector, err)
	}
	v.Schedule.normalize()
	return v, nil
}

// knownConnector refuses a connector this process has no adapter for.
func (r *Reconciler) knownConnector(connector string) error {
	if _, ok := r.providers[connector]; !ok {
		return orchestrator.Errorf(orchestrator.CodeNotFound, "no connector %q is configured", connector)
	}
	return nil
}

// setFeeScheduleSQL appends the connector's next version, unless the
// schedule equals the active one (jsonb equality: the same rules however
// written); then it returns the active version and stores nothing.
const setFeeScheduleSQL = `
	WITH latest AS (
		SELECT connector, version, schedule, created_by, created_at FROM fee_schedules
		WHERE connector = @connector ORDER BY version DESC LIMIT 1
	), ins AS (
		INSERT INTO fee_schedules (connector, version, schedule, created_by, created_at)
		SELECT @connector, coalesce((SELECT version FROM latest), 0) + 1, @schedule, @created_by, @now
		WHERE NOT EXISTS (SELECT 1 FROM latest WHERE schedule = @schedule::jsonb)
		RETURNING connector, version, schedule, created_by, created_at
	)
	SELECT connector, version, schedule, created_by, created_at FROM ins
	UNION ALL
	SELECT connector, version, schedule, created_by, created_at FROM latest WHERE schedule = @schedule::jsonb`

// SetFeeSchedule stores s as connector's next fee schedule version,
// active at once; a schedule equal to the active one stores nothing and
// returns the active version, so the request is safe to repeat. Errors: validation_failed, not_found (no such
// connector), conflict (changed concurrently: try again), internal.
func (r *Reconciler) SetFeeSchedule(ctx context.Context, connector string, s FeeSchedule, createdBy string) (FeeVersion, error) {
	if err := r.knownConnector(connector); err != nil {
		return FeeVersion{}, err
	}
	if err := s.Validate(); err != nil {
		return FeeVersion{}, err
	}
	if createdBy == "" || !orchestrator.ValidText(createdBy) || utf8.RuneCountInString(createdBy) > 200 {
		return FeeVersion{}, orchestrator.ParamError("created_by", "created_by must be 1 to 200 characters")
	}
	s.normalize()
	doc, err := json.Marshal(s)
	if err != nil {
		return FeeVersion{}, orchestrator.Internalf("encode fee schedule: %w", err)
	}
	rows, _ := r.pool.Query(ctx, setFeeScheduleSQL, orchestrator.NamedArgs{
		"connector": connector, "schedule": doc, "created_by": createdBy, "now": r.now()})
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[feeRow])
	if err != nil {
		if isUniqueViolation(err) {
			return FeeVersion{}, orchestrator.Errorf(orchestrator.CodeConflict,
				"the fee schedule of %s is being changed concurrently; try again", connector)
		}
		return FeeVersion{}, orchestrator.Internalf("set fee schedule of %s: %w", connector, err)
	}
	return row.version()
}

// FeeSchedule returns connector's active fee schedule. Errors: not_found
// (no such connector, or none stored), internal.
func (r *Reconciler) FeeSchedule(ctx context.Context, connector string) (FeeVersion, error) {
	if err := r.knownConnector(connector); err != nil {
		return FeeVersion{}, err
	}
	const q = `
		SELECT connector, version, schedule, created_by, created_at FROM fee_schedules
		WHERE connector = @connector ORDER BY version DESC LIMIT 1`
	rows, _ := r.pool.Query(ctx, q, orchestrator.NamedArgs{"connector": connector})
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[feeRow])
	switch {
	case isNoRows(err):
		return FeeVersion{}, orchestrator.Errorf(orchestrator.CodeNotFound, "no fee schedule is stored for %s", connector)
	case err != nil:
		return FeeVersion{}, orchestrator.Internalf("fee schedule of %s: %w", connector, err)
	}
	return row.version()
}

// FeeScheduleVersions lists connector's stored versions, newest first, a
// page of limit (1 to 100) below startingAfter (0: from the newest); more
// reports whether older ones follow. Errors: validation_failed,
// not_found, internal.
func (r *Reconciler) FeeScheduleVersions(ctx context.Context, connector string, limit, startingAfter int) ([]FeeVersion, bool, error) {
	if err := r.knownConnector(connector); err != nil {
		return nil, false, err
	}
	if limit == 0 {
		limit = 10
	}
	if limit < 1 || limit > 100 {
		return nil, false, orchestrator.ParamError("limit", "limit must be 1 to 100")
	}
	const q = `
		SELECT connector, version, schedule, created_by, created_at FROM fee_schedules
		WHERE connector = @connector AND (@starting_after::integer = 0 OR version < @starting_after::integer)
		ORDER BY version DESC LIMIT @limit`
	rows, _ := r.pool.Query(ctx, q, orchestrator.NamedArgs{"connector": connector, "starting_after": startingAfter,
		"limit": limit + 1})
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByName[feeRow])
	if err != nil {
		return nil, false, orchestrator.Internalf("fee schedules of %s: %w", connector, err)
	}
	more := len(rs) > limit
	if more {
		rs = rs[:limit]
	}
	vs := make([]FeeVersion, 0, len(rs))
	for _, row := range rs {
		v, err := row.version()
		if err != nil {
			return nil, false, err
		}
		vs = append(vs, v)
	}
	return vs, more, nil
}
