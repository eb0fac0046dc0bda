package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
)

// TestRequireSyncStandby runs `payorch serve` with
// PAYORCH_REQUIRE_SYNC_STANDBY=true on a PostgreSQL without a synchronous
// standby (synchronous_standby_names empty, as a pg_auto_failover primary
// in wait_primary): an authorization is refused with a 503 problem+json,
// no answer is stored, and the retry is not blocked by the key. A server
// without the setting then answers the same key, with the one provider
// hold the refused request made, and captures it; the refused capture
// before that stored nothing either, and the strict server does not
// replay the answer the other stored.
func TestRequireSyncStandby(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	strict := startServe(t, w.env(map[string]string{"PAYORCH_REQUIRE_SYNC_STANDBY": "true"}))
	body := `{"amount_minor":2500,"currency":"EUR"}`
	for range 2 {
		a := authorize(strict.base, w.key, "sync-1", body)
		if a.status != 503 || !bytes.Contains(a.body, []byte(`"code":"service_unavailable"`)) ||
			!bytes.Contains(a.body, []byte("synchronous standby")) || a.retryAfter == "" {
			t.Fatalf("authorize without a synchronous standby: %d %s (Retry-After %q), want 503 service_unavailable", a.status, a.body, a.retryAfter)
		}
	}
	if n := w.count(t, `SELECT count(*)::int FROM idempotency_keys WHERE status = 'completed'`); n != 0 {
		t.Fatalf("%d answers stored without a synchronous standby", n)
	}

	lax := startServe(t, w.env(nil))
	a := authorize(lax.base, w.key, "sync-1", body)
	if a.status != 201 || a.replayed {
		t.Fatalf("authorize without the setting: %d %s", a.status, a.body)
	}
	// An answer read back from the database is not given either by a
	// primary without a synchronous standby (migration 00016's barrier):
	// it could be one a failover takes back.
	if r := authorize(strict.base, w.key, "sync-1", body); r.status != 503 {
		t.Fatalf("replay without a synchronous standby: %d %s, want 503", r.status, r.body)
	}
	if ops := w.providerAuthorizations(t, "sync-1"); len(ops) != 1 {
		t.Fatalf("%d provider authorizations for the key, want 1", len(ops))
	}
	var p struct{ ID string }
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatal(err)
	}
	id := p.ID
	c := post(strict.base+"/v1/payments/"+id+"/capture", w.key, "sync-cap-1", `{}`)
	if c.status != 503 {
		t.Fatalf("capture without a synchronous standby: %d %s", c.status, c.body)
	}
	if c = post(lax.base+"/v1/payments/"+id+"/capture", w.key, "sync-cap-1", `{}`); c.status != 200 {
		t.Fatalf("capture without the setting: %d %s", c.status, c.body)
	}
}
