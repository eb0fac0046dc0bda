package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
)

// Our increments and captures of a batch of pairs are read by index, one
// payment at a time, never by reading every operation: the planner,
// which cannot tell how many keys a batch has, would otherwise hash-join
// them with the whole history of operations once per batch.
func TestOurPartsAreReadByIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.DB(t)
	const n = 20_000
	_, err := pool.Exec(ctx, fmt.Sprintf(`
		INSERT INTO tenants (id, name) OVERRIDING SYSTEM VALUE VALUES (1, 'acme');
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
			captured_minor, provider, provider_ref, payment_method, created_at, updated_at, route)
		SELECT 1, 'pay_' || lpad(i::text, 32, '0'), 'k' || i, '\x00', '{}', 'captured', 1000, 'EUR', 1000, 'fake',
			'fk_' || i, 'pm_card_visa', now(), now(), '{fake}'
		FROM generate_series(1, %[1]d) i;
		INSERT INTO payment_operations (tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status,
			amount_minor, created_at, updated_at, final)
		SELECT 1, 'op_' || i || '_' || j, 'pay_' || lpad(i::text, 32, '0'),
			CASE j WHEN 1 THEN 'increment' ELSE 'capture' END, 'k' || i || '_' || j, 'po_' || i || '_' || j,
			'succeeded', 500, now(), now(), j = 3
		FROM generate_series(1, %[1]d) i, generate_series(1, 3) j;
		ANALYZE payments;
		ANALYZE payment_operations;`, n))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]paymentKey, pairBatch)
	tenants, ids := make([]int64, pairBatch), make([]string, pairBatch)
	for i := range keys {
		keys[i] = paymentKey{1, fmt.Sprintf("pay_%032d", i+1)}
		tenants[i], ids[i] = keys[i].tenant, keys[i].id
	}
	var plan string
	if err := pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+ourPartsSQL, tenants, ids).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"Index Name": "payment_operations_payment_idx"`) || strings.Contains(plan, `"Seq Scan"`) {
		t.Fatalf("plan of ourPartsSQL reads more than the batch's operations:\n%s", plan)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	got, err := readOurParts(ctx, conn, keys[:2])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[keys[0]]) != 3 || got[keys[0]][0].Kind != "increment" ||
		got[keys[1]][2] != (ourPart{ID: "op_2_3", Kind: "capture", Key: "po_2_3", Status: "succeeded", AmountMinor: 500}) {
		t.Fatalf("read %+v", got)
	}
}
