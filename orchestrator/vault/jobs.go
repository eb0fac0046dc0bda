package vault

import (
	"context"
	"time"

	"github.com/payorch/payorch/internal/background"
	"github.com/payorch/payorch/orchestrator"
)

// cvcSweepBatch is how many expired CVCs one statement erases: small
// enough for a short transaction, large enough to keep up with any
// tokenization rate in a pass a minute.
const cvcSweepBatch = 1000

// EraseExpiredCVCs erases up to limit CVCs past their expiry and returns
// how many. Safe on several instances at once (SKIP LOCKED). Reveal never
// returns an expired CVC anyway: this removes its ciphertext.
func (v *Vault) EraseExpiredCVCs(ctx context.Context, limit int) (int, error) {
	const q = `
		UPDATE payment_methods m SET cvc_ciphertext = NULL, cvc_expires_at = NULL
		FROM (
			SELECT tenant_id, id FROM payment_methods
			WHERE cvc_ciphertext IS NOT NULL AND cvc_expires_at <= @now
			ORDER BY cvc_expires_at
			LIMIT @limit
			FOR UPDATE SKIP LOCKED
		) e
		WHERE m.tenant_id = e.tenant_id AND m.id = e.id`
	tag, err := v.pool.Exec(ctx, q, orchestrator.NamedArgs{"now": v.now(), "limit": limit})
	if err != nil {
		return 0, orchestrator.Internalf("erase expired cvcs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// CVCSweeperJob erases expired CVCs every interval, a thousand at a time
// until none is left.
func (v *Vault) CVCSweeperJob(interval time.Duration) *background.Worker {
	return background.NewWorker("cvc-sweeper", interval, time.Minute, v.logger,
		func(ctx context.Context) error {
			total := 0
			for {
				n, err := v.EraseExpiredCVCs(ctx, cvcSweepBatch)
				total += n
				if err != nil || n < cvcSweepBatch {
					if total > 0 {
						v.logger.InfoContext(ctx, "expired CVCs erased", "count", total)
					}
					return err
				}
			}
		})
}
