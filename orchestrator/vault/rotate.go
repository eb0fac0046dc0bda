package vault

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
)

// DefaultRotateBatch is how many data keys Rotate re-wraps per statement
// when the caller names no batch size.
const DefaultRotateBatch = 1000

// wrappedKey is one data key as stored.
type wrappedKey struct {
	TenantID   int64  `db:"tenant_id"`
	ID         string `db:"payment_method_id"`
	KEKVersion int    `db:"kek_version"`
	WrappedKey []byte `db:"wrapped_key"`
}

// Rotate re-wraps every data key wrapped by a key-encryption key older
// than the newest under the newest, without decrypting any card: each
// data key is unwrapped and wrapped again in memory, and zeroed. It works
// in batches of batch keys (DefaultRotateBatch when 0 or less), each read
// in key order after the last (keyset pagination) and written by one
// short statement of its own, which changes a key only if it is still on
// the version read: a method deleted or a key re-wrapped meanwhile (by
// another Rotate) is left alone, and authorizations, which only read the
// keys, are never blocked. It is resumable: it only ever picks keys still
// on an old version, so a Rotate stopped midway and run again does the
// rest, and a second Rotate after a finished one does nothing. Passes
// repeat until one finds nothing, so keys written meanwhile under an old
// version (by an instance not yet configured with the newest) are
// re-wrapped too. progress, if not nil, is called after each batch with
// the keys re-wrapped so far and an estimate of those left. Errors: a key
// that does not unwrap (its key-encryption key version is not configured,
// or it was altered) stops the rotation, naming the payment method.
func (v *Vault) Rotate(ctx context.Context, batch int, progress func(done, remaining int64)) error {
	if batch <= 0 {
		batch = DefaultRotateBatch
	}
	remaining, err := v.countOld(ctx)
	if err != nil {
		return err
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	var done int64
	for {
		picked, err := v.rotatePass(ctx, batch, func(n int64) {
			done += n
			remaining = max(remaining-n, 0)
			progress(done, remaining)
		})
		if err != nil || picked == 0 {
			return err
		}
	}
}

// countOld counts the data keys not on the newest key-encryption key.
func (v *Vault) countOld(ctx context.Context) (int64, error) {
	var n int64
	err := v.pool.QueryRow(ctx, `SELECT count(*) FROM payment_method_keys WHERE kek_version < $1`, v.keys.Newest()).Scan(&n)
	if err != nil {
		return 0, orchestrator.Internalf("count keys to rotate: %w", err)
	}
	return n, nil
}

// pickOldKeysSQL reads the next batch of keys on an old version after a
// cursor, in primary key order (an index scan of payment_method_keys_pkey).
const pickOldKeysSQL = `
	SELECT tenant_id, payment_method_id, kek_version, wrapped_key FROM payment_method_keys
	WHERE kek_version < @newest AND (tenant_id, payment_method_id) > (@after_tenant, @after_id)
	ORDER BY tenant_id, payment_method_id
	LIMIT @limit`

// rewrapSQL stores re-wrapped keys, each only if still on the version it
// was read at (compare and set): no lock is held between the read and
// this statement.
const rewrapSQL = `
	UPDATE payment_method_keys k SET kek_version = @newest, wrapped_key = r.wrapped_key
	FROM unnest(@tenant_ids::bigint[], @ids::text[], @versions::integer[], @wrapped_keys::bytea[])
		AS r(tenant_id, id, version, wrapped_key)
	WHERE k.tenant_id = r.tenant_id AND k.payment_method_id = r.id AND k.kek_version = r.version`

// rotatePass re-wraps, batch by batch, the keys on an old version from the
// start of the table to its end, calls rewrapped with each batch's count,
// and returns how many keys it picked.
func (v *Vault) rotatePass(ctx context.Context, batch int, rewrapped func(int64)) (int64, error) {
	newest := v.keys.Newest()
	var picked int64
	afterTenant, afterID := int64(-1), ""
	for {
		rows, _ := v.pool.Query(ctx, pickOldKeysSQL, orchestrator.NamedArgs{"newest": newest,
			"after_tenant": afterTenant, "after_id": afterID, "limit": batch})
		keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[wrappedKey])
		if err != nil {
			return picked, orchestrator.Internalf("pick keys to rotate: %w", err)
		}
		if len(keys) == 0 {
			return picked, nil
		}
		picked += int64(len(keys))
		last := keys[len(keys)-1]
		afterTenant, afterID = last.TenantID, last.ID
		n, err := v.rewrapBatch(ctx, keys)
		if err != nil {
			return picked, err
		}
		rewrapped(n)
	}
}

// rewrapBatch re-wraps keys under the newest key-encryption key and
// stores those still on the version read; it returns how many it stored.
func (v *Vault) rewrapBatch(ctx context.Context, keys []wrappedKey) (int64, error) {
	tenants := make([]int64, len(keys))
	ids := make([]string, len(keys))
	versions := make([]int, len(keys))
	wrapped := make([][]byte, len(keys))
	v.countDecryption(ctx, RevealRotate, int64(len(keys)))
	for i, k := range keys {
		w, err := v.keys.rewrap(k.TenantID, k.ID, k.KEKVersion, k.WrappedKey)
		if err != nil {
			return 0, orchestrator.Internalf("rotate the key of payment method %s of tenant %d: %w", k.ID, k.TenantID, err)
		}
		tenants[i], ids[i], versions[i], wrapped[i] = k.TenantID, k.ID, k.KEKVersion, w
	}
	tag, err := v.pool.Exec(ctx, rewrapSQL, orchestrator.NamedArgs{"newest": v.keys.Newest(), "tenant_ids": tenants,
		"ids": ids, "versions": versions, "wrapped_keys": wrapped})
	if err != nil {
		return 0, orchestrator.Internalf("store rotated keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
