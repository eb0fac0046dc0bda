package httpapi_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// The write that settles an authorization stores its answer too. What it
// stores must be what the client got, and must show the payment as
// written, even when the payment changed under the lease (here a trigger
// rewrites it as it is settled).
func TestSettlingWriteStoresTheAnswer(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	pool := e.pool
	merchant := e.keys[orchestrator.RoleMerchant]
	stored := func(key string) (status int, body []byte, point string) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT response_status, response_body, recovery_point FROM idempotency_keys
			WHERE tenant_id = $1 AND operation = $2 AND key = $3 AND status = 'completed'`,
			e.tenant, orchestrator.OpAuthorize, key).Scan(&status, &body, &point)
		if err != nil {
			t.Fatalf("stored answer of %s: %v", key, err)
		}
		return status, body, point
	}
	check := func(key, body string, wantStatus int) []byte {
		t.Helper()
		res, got := e.post(t, "/v1/payments", merchant, key, body)
		if res.StatusCode != wantStatus {
			t.Fatalf("%s: %d %s", key, res.StatusCode, got)
		}
		status, kept, point := stored(key)
		if status != wantStatus || !bytes.Equal(kept, got) || point != "finished" {
			t.Fatalf("%s: stored %d %q at %q, answered %d %q", key, status, kept, point, res.StatusCode, got)
		}
		res, again := e.post(t, "/v1/payments", merchant, key, body)
		if res.StatusCode != wantStatus || res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again, got) {
			t.Fatalf("%s: replay %d %q, first %q", key, res.StatusCode, again, got)
		}
		return got
	}

	check("plain", `{"amount_minor":1000,"currency":"EUR"}`, 201)
	check("declined", `{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_chargeDeclined"}`, 402)

	_, err := pool.Exec(ctx, `
		CREATE FUNCTION test_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.description := 'rewritten while settling'; RETURN NEW; END $$;
		CREATE TRIGGER test_rewrite BEFORE UPDATE ON payments FOR EACH ROW
			WHEN (NEW.status = 'authorized' AND OLD.status = 'pending') EXECUTE FUNCTION test_rewrite();`)
	if err != nil {
		t.Fatal(err)
	}
	p := decode[payment](t, check("rewritten", `{"amount_minor":1000,"currency":"EUR"}`, 201))
	var description string
	if err := pool.QueryRow(ctx, `SELECT description FROM payments WHERE id = $1`, p.ID).Scan(&description); err != nil {
		t.Fatal(err)
	}
	_, body := e.do(t, "GET", "/v1/payments/"+p.ID, merchant, nil, nil)
	if description != "rewritten while settling" || !strings.Contains(string(body), `"description":"rewritten while settling"`) {
		t.Fatalf("the trigger did not run: %q %s", description, body)
	}
	_, answer, _ := stored("rewritten")
	if !strings.Contains(string(answer), `"description":"rewritten while settling"`) {
		t.Fatalf("the stored answer shows the payment as predicted, not as written: %s", answer)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "stored response was rendered from a payment that differs") ||
		!strings.Contains(logs, `"fields":["description"]`) || strings.Contains(logs, "rewritten while settling") {
		t.Fatalf("the repair should be logged naming the field, not its value:\n%s", logs)
	}
}
