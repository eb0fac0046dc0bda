package reconcile

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A provider webhook about an object no payment of ours holds is stored
// with outcome unknown_object (orchestrator/inbound.go). The run of the
// day it was received reports it as missing_locally for its connector,
// whether or not the provider's report lists the object: a report that
// leaves a row out (or arrives late) does not hide it. An object the
// report lists is judged from the report's row (judgeUnmatched) instead.

// unknownWebhookObjectsSQL reads the references of the day's webhooks
// (received in [$2, $3)) of connector $1 that named an unknown object,
// still unknown now, and absent from run $4's staged rows: the earliest
// event of each, and how many there were.
const unknownWebhookObjectsSQL = `
	SELECT w.hold_ref, min(w.provider_event_id), min(w.type), count(*)
	FROM provider_webhook_events w
	WHERE w.connector = $1 AND w.outcome = 'unknown_object' AND w.received_at >= $2 AND w.received_at < $3
		AND w.hold_ref <> ''
		AND NOT EXISTS (SELECT 1 FROM reconciliation_provider_rows s WHERE s.run_id = $4 AND s.ref = w.hold_ref)
		AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.provider = $1 AND p.provider_ref = w.hold_ref)
		AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.connector = $1 AND a.provider_ref = w.hold_ref)
	GROUP BY w.hold_ref
	ORDER BY w.hold_ref`

// judgeUnknownWebhooks reports, in tx, the day's webhooks about objects
// we do not know as missing_locally, one finding per reference.
func judgeUnknownWebhooks(ctx context.Context, tx pgx.Tx, run Run, win window, w *findingWriter) error {
	rows, _ := tx.Query(ctx, unknownWebhookObjectsSQL, run.Provider, win.from, win.to, run.ID)
	type unknown struct {
		ref, eventID, eventType string
		events                  int64
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (unknown, error) {
		var u unknown
		err := r.Scan(&u.ref, &u.eventID, &u.eventType, &u.events)
		return u, err
	})
	if err != nil {
		return fmt.Errorf("unknown webhook objects: %w", err)
	}
	for _, u := range found {
		ref := printable(u.ref)
		f := finding{Category: MissingLocally, Ref: &ref, Detail: map[string]any{"source": "provider_webhook",
			"provider_event_id": printable(u.eventID), "event_type": printable(u.eventType), "events": u.events}}
		if err := w.add(ctx, f); err != nil {
			return err
		}
	}
	return nil
}
