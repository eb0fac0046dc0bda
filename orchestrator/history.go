package orchestrator

import (
	"context"
	"time"
)

// A payment's history (payment_events) is partitioned by month (migration
// 00013): the months ahead are created in advance, and months older than
// a retention, when one is set, are dropped whole.

// HistoryMonthsAhead is how many months after the current one have their
// partition ready: an insert never waits for one, and a missed run of
// MaintainHistory (an instance down for weeks) is harmless.
const HistoryMonthsAhead = 3

// HistoryMaintenance is what one MaintainHistory did.
type HistoryMaintenance struct {
	Created, Dropped int
}

// MaintainHistory creates the partitions of payment_events from this
// month through HistoryMonthsAhead months ahead, those missing, and, when
// retentionMonths > 0, drops the months that ended more than
// retentionMonths months ago (a history kept at least that long). Safe on
// several instances at once.
func (s *Service) MaintainHistory(ctx context.Context, retentionMonths int) (HistoryMaintenance, error) {
	var m HistoryMaintenance
	now := s.now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if err := s.pool.QueryRow(ctx, `SELECT payment_events_ensure_partitions(@from, @until)`,
		namedArgs{"from": month, "until": month.AddDate(0, HistoryMonthsAhead, 0)}).Scan(&m.Created); err != nil {
		return m, internalf("create history partitions: %w", err)
	}
	if retentionMonths <= 0 {
		return m, nil
	}
	if err := s.pool.QueryRow(ctx, `SELECT payment_events_drop_partitions(@before)`,
		namedArgs{"before": month.AddDate(0, -retentionMonths, 0)}).Scan(&m.Dropped); err != nil {
		return m, internalf("drop history partitions: %w", err)
	}
	return m, nil
}
