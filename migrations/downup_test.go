package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/migrations"
)

// everyTableRows puts at least one row in every table of the newest
// schema, through the same triggers the product's writes fire (the outbox
// rows come from the payment's and operations' triggers). A migration that
// adds a table adds a row of it here: TestEveryMigrationDownAndUpWithRows
// fails on a table left empty.
const everyTableRows = `
INSERT INTO tenants (id, name) OVERRIDING SYSTEM VALUE VALUES (1, 'acme');
INSERT INTO api_keys (id, tenant_id, role, secret_hash, description)
	VALUES ('key_m', 1, 'merchant', decode(repeat('ab', 32), 'hex'), 'merchant key'),
	       ('key_s', NULL, 'support', decode(repeat('cd', 32), 'hex'), 'support key');
INSERT INTO console_sessions (id_hash, api_key_id, role, tenant_id, csrf_token, created_at, expires_at)
	VALUES (decode(repeat('ef', 32), 'hex'), 'key_m', 'merchant', 1, 'csrf', now(), now() + interval '1 hour');
INSERT INTO routing_versions (tenant_id, version, rules, created_by, created_at)
	VALUES (1, 1, '{"rules": []}', 'admin', now());
INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
	VALUES ('we_1', 1, 'https://hooks.example.com/in', '{*}', 'whsec_x', 'key_m', now(), now());
INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
		captured_minor, provider, provider_ref, payment_method, created_at, updated_at, route, capture_before)
	VALUES (1, 'pay_' || repeat('0', 31) || '1', 'key-1', '\x00', '{}', 'authorized', 1000, 'EUR', 0, 'fake', 'fk_1',
		'pm_card_visa', now(), now(), '{fake}', now() + interval '7 days');
UPDATE payments SET status = 'captured', captured_minor = 1000, updated_at = now()
	WHERE tenant_id = 1 AND id = 'pay_' || repeat('0', 31) || '1';
INSERT INTO payment_operations (tenant_id, id, payment_id, kind, idempotency_key, forwarded_key, status, amount_minor,
		provider_ref, created_at, updated_at)
	VALUES (1, 'op_1', 'pay_' || repeat('0', 31) || '1', 'capture', 'cap-1', 'fwd-cap-1', 'succeeded', 1000, 'fk_c1',
		now(), now());
INSERT INTO payment_attempts (tenant_id, payment_id, attempt, connector, forwarded_key, outcome, provider_ref,
		latency_ms, started_at, ended_at)
	VALUES (1, 'pay_' || repeat('0', 31) || '1', 1, 'fake', 'fwd-1', 'authorized', 'fk_1', 12.5, now(), now());
INSERT INTO payment_events (tenant_id, payment_id, type, from_status, to_status, created_at)
	VALUES (1, 'pay_' || repeat('0', 31) || '1', 'state_changed', 'authorized', 'captured', now());
INSERT INTO payment_disputes (tenant_id, id, payment_id, connector, provider_ref, amount_minor, currency,
		provider_event_id, created_at)
	VALUES (1, 'dp_1', 'pay_' || repeat('0', 31) || '1', 'fake', 'fk_d1', 1000, 'EUR', 'fevt_1', now());
INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, field_hashes, status, payment_id,
		response_status, response_headers, response_body, created_at, updated_at, expires_at)
	VALUES (1, 'authorize', 'key-1', '\x00', '{}', 'completed', 'pay_' || repeat('0', 31) || '1', 201, '{}', '{}',
		now(), now(), now() + interval '1 day');
INSERT INTO provider_webhook_events (connector, provider_event_id, type, kind, raw, received_at, outcome)
	VALUES ('fake', 'fevt_1', 'charge.dispute.created', 'dispute', '{}', now(), 'applied');
INSERT INTO reconciliation_runs (id, provider, business_date, version, trigger, status, time_zone, window_start,
		window_end, grace_seconds, started_at, finished_at)
	OVERRIDING SYSTEM VALUE VALUES (1, 'fake', current_date - 1, 1, 'cli', 'succeeded', 'UTC', now() - interval '1 day', now(), 600, now(), now());
INSERT INTO reconciliation_discrepancies (id, run_id, category, fingerprint, tenant_id, payment_id, created_at)
	OVERRIDING SYSTEM VALUE VALUES (1, 1, 'missing_at_provider', 'fp-1', 1, 'pay_' || repeat('0', 31) || '1', now()),
		(2, 1, 'part_mismatch', 'fp-2', 1, 'pay_' || repeat('0', 31) || '1', now()),
		(3, 1, 'fee_mismatch', 'fp-3', 1, 'pay_' || repeat('0', 31) || '1', now()),
		(4, 1, 'payout_unexplained', 'fp-4', NULL, NULL, now());
INSERT INTO reconciliation_discrepancies (id, run_id, category, fingerprint, provider_ref, created_at)
	OVERRIDING SYSTEM VALUE VALUES (5, 1, 'payout_missing_in_bank', 'fp-5', 'po_1', now());
UPDATE reconciliation_runs SET settlement = '{"EUR": {"charges_minor": 1000, "fees_minor": 39}}',
	bank = '{"account": "DE89370400440532013000", "currencies": {}}' WHERE id = 1;
INSERT INTO reconciliation_money_rows (run_id, seq, stream, object, id, type, hold_ref, gross_minor, fee_minor, net_minor,
		currency, payout_id, created_at, matched_tenant_id, matched_payment_id)
	VALUES (1, 1, 'day', 'balance_transaction', 'fbt_1', 'charge', 'fk_1', 1000, 39, 961, 'EUR', '', now(), 1,
		'pay_' || repeat('0', 31) || '1');
INSERT INTO reconciliation_provider_rows (run_id, seq, ref, status, amount_minor, captured_minor, refunded_minor,
		currency, created_at, updated_at, parts)
	VALUES (1, 1, 'fk_1', 'captured', 1000, 1000, 0, 'EUR', now(), now(),
		'[{"kind": "capture", "amount_minor": 1000, "key": "fwd-cap-1", "created_at": "2026-11-30T12:00:00Z"}]');
INSERT INTO webhook_delivery_attempts (event_id, endpoint_id, attempt, started_at, latency_ms, status_code)
	SELECT event_id, endpoint_id, 1, now(), 3.5, 500 FROM webhook_deliveries;
INSERT INTO payment_methods (tenant_id, id, idempotency_key, request_hash, type, brand, last4, exp_month, exp_year,
		fingerprint, card_ciphertext, cvc_ciphertext, cvc_expires_at, created_at)
	VALUES (1, 'vpm_' || repeat('0', 31) || '1', 'pm-key-1', '\x00', 'card', 'visa', '4242', 12, 2040, 'fp_1', '\x01',
		'\x02', now() + interval '1 hour', now());
INSERT INTO payment_method_keys (tenant_id, payment_method_id, kek_version, wrapped_key)
	VALUES (1, 'vpm_' || repeat('0', 31) || '1', 1, '\x03');
INSERT INTO fee_schedules (connector, version, schedule, created_by, created_at)
	VALUES ('fake', 1, '{"currencies":{"EUR":{"percent_bp":140,"fixed_minor":25}},"default":null,"tolerance_minor":0}', 'key_s', now());
INSERT INTO connector_bank_accounts (connector, account, match_window_days, updated_by, updated_at)
	VALUES ('fake', 'DE89370400440532013000', 3, 'key_s', now());
INSERT INTO bank_statements (id, account, statement_id, format, content_sha256, from_date, to_date, line_count, totals,
		created_by, created_at)
	OVERRIDING SYSTEM VALUE VALUES (1, 'DE89370400440532013000', 'STMT-1', 'camt.053', repeat('a', 64), current_date,
		current_date, 1, '{"EUR": {"credits": 1, "credit_minor": 1000, "debits": 0, "debit_minor": 0}}', 'key_s', now());
INSERT INTO bank_statement_lines (statement_id, line, account, booking_date, value_date, amount_minor, currency,
		credit_debit, reversal, reference, counterparty, bank_reference)
	VALUES (1, 1, 'DE89370400440532013000', current_date, NULL, 1000, 'EUR', 'credit', false, 'FAKEPAYOUT-1', '', '');
`

// TestEveryMigrationDownAndUpWithRows runs each migration's Down, then its
// Up, then its Down again, newest first, on a database holding rows in
// every table: a Down that only works on an empty schema, or an Up that
// cannot follow its own Down, fails here rather than in an operator's
// rollback. After each Down the schema must be exactly the one a fresh
// database migrated up to that version has (a Down that leaves a function
// or an index of its migration behind fails), and nothing may remain once
// every Down has run.
func TestEveryMigrationDownAndUpWithRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// The schema at each version, from a fresh database migrated one
	// version at a time.
	fresh := pgtest.Pool(t, pgtest.EmptyURL(t))
	fm, err := migrations.New(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	_, newest, err := fm.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	schemaAt := map[int64]string{0: schemaOf(t, fresh)}
	for v := int64(1); v <= newest; v++ {
		if err := fm.UpTo(ctx, v); err != nil {
			t.Fatalf("fresh database up to %d: %v", v, err)
		}
		schemaAt[v] = schemaOf(t, fresh)
	}

	pool := pgtest.Pool(t, pgtest.EmptyURL(t))
	m, err := migrations.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, everyTableRows); err != nil {
		t.Fatalf("rows of every table: %v", err)
	}
	if empty := emptyTables(t, pool); len(empty) > 0 {
		t.Fatalf("tables without rows (add a row of each to everyTableRows): %s", strings.Join(empty, ", "))
	}

	for v := newest; v > 0; v-- {
		if err := m.DownTo(ctx, v-1); err != nil {
			t.Fatalf("down from %d, with rows: %v", v, err)
		}
		if d := diffLines(schemaAt[v-1], schemaOf(t, pool), keptAfterDownOf(v)...); d != "" {
			t.Fatalf("after the down of %d the schema is not version %d's:\n%s", v, v-1, d)
		}
		if err := m.UpTo(ctx, v); err != nil {
			t.Fatalf("up to %d after its down: %v", v, err)
		}
		if d := diffLines(schemaAt[v], schemaOf(t, pool), keptAfterDownOf(v+1)...); d != "" {
			t.Fatalf("after the down and up of %d the schema is not version %d's:\n%s", v, v, d)
		}
		if err := m.DownTo(ctx, v-1); err != nil {
			t.Fatalf("down from %d the second time: %v", v, err)
		}
	}
	if got := tablesLeft(t, pool); len(got) > 0 {
		t.Fatalf("every migration down, yet these remain: %s", strings.Join(got, ", "))
	}
}

// emptyTables lists the tables (a partitioned table counting its
// partitions' rows) that hold no row.
func emptyTables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND c.relname NOT LIKE 'goose%'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var empty []string
	for _, n := range names {
		var any bool
		if err := pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM "+n+")").Scan(&any); err != nil {
			t.Fatal(err)
		}
		if !any {
			empty = append(empty, n)
		}
	}
	return empty
}

// tablesLeft lists what of the schema survives every Down: tables,
// sequences, functions and types of the public schema other than goose's.
func tablesLeft(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT relkind::text || ' ' || relname FROM pg_class
		WHERE relnamespace = 'public'::regnamespace AND relname NOT LIKE 'goose%'
		UNION ALL
		SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
		UNION ALL
		SELECT 'type ' || typname FROM pg_type
		WHERE typnamespace = 'public'::regnamespace AND typtype IN ('e', 'c', 'd') AND typrelid = 0
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		left = append(left, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return left
}

// schemaOf describes the public schema in one line per object: columns
// (type, nullability, default), constraints, indexes, triggers, functions
// (their whole definition), sequences and partitions.
func schemaOf(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
			|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
			|| coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_class c
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
		  AND c.relname NOT LIKE 'goose%'
		UNION ALL
		SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text NOT LIKE 'goose%'
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename NOT LIKE 'goose%'
		UNION ALL
		SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
		UNION ALL
		SELECT 'function ' || pg_get_functiondef(oid) FROM pg_proc
		WHERE pronamespace = 'public'::regnamespace AND prokind IN ('f', 'p')
		UNION ALL
		SELECT 'relation ' || relkind::text || ' ' || relname || coalesce(' ' || pg_get_expr(relpartbound, oid), '')
		FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relname NOT LIKE 'goose%'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// keptByDown are what a migration's Down keeps of its Up on purpose, by
// version: lines of schemaOf containing one of these strings may differ
// from the fresh schema after that Down and every older one.
var keptByDown = map[int64][]string{
	// payment_events is append-only: its provider_event rows stay, and so
	// does the type check that admits them.
	10: {"constraint payment_events payment_events_type_check"},
}

// keptAfterDownOf is what may differ after the Down of version v.
func keptAfterDownOf(v int64) []string {
	var kept []string
	for from, k := range keptByDown {
		if v <= from {
			kept = append(kept, k...)
		}
	}
	return kept
}

// diffLines lists the lines only in want (-) and only in got (+), but for
// those containing one of kept.
func diffLines(want, got string, kept ...string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	skip := func(l string) bool {
		for _, k := range kept {
			if strings.Contains(l, k) {
				return true
			}
		}
		return false
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] && !skip(l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] && !skip(l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
