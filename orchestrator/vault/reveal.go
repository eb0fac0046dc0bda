package vault

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// RevealRotate is the decryption counter's reason for the data keys
// Rotate unwraps (no card is decrypted then).
const RevealRotate = "rotate"

// countDecryption adds one to payorch.vault.decryptions for reason.
func (v *Vault) countDecryption(ctx context.Context, reason string, n int64) {
	v.decryptions.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
}

// expiredCard is the answer for a method whose card has expired.
func expiredCard(id string) error {
	return orchestrator.ParamError("payment_method", "the card of payment method %s has expired", id)
}

// Summary returns the card of a tenant's payment method for a payment
// about to use it. Errors: not_found (unknown or deleted),
// validation_failed on payment_method (the card has expired).
func (v *Vault) Summary(ctx context.Context, tenantID int64, id string) (orchestrator.CardSummary, error) {
	const q = `
		SELECT brand, last4, exp_month, exp_year FROM payment_methods
		WHERE tenant_id = @tenant_id AND id = @id AND deleted_at IS NULL`
	var s orchestrator.CardSummary
	err := v.pool.QueryRow(ctx, q, orchestrator.NamedArgs{"tenant_id": tenantID, "id": id}).
		Scan(&s.Brand, &s.Last4, &s.ExpMonth, &s.ExpYear)
	if errors.Is(err, pgx.ErrNoRows) {
		return orchestrator.CardSummary{}, notFound(id)
	}
	if err != nil {
		return orchestrator.CardSummary{}, orchestrator.Internalf("payment method summary: %w", err)
	}
	if expired(s.ExpMonth, s.ExpYear, v.now()) {
		return orchestrator.CardSummary{}, expiredCard(id)
	}
	return s, nil
}

// revealSQL reads what decrypting a card needs: its ciphertexts and its
// wrapped data key. A deleted method has no key row, so no row.
const revealSQL = `
	SELECT m.brand, m.last4, m.exp_month, m.exp_year, m.card_ciphertext, m.cvc_ciphertext, m.cvc_expires_at,
		k.kek_version, k.wrapped_key
	FROM payment_methods m
	JOIN payment_method_keys k ON k.tenant_id = m.tenant_id AND k.payment_method_id = m.id
	WHERE m.tenant_id = @tenant_id AND m.id = @id AND m.deleted_at IS NULL`

// Reveal decrypts the card of a tenant's payment method for one provider
// call, and counts the decryption under reason. The CVC is in it only
// until ForgetCVC or its expiry, whichever is first, even before the
// sweeper erased it. Errors: not_found (unknown or deleted),
// validation_failed on payment_method (expired card), internal (a
// ciphertext that does not decrypt, a key-encryption key version not
// configured).
func (v *Vault) Reveal(ctx context.Context, tenantID int64, id, reason string) (providers.Card, error) {
	var (
		c          providers.Card
		s          sealed
		cvcExpires *time.Time
	)
	err := v.pool.QueryRow(ctx, revealSQL, orchestrator.NamedArgs{"tenant_id": tenantID, "id": id}).
		Scan(&c.Brand, &c.Last4, &c.ExpMonth, &c.ExpYear, &s.card, &s.cvc, &cvcExpires, &s.kekVersion, &s.wrappedKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return providers.Card{}, notFound(id)
	}
	if err != nil {
		return providers.Card{}, orchestrator.Internalf("reveal payment method: %w", err)
	}
	now := v.now()
	if expired(c.ExpMonth, c.ExpYear, now) {
		return providers.Card{}, expiredCard(id)
	}
	if cvcExpires == nil || !now.Before(*cvcExpires) {
		s.cvc = nil // past its time: not even decrypted
	}
	v.countDecryption(ctx, reason, 1)
	o, err := v.keys.openCard(tenantID, id, s)
	if err != nil {
		return providers.Card{}, orchestrator.Internalf("reveal payment method %s: %w", id, err)
	}
	c.Number, c.HolderName, c.CVC = o.number, o.holder, o.cvc
	return c, nil
}

// ForgetCVC erases a payment method's CVC: an authorization that used it
// has been answered. Idempotent; a method without a CVC (or unknown) is
// left as it is.
func (v *Vault) ForgetCVC(ctx context.Context, tenantID int64, id string) error {
	const q = `
		UPDATE payment_methods SET cvc_ciphertext = NULL, cvc_expires_at = NULL
		WHERE tenant_id = @tenant_id AND id = @id AND cvc_ciphertext IS NOT NULL`
	if _, err := v.pool.Exec(ctx, q, orchestrator.NamedArgs{"tenant_id": tenantID, "id": id}); err != nil {
		return orchestrator.Internalf("forget cvc: %w", err)
	}
	return nil
}

// CountDecline records a decline of a payment charged to a payment
// method: many declines on new methods are the mark of card testing.
// Errors: not_found.
func (v *Vault) CountDecline(ctx context.Context, tenantID int64, id string) error {
	const q = `
		UPDATE payment_methods SET decline_count = decline_count + 1
		WHERE tenant_id = @tenant_id AND id = @id`
	tag, err := v.pool.Exec(ctx, q, orchestrator.NamedArgs{"tenant_id": tenantID, "id": id})
	if err != nil {
		return orchestrator.Internalf("count decline: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound(id)
	}
	return nil
}
