package migrations_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgtest"
)

// TestPaymentsIndexes: payments keeps only indexes that a query needs and
// no other index covers (migration 00012 names each one's readers), since
// each costs every authorization three index entries.
func TestPaymentsIndexes(t *testing.T) {
	pool := pgtest.DB(t)
	rows, _ := pool.Query(context.Background(), `SELECT indexname FROM pg_indexes WHERE tablename = 'payments' ORDER BY 1`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		// The hold sweeper's (migration 00011): partial, authorized
		// payments only.
		"payments_authorized_capture_before_idx",
		"payments_id_idx",
		"payments_idempotency_key_idx",
		"payments_pending_idx",
		"payments_pkey",
		"payments_provider_created_at_idx",
		"payments_provider_ref_key",
		"payments_provider_updated_at_idx",
		// The challenges' (migration 00024): partial, requires_action
		// payments only, so a payment that never waits for its shopper
		// writes no entry in it.
		"payments_requires_action_idx",
		"payments_tenant_id_created_at_idx",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("indexes of payments:\n got  %v\n want %v", got, want)
	}
}
