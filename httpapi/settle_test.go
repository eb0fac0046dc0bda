package httpapi_test

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"strconv"
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

// The answers stored for replays are decided by the domain
// (orchestrator.Claim.Answer), the settling statement of an authorization
// storing its own. What is stored must be, byte for byte, what the
// handlers write: the payment as GET writes it, a refund, and each final
// refusal as the error handler's problem document naming the payment and
// the first request.
func TestStoredAnswersAreWhatTheHandlersWrite(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	merchant := e.keys[orchestrator.RoleMerchant]
	// first sends a keyed POST, checks that the key stored exactly what
	// was answered, headers included, and returns the answer.
	first := func(op, path, key, body string, wantStatus int) (*http.Response, []byte) {
		t.Helper()
		res, got := e.post(t, path, merchant, key, body)
		if res.StatusCode != wantStatus {
			t.Fatalf("%s: %d %s", key, res.StatusCode, got)
		}
		var (
			status  int
			headers map[string]string
			kept    []byte
		)
		err := e.pool.QueryRow(ctx, `SELECT response_status, response_headers, response_body FROM idempotency_keys
			WHERE tenant_id = $1 AND operation = $2 AND key = $3 AND status = 'completed'`,
			e.tenant, op, key).Scan(&status, &headers, &kept)
		if err != nil {
			t.Fatalf("stored answer of %s: %v", key, err)
		}
		want := map[string]string{"Content-Type": res.Header.Get("Content-Type")}
		if loc := res.Header.Get("Location"); loc != "" {
			want["Location"] = loc
		}
		if status != res.StatusCode || !bytes.Equal(kept, got) || !maps.Equal(headers, want) {
			t.Fatalf("%s: stored %d %v %q, answered %d %v %q", key, status, headers, kept, res.StatusCode, want, got)
		}
		return res, got
	}
	// problem is the error handler's problem document of a final refusal.
	problem := func(res *http.Response, code, title string, status int, detail, param, paymentID string) string {
		p := `{"type":"urn:payorch:problem:` + code + `","title":"` + title + `","status":` + strconv.Itoa(status) +
			`,"detail":"` + detail + `","code":"` + code + `"`
		if param != "" {
			p += `,"param":"` + param + `"`
		}
		return p + `,"request_id":"` + res.Header.Get("X-Request-Id") + `","payment_id":"` + paymentID + `"}` + "\n"
	}

	res, approved := first(orchestrator.OpAuthorize, "/v1/payments", "ok", `{"amount_minor":1000,"currency":"EUR"}`, 201)
	p := decode[payment](t, approved)
	if _, got := e.do(t, "GET", "/v1/payments/"+p.ID, merchant, nil, nil); !bytes.Equal(got, approved) {
		t.Fatalf("stored %q, GET writes %q", approved, got)
	}
	if res.Header.Get("Location") != "/v1/payments/"+p.ID || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers of a new payment: %v", res.Header)
	}

	declinedID := orchestrator.PaymentID(e.tenant, "no")
	res, declined := first(orchestrator.OpAuthorize, "/v1/payments", "no",
		`{"amount_minor":1000,"currency":"EUR","payment_method":"pm_card_chargeDeclined"}`, 402)
	if want := problem(res, "payment_declined", "Payment declined", 402, "the payment was declined: card_declined", "", declinedID); string(declined) != want {
		t.Fatalf("stored decline\n%s\nwant\n%s", declined, want)
	}
	wantProblem(t, res, declined, 402, "payment_declined")

	capturePath := "/v1/payments/" + p.ID + "/capture"
	res, over := first(orchestrator.OpCapture, capturePath, "over", `{"amount_minor":1001}`, 422)
	if want := problem(res, "amount_exceeds_authorized", "Amount exceeds authorized", 422, "amount_minor exceeds the authorized amount", "amount_minor", p.ID); string(over) != want {
		t.Fatalf("stored refusal\n%s\nwant\n%s", over, want)
	}
	_, captured := first(orchestrator.OpCapture, capturePath, "capture", `{}`, 200)
	if _, got := e.do(t, "GET", "/v1/payments/"+p.ID, merchant, nil, nil); !bytes.Equal(got, captured) {
		t.Fatalf("stored capture %q, GET writes %q", captured, got)
	}
	res, refund := first(orchestrator.OpRefund, "/v1/payments/"+p.ID+"/refunds", "refund", `{"amount_minor":400}`, 201)
	if r := decode[map[string]any](t, refund); r["object"] != "refund" || r["payment_id"] != p.ID || r["amount_minor"] != 400.0 ||
		res.Header.Get("Location") != "" {
		t.Fatalf("stored refund %s, Location %q", refund, res.Header.Get("Location"))
	}
}
