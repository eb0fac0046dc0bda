package vault

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
)

func TestCreateGetListDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	in := createInput(f.tenant, "k1", visa())
	in.BillingDetails = &BillingDetails{Name: "Ada", Address: &Address{Country: "GB"}}
	in.Metadata = map[string]string{"order": "42"}
	pm := mustCreate(t, f.vault, in)
	if !strings.HasPrefix(pm.ID, orchestrator.VaultPrefix) || pm.Object != "payment_method" || pm.Type != "card" ||
		pm.Card.Brand != "visa" || pm.Card.Last4 != "4242" || pm.Card.ExpMonth != 12 || pm.Card.ExpYear != 2034 ||
		pm.Card.Fingerprint == "" || pm.BillingDetails.Address.Country != "GB" || pm.Metadata["order"] != "42" ||
		!pm.CreatedAt.Equal(f.clock.Now()) || pm.DeletedAt != nil {
		t.Fatalf("created %+v", pm)
	}
	body, _ := json.Marshal(pm)
	if strings.Contains(string(body), "4242424242424242") || strings.Contains(string(body), `"123"`) {
		t.Fatalf("the answer shows the card: %s", body)
	}
	got, err := f.vault.Get(ctx, f.tenant, pm.ID)
	if err != nil || got.ID != pm.ID || got.Card != pm.Card {
		t.Fatalf("get: %+v, %v", got, err)
	}
	_, err = f.vault.Get(ctx, f.other, pm.ID)
	wantCode(t, err, orchestrator.CodeNotFound, "payment_method")

	f.clock.Add(time.Second)
	pm2 := mustCreate(t, f.vault, createInput(f.tenant, "k2", CardInput{Number: "5555555555554444", ExpMonth: 1, ExpYear: 2031}))
	f.clock.Add(time.Second)
	pm3 := mustCreate(t, f.vault, createInput(f.tenant, "k3", visa()))
	mustCreate(t, f.vault, createInput(f.other, "k4", visa())) // never in f.tenant's lists
	list, more, err := f.vault.List(ctx, f.tenant, ListFilter{Limit: 2})
	if err != nil || !more || len(list) != 2 || list[0].ID != pm3.ID || list[1].ID != pm2.ID {
		t.Fatalf("first page: %v %v %v", ids(list), more, err)
	}
	list, more, err = f.vault.List(ctx, f.tenant, ListFilter{Limit: 2, StartingAfter: pm2.ID})
	if err != nil || more || len(list) != 1 || list[0].ID != pm.ID {
		t.Fatalf("second page: %v %v %v", ids(list), more, err)
	}
	list, _, err = f.vault.List(ctx, f.tenant, ListFilter{Fingerprint: pm.Card.Fingerprint})
	if err != nil || len(list) != 2 || list[0].ID != pm3.ID || list[1].ID != pm.ID {
		t.Fatalf("by fingerprint: %v %v", ids(list), err)
	}
	gte := pm2.CreatedAt
	list, _, err = f.vault.List(ctx, f.tenant, ListFilter{CreatedGTE: &gte, CreatedLT: &pm3.CreatedAt})
	if err != nil || len(list) != 1 || list[0].ID != pm2.ID {
		t.Fatalf("by created: %v %v", ids(list), err)
	}
	_, _, err = f.vault.List(ctx, f.other, ListFilter{StartingAfter: pm.ID})
	wantCode(t, err, orchestrator.CodeValidationFailed, "starting_after")

	f.clock.Add(time.Second)
	del, err := f.vault.Delete(ctx, f.tenant, pm.ID)
	if err != nil || del.DeletedAt == nil || !del.DeletedAt.Equal(f.clock.Now()) {
		t.Fatalf("delete: %+v %v", del, err)
	}
	f.clock.Add(time.Second)
	again, err := f.vault.Delete(ctx, f.tenant, pm.ID)
	if err != nil || !again.DeletedAt.Equal(*del.DeletedAt) {
		t.Fatalf("delete again: %+v %v", again, err)
	}
	got, err = f.vault.Get(ctx, f.tenant, pm.ID)
	if err != nil || got.DeletedAt == nil || got.Card.Last4 != "4242" {
		t.Fatalf("get deleted: %+v %v", got, err)
	}
	list, _, _ = f.vault.List(ctx, f.tenant, ListFilter{})
	if len(list) != 3 || list[2].DeletedAt == nil {
		t.Fatalf("list with deleted: %v", ids(list))
	}
	_, err = f.vault.Delete(ctx, f.other, pm2.ID)
	wantCode(t, err, orchestrator.CodeNotFound, "payment_method")
}

func ids(pms []PaymentMethod) []string {
	out := make([]string, len(pms))
	for i, pm := range pms {
		out[i] = pm.ID
	}
	return out
}

func TestFingerprintIsEqualWithinATenantOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := mustCreate(t, f.vault, createInput(f.tenant, "a", visa()))
	spaced := visa()
	spaced.Number = "4242424242424242"
	b := mustCreate(t, f.vault, createInput(f.tenant, "b", spaced))
	c := mustCreate(t, f.vault, createInput(f.other, "a", visa()))
	if a.Card.Fingerprint != b.Card.Fingerprint {
		t.Fatal("one card, two fingerprints in a tenant")
	}
	if a.Card.Fingerprint == c.Card.Fingerprint {
		t.Fatal("two tenants can correlate a card by its fingerprint")
	}
	if a.ID == c.ID {
		t.Fatal("two tenants' methods under one key share an id")
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	in := createInput(f.tenant, "dup", visa())
	var wg sync.WaitGroup
	got := make([]PaymentMethod, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() { got[i], errs[i] = f.vault.Create(ctx, in) })
	}
	wg.Wait()
	for i := range 8 {
		if errs[i] != nil || got[i].ID != got[0].ID || got[i].Card != got[0].Card {
			t.Fatalf("create %d: %+v %v", i, got[i], errs[i])
		}
	}
	var methods, keys int
	if err := f.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM payment_methods), (SELECT count(*) FROM payment_method_keys)`).
		Scan(&methods, &keys); err != nil || methods != 1 || keys != 1 {
		t.Fatalf("%d methods and %d keys (%v), want one each", methods, keys, err)
	}
	card, err := f.vault.Reveal(ctx, f.tenant, got[0].ID, orchestrator.RevealAuthorize)
	if err != nil || card.Number != "4242424242424242" {
		t.Fatalf("the one method does not decrypt: %v", err)
	}

	other := in
	other.RequestHash = []byte("another request")
	_, err = f.vault.Create(ctx, other)
	wantCode(t, err, orchestrator.CodeIdempotencyKeyReused, "Idempotency-Key")

	if _, err := f.vault.Delete(ctx, f.tenant, got[0].ID); err != nil {
		t.Fatal(err)
	}
	replay, err := f.vault.Create(ctx, in)
	if err != nil || replay.ID != got[0].ID || replay.DeletedAt == nil {
		t.Fatalf("a replay after delete: %+v %v", replay, err)
	}
}

func TestCreateRefusesBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	bad := visa()
	bad.Number = "4242424242424241"
	_, err := f.vault.Create(ctx, createInput(f.tenant, "bad", bad))
	wantCode(t, err, orchestrator.CodeValidationFailed, "card.number")
	in := createInput(f.tenant, "bad-md", visa())
	in.Metadata = map[string]string{"k": "v\x00"}
	_, err = f.vault.Create(ctx, in)
	wantCode(t, err, orchestrator.CodeValidationFailed, "metadata")
	_, err = f.vault.Create(ctx, createInput(f.tenant, "", visa()))
	wantCode(t, err, orchestrator.CodeIdempotencyKeyMissing, "Idempotency-Key")
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM payment_methods`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d methods stored from refused requests", n)
	}
}
