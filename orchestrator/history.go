package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The append-only history is partitioned by month (migrations 00013 and
// 00017): a payment's timeline (payment_events) and the provider
// webhooks received (provider_webhook_events), by time; the outbox
// (events, webhook_deliveries, webhook_delivery_attempts), by event id,
// which begins with the event's time. The months ahead are created in
// advance, and months older than a retention, when one is set, are
// dropped whole.

// HistoryMonthsAhead is how many months after the current one have their
// partition ready: an insert never waits for one, and a missed run of
// MaintainHistory (an instance down for weeks) is harmless.
const HistoryMonthsAhead = 3

// historyLockTimeout bounds how long creating or dropping a partition
// waits for its table's lock. While it waits, every writer of the table
// (the outbox triggers on the money path among them) queues behind it, so
// it gives up early and tries again (historyLockTries, then the next run:
// it works months ahead).
const historyLockTimeout = 100 * time.Millisecond

// historyLockTries is how many times one run tries a table whose lock it
// did not get, historyLockPause apart.
const (
	historyLockTries = 5
	historyLockPause = 2 * time.Second
)

// HistoryRetention says how many whole months of each history are kept
// after the month they ended in; 0 keeps everything.
type HistoryRetention struct {
	// Payments is a payment's timeline (payment_events) and the provider
	// webhooks received (provider_webhook_events): the record of what
	// happened to a payment and what a provider said of it.
	Payments int
	// Events is the outbox: the events of the events API and webhooks,
	// their deliveries and every attempt of those.
	Events int
}

// historyTables are the partitioned history tables, with the retention
// that applies to each, and whether the delivery worker uses it.
var historyTables = []struct {
	name      string
	retention func(HistoryRetention) int
	outbox    bool
}{
	{"payment_events", func(r HistoryRetention) int { return r.Payments }, false},
	{"provider_webhook_events", func(r HistoryRetention) int { return r.Payments }, false},
	{"events", func(r HistoryRetention) int { return r.Events }, true},
	{"webhook_deliveries", func(r HistoryRetention) int { return r.Events }, true},
	{"webhook_delivery_attempts", func(r HistoryRetention) int { return r.Events }, true},
}

// Creating or dropping a partition of the outbox waits historyLockTimeout
// for its table's lock. The delivery worker (orchestrator/webhooks) holds
// no transaction while it sends: its claims and records are transactions
// of a few milliseconds, like the payments' writes. Still, a claim reads
// the outbox and the endpoints, and the worker claims again and again
// while deliveries are due, so the partition changes of the outbox and
// the claims take the advisory lock OutboxPassLockKey names: each claim
// shared, and only if it is free at once (a claim skips its turn while a
// change waits or runs); a change exclusive (outboxPassLock), waiting for
// the claims in flight (never for a send), before it asks for any
// table's lock. Payments, and the records of attempts, never take it.
const (
	OutboxPassLockKey = `hashtextextended('history_partitions:outbox', 0)`
	outboxPassLock    = `SELECT pg_advisory_xact_lock(` + OutboxPassLockKey + `)`
)

// HistoryMaintenance is what one MaintainHistory did, over all tables.
type HistoryMaintenance struct {
	Created, Dropped int
}

// MaintainHistory creates, for every partitioned history table, the
// partitions from this month through HistoryMonthsAhead months ahead,
// those missing, and drops the months that ended more than the table's
// retention ago (when it is not 0). Safe on several instances at once.
// A table whose lock it cannot take quickly is left for the next run,
// and reported in the error once the others are done.
func (s *Service) MaintainHistory(ctx context.Context, keep HistoryRetention) (HistoryMaintenance, error) {
	var m HistoryMaintenance
	now := s.now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	var failed error
	for _, t := range historyTables {
		n, err := s.historyDDL(ctx, t.outbox, `SELECT history_ensure_partitions(@table, @from, @until)`,
			NamedArgs{"table": t.name, "from": month, "until": month.AddDate(0, HistoryMonthsAhead, 0)})
		m.Created += n
		if err == nil && t.retention(keep) > 0 {
			n, err = s.historyDDL(ctx, t.outbox, `SELECT history_drop_partitions(@table, @before)`,
				NamedArgs{"table": t.name, "before": month.AddDate(0, -t.retention(keep), 0)})
			m.Dropped += n
		}
		if err != nil && failed == nil {
			failed = internalf("history partitions of %s: %w", t.name, err)
		}
	}
	return m, failed
}

// historyDDL runs one of the partition functions (q, which returns a
// count) with historyLockTimeout, trying again while the lock is taken;
// for an outbox table, once no claim of deliveries is in flight.
func (s *Service) historyDDL(ctx context.Context, outbox bool, q string, args NamedArgs) (int, error) {
	var n int
	var err error
	for try := range historyLockTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(historyLockPause):
			}
		}
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if outbox {
				if _, err := tx.Exec(ctx, outboxPassLock); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', @timeout, true)`,
				NamedArgs{"timeout": fmt.Sprintf("%dms", historyLockTimeout.Milliseconds())}); err != nil {
				return err
			}
			return tx.QueryRow(ctx, q, args).Scan(&n)
		})
		if code, _ := constraintOf(err); code != pgLockNotAvailable {
			return n, err
		}
	}
	return 0, err
}
