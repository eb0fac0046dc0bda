package vault

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
)

func TestRevealDecryptsTheCard(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	pm := mustCreate(t, f.vault, createInput(f.tenant, "r", visa()))
	card, err := f.vault.Reveal(ctx, f.tenant, pm.ID, orchestrator.RevealAuthorize)
	want := providers.Card{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2034, CVC: "123", HolderName: "Ada Lovelace",
		Brand: "visa", Last4: "4242"}
	if err != nil || card != want {
		t.Fatalf("reveal: %v (equal: %v)", err, card == want)
	}
	s, err := f.vault.Summary(ctx, f.tenant, pm.ID)
	if err != nil || s != (orchestrator.CardSummary{Brand: "visa", Last4: "4242", ExpMonth: 12, ExpYear: 2034}) {
		t.Fatalf("summary: %+v %v", s, err)
	}
	_, err = f.vault.Reveal(ctx, f.other, pm.ID, orchestrator.RevealAuthorize)
	wantCode(t, err, orchestrator.CodeNotFound, "payment_method")
	_, err = f.vault.Summary(ctx, f.other, pm.ID)
	wantCode(t, err, orchestrator.CodeNotFound, "payment_method")

	// The card expires at the end of December 2034, in UTC.
	f.clock.Add(time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC).Sub(f.clock.Now()))
	_, err = f.vault.Reveal(ctx, f.tenant, pm.ID, orchestrator.RevealAuthorize)
	wantCode(t, err, orchestrator.CodeValidationFailed, "payment_method")
	_, err = f.vault.Summary(ctx, f.tenant, pm.ID)
	wantCode(t, err, orchestrator.CodeValidationFailed, "payment_method")
}

func TestCiphertextsMovedBetweenRowsDoNotDecrypt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a := mustCreate(t, f.vault, createInput(f.tenant, "a", visa()))
	b := mustCreate(t, f.vault, createInput(f.tenant, "b", CardInput{Number: "5555555555554444", ExpMonth: 1, ExpYear: 2031, CVC: "999"}))
	c := mustCreate(t, f.vault, createInput(f.tenant, "c", visa()))
	// a and b swap their cards and their keys (each ciphertext stays with
	// its own data key: only the row binding is wrong).
	swap := []any{f.tenant, a.ID, b.ID}
	for _, st := range []struct {
		q    string
		args []any
	}{
		{`UPDATE payment_methods m SET card_ciphertext = o.card_ciphertext, cvc_ciphertext = o.cvc_ciphertext
		 FROM payment_methods o WHERE m.tenant_id = $1 AND o.tenant_id = $1 AND (m.id, o.id) IN (($2, $3), ($3, $2))`, swap},
		{`UPDATE payment_method_keys m SET wrapped_key = o.wrapped_key
		 FROM payment_method_keys o WHERE m.tenant_id = $1 AND o.tenant_id = $1
		 AND (m.payment_method_id, o.payment_method_id) IN (($2, $3), ($3, $2))`, swap},
		// c's CVC ciphertext moves into its own number column.
		{`UPDATE payment_methods SET card_ciphertext = cvc_ciphertext WHERE tenant_id = $1 AND id = $2`, []any{f.tenant, c.ID}},
	} {
		if _, err := f.pool.Exec(ctx, st.q, st.args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		_, err := f.vault.Reveal(ctx, f.tenant, id, orchestrator.RevealAuthorize)
		if !errors.Is(err, errTampered) {
			t.Errorf("%s: %v, want a ciphertext that does not decrypt", id, err)
		}
		wantCode(t, err, orchestrator.CodeInternal, "")
	}
}

func TestDeletedCardIsGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	pm := mustCreate(t, f.vault, createInput(f.tenant, "d", visa()))
	keep := mustCreate(t, f.vault, createInput(f.tenant, "keep", visa()))
	if _, err := f.vault.Delete(ctx, f.tenant, pm.ID); err != nil {
		t.Fatal(err)
	}
	_, err := f.vault.Reveal(ctx, f.tenant, pm.ID, orchestrator.RevealAuthorize)
	wantCode(t, err, orchestrator.CodeNotFound, "payment_method")
	_, err = f.vault.Summary(ctx, f.tenant, pm.ID)
	wantCode(t, err, orchestrator.CodeNotFound, "payment_method")
	var card, cvc, expires, keys int
	err = f.pool.QueryRow(ctx, `
		SELECT count(card_ciphertext), count(cvc_ciphertext), count(cvc_expires_at),
			(SELECT count(*) FROM payment_method_keys WHERE payment_method_id = $1)
		FROM payment_methods WHERE id = $1`, pm.ID).Scan(&card, &cvc, &expires, &keys)
	if err != nil || card+cvc+expires+keys != 0 {
		t.Fatalf("left after delete: card %d, cvc %d, cvc expiry %d, keys %d (%v)", card, cvc, expires, keys, err)
	}
	if _, err := f.vault.Reveal(ctx, f.tenant, keep.ID, orchestrator.RevealAuthorize); err != nil {
		t.Fatalf("another method after a delete: %v", err)
	}
}

func TestCVCIsKeptUntilForgottenOrExpired(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	forgotten := mustCreate(t, f.vault, createInput(f.tenant, "f", visa()))
	expiring := mustCreate(t, f.vault, createInput(f.tenant, "e", visa()))
	none := visa()
	none.CVC = ""
	without := mustCreate(t, f.vault, createInput(f.tenant, "n", none))

	if err := f.vault.ForgetCVC(ctx, f.tenant, forgotten.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.vault.ForgetCVC(ctx, f.tenant, forgotten.ID); err != nil {
		t.Fatalf("forget twice: %v", err)
	}
	wantCVC(t, f.vault, f.tenant, forgotten.ID, "")
	wantCVC(t, f.vault, f.tenant, expiring.ID, "123")
	wantCVC(t, f.vault, f.tenant, without.ID, "")

	// A second before the hour the CVC is there; at the hour it is not,
	// though no sweeper ran and the ciphertext is still stored.
	f.clock.Add(DefaultCVCTTL - time.Second)
	wantCVC(t, f.vault, f.tenant, expiring.ID, "123")
	f.clock.Add(time.Second)
	wantCVC(t, f.vault, f.tenant, expiring.ID, "")
	var stored int
	if err := f.pool.QueryRow(ctx, `SELECT count(cvc_ciphertext) FROM payment_methods`).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("%d CVCs stored before the sweep, want 1 (%v)", stored, err)
	}
}

// wantCVC fails t unless the revealed card of id has cvc.
func wantCVC(t *testing.T, v *Vault, tenant int64, id, cvc string) {
	t.Helper()
	card, err := v.Reveal(context.Background(), tenant, id, orchestrator.RevealAuthorize)
	if err != nil {
		t.Fatal(err)
	}
	if card.CVC != cvc {
		t.Fatalf("cvc of %s: got %d digits, want %d", id, len(card.CVC), len(cvc))
	}
}

func TestCountDecline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	pm := mustCreate(t, f.vault, createInput(f.tenant, "c", visa()))
	for range 3 {
		if err := f.vault.CountDecline(ctx, f.tenant, pm.ID); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT decline_count FROM payment_methods WHERE id = $1`, pm.ID).Scan(&n); err != nil || n != 3 {
		t.Fatalf("decline_count %d (%v)", n, err)
	}
	wantCode(t, f.vault.CountDecline(ctx, f.other, pm.ID), orchestrator.CodeNotFound, "payment_method")
}

func TestCVCSweeperErasesExpiredCVCs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	old := mustCreate(t, f.vault, createInput(f.tenant, "old", visa()))
	f.clock.Add(30 * time.Minute)
	young := mustCreate(t, f.vault, createInput(f.tenant, "young", visa()))
	f.clock.Add(30 * time.Minute)

	job := f.vault.CVCSweeperJob(time.Hour) // one run, at Start
	job.Start(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		rows, _ := f.pool.Query(ctx, `SELECT id FROM payment_methods WHERE cvc_ciphertext IS NOT NULL ORDER BY id`)
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			left = append(left, id)
		}
		if rows.Err() == nil && len(left) == 1 && left[0] == young.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CVCs left: %v, want only %s", left, young.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	job.Stop()
	wantCVC(t, f.vault, f.tenant, old.ID, "")
	wantCVC(t, f.vault, f.tenant, young.ID, "123")
}
