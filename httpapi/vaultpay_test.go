package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

// TestAuthorizeWithAVaultedCard: a payment names a card of the vault;
// the connector charges the card, the payment shows it as brand and
// last4 (in its answer and its events), the CVC is erased once the
// authorization is answered, a decline is counted against the method,
// and a deleted method is refused with a 4xx before any provider call.
func TestAuthorizeWithAVaultedCard(t *testing.T) {
	t.Parallel()
	e := newVaultEnv(t, httpapi.Config{})
	ctx := context.Background()
	merchant := e.keys[orchestrator.RoleMerchant]
	create := func(number, key string) string {
		res, b := e.createMethod(t, merchant, key, cardBody(number, visaCVC), nil)
		if res.StatusCode != 201 {
			t.Fatalf("create %s: %d %s", key, res.StatusCode, b)
		}
		return decode[paymentMethod](t, b).ID
	}
	pay := func(pm, key string) (int, []byte) {
		res, b := e.do(t, "POST", "/v1/payments", merchant,
			strings.NewReader(`{"amount_minor":1500,"currency":"EUR","payment_method":"`+pm+`"}`),
			map[string]string{"Content-Type": "application/json", "Idempotency-Key": key})
		return res.StatusCode, b
	}
	cvcKept := func(pm string) bool {
		var kept bool
		if err := e.pool.QueryRow(ctx, `SELECT cvc_ciphertext IS NOT NULL FROM payment_methods WHERE id = $1`, pm).Scan(&kept); err != nil {
			t.Fatal(err)
		}
		return kept
	}

	approved := create(visa, "pm-visa")
	if !cvcKept(approved) {
		t.Fatal("the CVC is gone before any authorization")
	}
	status, b := pay(approved, "pay-visa")
	if status != 201 {
		t.Fatalf("authorize with a vaulted card: %d %s", status, b)
	}
	p := decode[orchestrator.Payment](t, b)
	if p.Status != orchestrator.StatusAuthorized || p.PaymentMethod != approved || p.Card == nil ||
		p.Card.Brand != "visa" || p.Card.Last4 != "4242" || p.Card.ExpMonth != 12 {
		t.Fatalf("payment %s", b)
	}
	noCardIn(t, "the payment", string(b), visa, visaCVC)
	if cvcKept(approved) {
		t.Fatal("the CVC is still kept after the authorization that used it")
	}
	_, evs := e.do(t, "GET", "/v1/events?payment_id="+p.ID, merchant, nil, nil)
	if !strings.Contains(string(evs), `"card":{"brand":"visa","last4":"4242"`) {
		t.Fatalf("the payment's events do not show its card: %s", evs)
	}

	// Support sees the card in the console, never its number.
	cc := newConsoleClient(t, e.url)
	if res, body := cc.signIn(e.keys[orchestrator.RoleSupport]); res.StatusCode != 200 {
		t.Fatalf("console sign-in: %d %s", res.StatusCode, body)
	}
	if _, page := cc.get("/console/payments/" + p.ID); !strings.Contains(page, `<td id="card">visa •••• 4242`) {
		t.Fatalf("the console's payment page does not show the card:\n%s", page)
	} else {
		noCardIn(t, "the console's payment page", page, visa, visaCVC)
	}

	declined := create("4000000000000002", "pm-declined")
	if status, b := pay(declined, "pay-declined"); status != 402 || !strings.Contains(string(b), "card_declined") {
		t.Fatalf("declined card: %d %s", status, b)
	}
	var declines int
	if err := e.pool.QueryRow(ctx, `SELECT decline_count FROM payment_methods WHERE id = $1`, declined).Scan(&declines); err != nil || declines != 1 {
		t.Fatalf("declines counted: %d (%v), want 1", declines, err)
	}

	if res, b := e.do(t, "DELETE", "/v1/payment_methods/"+approved, merchant, nil, nil); res.StatusCode != 200 {
		t.Fatalf("delete: %d %s", res.StatusCode, b)
	}
	status, b = pay(approved, "pay-deleted")
	if status != 400 || !strings.Contains(string(b), `"payment_method"`) {
		t.Fatalf("a deleted method: %d %s, want 400 on payment_method", status, b)
	}
	ops, err := e.fake.Operations(ctx, providers.ForwardedKey(e.tenant, orchestrator.OpAuthorize, "pay-deleted"))
	if err != nil || len(ops) != 0 {
		t.Fatalf("the provider was called for a deleted method: %v %v", ops, err)
	}
	// Another tenant's method is not found either.
	other := "vpm_" + strings.Repeat("0", 32)
	if status, b := pay(other, "pay-unknown"); status != 400 {
		t.Fatalf("an unknown method: %d %s", status, b)
	}
}
