package vault

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
)

// CreateInput is a request to vault a card.
type CreateInput struct {
	TenantID int64
	// Key is the request's Idempotency-Key: the method's id is derived
	// from (tenant, key), so a duplicate finds the first method.
	Key string
	// RequestHash is the fingerprint hash of the (blinded) request; a
	// different request under the same key, once the key's record is
	// purged, is idempotency_key_reused.
	RequestHash    []byte
	Card           CardInput
	BillingDetails *BillingDetails
	Metadata       map[string]string
	// PublishableKeyID is the publishable key that created the method
	// from a browser, "" for a secret key.
	PublishableKeyID string
}

// validate checks a CreateInput and returns the card's digits and brand.
func (in *CreateInput) validate(now time.Time) (digits, brand string, err error) {
	if in.Key == "" {
		return "", "", &orchestrator.Error{Code: orchestrator.CodeIdempotencyKeyMissing, Param: "Idempotency-Key",
			Message: "creating a payment method needs an Idempotency-Key"}
	}
	if err := ValidateCard(in.Card, now); err != nil {
		return "", "", err
	}
	if err := ValidateBilling(in.BillingDetails); err != nil {
		return "", "", err
	}
	if err := orchestrator.ValidateMetadata(in.Metadata); err != nil {
		return "", "", err
	}
	digits, brand, err = validateNumber(in.Card.Number)
	return digits, brand, err
}

// createMethodSQL stores a payment method and its wrapped data key in one
// statement (one round trip, one transaction), or nothing when the method
// exists already (then it returns no row).
const createMethodSQL = `
	WITH pm AS (
		INSERT INTO payment_methods (tenant_id, id, idempotency_key, request_hash, type, brand, last4, exp_month,
			exp_year, fingerprint, billing_details, metadata, card_ciphertext, cvc_ciphertext, cvc_expires_at,
			publishable_key_id, created_at)
		VALUES (@tenant_id, @id, @key, @request_hash, 'card', @brand, @last4, @exp_month,
			@exp_year, @fingerprint, @billing_details, @metadata, @card_ciphertext, @cvc_ciphertext, @cvc_expires_at,
			@publishable_key_id, @now)
		ON CONFLICT (tenant_id, id) DO NOTHING
		RETURNING ` + methodColumns + `
	), k AS (
		INSERT INTO payment_method_keys (tenant_id, payment_method_id, kek_version, wrapped_key)
		SELECT @tenant_id, id, @kek_version, @wrapped_key FROM pm
	)
	SELECT ` + methodColumns + ` FROM pm`

// Create validates a card, encrypts it under a fresh data key and stores
// it, with its data key wrapped by the newest key-encryption key. A
// request repeated under the same key gets the method it created (even
// deleted since). Errors: validation_failed (ValidateCard's, billing
// details', metadata's), idempotency_key_missing, idempotency_key_reused,
// internal.
func (v *Vault) Create(ctx context.Context, in CreateInput) (PaymentMethod, error) {
	now := v.now()
	digits, brand, err := in.validate(now)
	if err != nil {
		return PaymentMethod{}, err
	}
	id := methodID(in.TenantID, in.Key)
	s, err := v.keys.sealCard(in.TenantID, id, digits, in.Card.CVC, in.Card.HolderName)
	if err != nil {
		return PaymentMethod{}, orchestrator.Internalf("seal card: %w", err)
	}
	args := orchestrator.NamedArgs{"tenant_id": in.TenantID, "id": id, "key": in.Key, "request_hash": in.RequestHash,
		"brand": brand, "last4": last4(digits), "exp_month": in.Card.ExpMonth, "exp_year": in.Card.ExpYear,
		"fingerprint": v.keys.Fingerprint(in.TenantID, digits), "billing_details": in.BillingDetails,
		"metadata": in.Metadata, "card_ciphertext": s.card, "cvc_ciphertext": s.cvc, "cvc_expires_at": nil,
		"publishable_key_id": nil, "now": now, "kek_version": s.kekVersion, "wrapped_key": s.wrappedKey}
	if s.cvc != nil {
		args["cvc_expires_at"] = now.Add(v.cvcTTL)
	}
	if in.PublishableKeyID != "" {
		args["publishable_key_id"] = in.PublishableKeyID
	}
	if in.Metadata == nil {
		args["metadata"] = map[string]string{}
	}
	if in.RequestHash == nil {
		args["request_hash"] = []byte{} // the column is NOT NULL; nil and empty compare equal below
	}
	rows, _ := v.pool.Query(ctx, createMethodSQL, args)
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[methodRow])
	if errors.Is(err, pgx.ErrNoRows) {
		// Created before under this key (a retry, or a concurrent twin
		// that committed first): answer with that one.
		r, err = v.readMethod(ctx, in.TenantID, id)
	}
	if err != nil {
		return PaymentMethod{}, orchestrator.Internalf("create payment method: %w", err)
	}
	if string(r.RequestHash) != string(in.RequestHash) {
		return PaymentMethod{}, &orchestrator.Error{Code: orchestrator.CodeIdempotencyKeyReused, Param: "Idempotency-Key",
			Message: "this Idempotency-Key was used with a different request"}
	}
	return r.method(), nil
}

// ListFilter selects a page of a tenant's payment methods, newest first.
type ListFilter struct {
	// Fingerprint keeps the methods of one card.
	Fingerprint string
	CreatedGTE  *time.Time
	CreatedLT   *time.Time
	// Limit is 1 to 100; 0 means 10.
	Limit int
	// StartingAfter is the id of the last method of the previous page.
	StartingAfter string
}

// List returns a page of a tenant's payment methods, deleted ones too
// (with deleted_at), newest first, and whether more follow. Errors:
// validation_failed (limit, starting_after).
func (v *Vault) List(ctx context.Context, tenantID int64, f ListFilter) ([]PaymentMethod, bool, error) {
	if f.Limit == 0 {
		f.Limit = 10
	}
	if f.Limit < 1 || f.Limit > 100 {
		return nil, false, orchestrator.ParamError("limit", "limit must be 1 to 100")
	}
	var cursorAt *time.Time
	cursorID := ""
	if f.StartingAfter != "" {
		c, err := v.readMethod(ctx, tenantID, f.StartingAfter)
		if orchestrator.ErrorCode(err) == orchestrator.CodeNotFound {
			return nil, false, orchestrator.ParamError("starting_after", "starting_after names no payment method of yours")
		}
		if err != nil {
			return nil, false, err
		}
		cursorAt, cursorID = &c.CreatedAt, c.ID
	}
	const q = `
		SELECT ` + methodColumns + `
		FROM payment_methods
		WHERE tenant_id = @tenant_id
		  AND (@fingerprint = '' OR fingerprint = @fingerprint)
		  AND (@created_gte::timestamptz IS NULL OR created_at >= @created_gte)
		  AND (@created_lt::timestamptz IS NULL OR created_at < @created_lt)
		  AND (@cursor_at::timestamptz IS NULL OR (created_at, id) < (@cursor_at, @cursor_id))
		ORDER BY created_at DESC, id DESC
		LIMIT @limit`
	rows, _ := v.pool.Query(ctx, q, orchestrator.NamedArgs{"tenant_id": tenantID, "fingerprint": f.Fingerprint,
		"created_gte": f.CreatedGTE, "created_lt": f.CreatedLT, "cursor_at": cursorAt, "cursor_id": cursorID,
		"limit": f.Limit + 1})
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByName[methodRow])
	if err != nil {
		return nil, false, orchestrator.Internalf("list payment methods: %w", err)
	}
	more := len(rs) > f.Limit
	if more {
		rs = rs[:f.Limit]
	}
	pms := make([]PaymentMethod, len(rs))
	for i, r := range rs {
		pms[i] = r.method()
	}
	return pms, more, nil
}

// deleteMethodSQL destroys a method's card: its data key row goes, both
// ciphertexts are nulled, and deleted_at is set (kept from the first
// delete when repeated).
const deleteMethodSQL = `
	WITH k AS (
		DELETE FROM payment_method_keys WHERE tenant_id = @tenant_id AND payment_method_id = @id
	)
	UPDATE payment_methods
	SET card_ciphertext = NULL, cvc_ciphertext = NULL, cvc_expires_at = NULL,
		deleted_at = coalesce(deleted_at, @now)
	WHERE tenant_id = @tenant_id AND id = @id
	RETURNING ` + methodColumns

// Delete destroys a payment method's data key and ciphertexts: its card
// can never be decrypted again through the database (see migration 00021
// for backups taken before). The method still shows in Get and List, with
// deleted_at; deleting it again answers the same. Errors: not_found.
func (v *Vault) Delete(ctx context.Context, tenantID int64, id string) (PaymentMethod, error) {
	rows, _ := v.pool.Query(ctx, deleteMethodSQL, orchestrator.NamedArgs{"tenant_id": tenantID, "id": id, "now": v.now()})
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[methodRow])
	if errors.Is(err, pgx.ErrNoRows) {
		return PaymentMethod{}, notFound(id)
	}
	if err != nil {
		return PaymentMethod{}, orchestrator.Internalf("delete payment method: %w", err)
	}
	return r.method(), nil
}
