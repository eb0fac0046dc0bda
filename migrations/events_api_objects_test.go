package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/migrations"
)

// 00018 completes the objects of the events stored before it (a payment's
// extended_authorization, a run's whole row, a disabled endpoint's
// tenant_id and times), and its Down gives back 00017's trigger functions.
func TestEventsAPIObjectsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.EmptyURL(t))
	m, err := migrations.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.UpTo(ctx, 17); err != nil {
		t.Fatal(err)
	}
	// Events as 00017's writers left them: an extended hold's, a run's,
	// and the delivery worker's webhook_endpoint.disabled.
	if _, err := pool.Exec(ctx, `
		INSERT INTO tenants (name) VALUES ('Acme');
		INSERT INTO payments (tenant_id, id, idempotency_key, request_hash, field_hashes, status, amount_minor, currency,
			provider, payment_method, created_at, updated_at, extended_authorization)
		VALUES (1, 'pay_00000000000000000000000000000001', 'k1', '\x00', '{}', 'pending', 1000, 'EUR', 'fake', 'pm_card_visa', now(), now(), true),
			(1, 'pay_00000000000000000000000000000002', 'k2', '\x00', '{}', 'pending', 1000, 'EUR', 'fake', 'pm_card_visa', now(), now(), false);
		INSERT INTO reconciliation_runs (provider, business_date, version, trigger, time_zone, window_start, window_end,
			grace_seconds, requested_by, started_at, totals)
		VALUES ('fake', '2026-01-01', 1, 'api', 'UTC', '2026-01-01', '2026-01-02', 60, 'key_1', now(),
			'{"local": {"EUR": {"count": 1}}}');
		UPDATE reconciliation_runs SET status = 'succeeded', finished_at = now();
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, enabled, secret, created_by, created_at, updated_at)
		VALUES ('we_1', 1, 'https://example.com', '{*}', false, 's', 'key_1', '2026-01-01T10:00:00Z', now());
		INSERT INTO events (id, tenant_id, type, object, created_at)
		VALUES (event_id_at(now()), 1, 'webhook_endpoint.disabled',
			'{"id": "we_1", "object": "webhook_endpoint", "enabled": false}', now())`); err != nil {
		t.Fatal(err)
	}
	if err := m.UpTo(ctx, 18); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, q string }{
		{"the extended hold's event has extended_authorization",
			`SELECT object->'extended_authorization' = 'true' FROM events WHERE payment_id = 'pay_00000000000000000000000000000001'`},
		{"the other hold's is left to the default",
			`SELECT NOT object ? 'extended_authorization' FROM events WHERE payment_id = 'pay_00000000000000000000000000000002'`},
		{"the run's event has its totals and window",
			`SELECT object->'totals' = '{"local": {"EUR": {"count": 1}}}' AND object->>'time_zone' = 'UTC'
				AND object ? 'window_start' AND object ? 'diff' AND object->>'requested_by' = 'key_1'
			FROM events WHERE type = 'reconciliation.run.completed'`},
		{"the endpoint's event has its tenant and times",
			`SELECT object->'tenant_id' = '1' AND (object->>'created_at')::timestamptz = '2026-01-01T10:00:00Z'
				AND (object->>'updated_at')::timestamptz = created_at
			FROM events WHERE type = 'webhook_endpoint.disabled'`},
	} {
		var ok bool
		if err := pool.QueryRow(ctx, c.q).Scan(&ok); err != nil || !ok {
			t.Errorf("%s: %v %v", c.what, ok, err)
		}
	}

	if err := m.DownTo(ctx, 17); err != nil {
		t.Fatal(err)
	}
	var src string
	var conf []string
	if err := pool.QueryRow(ctx, `SELECT prosrc, coalesce(proconfig, '{}') FROM pg_proc WHERE proname = 'payments_outbox'`).
		Scan(&src, &conf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(src, "extended_authorization") || len(conf) != 1 || conf[0] != "plan_cache_mode=force_generic_plan" {
		t.Fatalf("after Down, payments_outbox is not 00017's: config %v", conf)
	}
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'webhook_endpoints_disabled'`).Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("after Down, %d webhook_endpoints_disabled triggers (%v)", triggers, err)
	}
	if err := m.UpTo(ctx, 18); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = 'payments_outbox'`).Scan(&conf); err != nil ||
		len(conf) != 1 {
		t.Fatalf("after Up again, payments_outbox config %v (%v)", conf, err)
	}
}
