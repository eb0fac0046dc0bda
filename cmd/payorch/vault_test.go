package main

import (
	"context"
	"encoding/base64"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
)

// vaultTestKey is a key of the configuration's spelling, one per letter.
func vaultTestKey(letter string) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(letter, vault.KeySize)))
}

func TestVaultConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(nil))
	if k, kerr := cfg.vaultKeyring(); err != nil || kerr != nil || k != nil || cfg.VaultCVCTTL != vault.DefaultCVCTTL {
		t.Fatalf("default: keyring %v (%v, %v), cvc ttl %s", k, err, kerr, cfg.VaultCVCTTL)
	}
	good := map[string]string{"PAYORCH_VAULT_KEYS": "1:" + vaultTestKey("a") + ",2:" + vaultTestKey("b"),
		"PAYORCH_VAULT_FINGERPRINT_KEY": vaultTestKey("f"), "PAYORCH_VAULT_CVC_TTL": "10m"}
	cfg, err = loadConfig(envOf(good))
	if k, kerr := cfg.vaultKeyring(); err != nil || kerr != nil || k.Newest() != 2 || cfg.VaultCVCTTL.Minutes() != 10 {
		t.Fatalf("configured: %v %v", err, kerr)
	}
	for name, tc := range map[string]struct {
		edit func(map[string]string)
		want string // what the error says (it names the variable)
	}{
		"KeysWithoutFingerprintKey": {func(m map[string]string) { delete(m, "PAYORCH_VAULT_FINGERPRINT_KEY") }, "set both"},
		"FingerprintKeyWithoutKeys": {func(m map[string]string) { delete(m, "PAYORCH_VAULT_KEYS") }, "set both"},
		"ShortKey":                  {func(m map[string]string) { m["PAYORCH_VAULT_KEYS"] = "1:" + vaultTestKey("a")[:30] }, "PAYORCH_VAULT_KEYS"},
		"NoVersion":                 {func(m map[string]string) { m["PAYORCH_VAULT_KEYS"] = vaultTestKey("a") }, "PAYORCH_VAULT_KEYS"},
		"CVCKeptTooLong":            {func(m map[string]string) { m["PAYORCH_VAULT_CVC_TTL"] = "2h" }, "PAYORCH_VAULT_CVC_TTL"},
	} {
		env := map[string]string{}
		for k, v := range good {
			env[k] = v
		}
		tc.edit(env)
		_, err := loadConfig(envOf(env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.Contains(err.Error(), vaultTestKey("a")[:20]) {
			t.Errorf("%s: the error quotes a key: %v", name, err)
		}
	}
}

func TestProductionRefusesAVaultWithCardsAndNoKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.DB(t)
	logger := newLogger(config{LogLevel: "error"})
	prod := config{Environment: envProduction, VaultCVCTTL: vault.DefaultCVCTTL}
	if v, err := openVault(ctx, prod, pool, logger, nil); v != nil || err != nil {
		t.Fatalf("no keys, no cards: %v %v, want the vault off", v, err)
	}
	withKeys := prod
	withKeys.VaultKeys, withKeys.VaultFingerprintKey = "1:"+vaultTestKey("a"), vaultTestKey("f")
	v, err := openVault(ctx, withKeys, pool, logger, nil)
	if v == nil || err != nil {
		t.Fatalf("with keys: %v %v", v, err)
	}
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Create(ctx, vault.CreateInput{TenantID: tenant, Key: "k", RequestHash: []byte{1},
		Card: vault.CardInput{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2099}}); err != nil {
		t.Fatal(err)
	}
	if _, err := openVault(ctx, prod, pool, logger, nil); err == nil || !strings.Contains(err.Error(), "PAYORCH_VAULT_KEYS") {
		t.Fatalf("production without keys and a card stored: %v", err)
	}
	dev := prod
	dev.Environment = envDevelopment
	if v, err := openVault(ctx, dev, pool, logger, nil); v != nil || err != nil {
		t.Fatalf("development without keys and a card stored: %v %v, want the vault off", v, err)
	}
}

func TestDevGeneratesVaultKeysOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := defaultConfig()
	first, err := devVaultKeys(cfg, dir)
	if err != nil || first.VaultKeys == "" || first.VaultFingerprintKey == "" {
		t.Fatalf("generated: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, "vault.keys"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("vault.keys: %v, mode %v", err, st.Mode().Perm())
	}
	second, err := devVaultKeys(cfg, dir)
	if err != nil || second.VaultKeys != first.VaultKeys || second.VaultFingerprintKey != first.VaultFingerprintKey {
		t.Fatalf("second run got other keys (%v)", err)
	}
	if k, err := second.vaultKeyring(); err != nil || k.Newest() != 1 {
		t.Fatalf("generated keys do not parse: %v", err)
	}
	set := cfg
	set.VaultKeys, set.VaultFingerprintKey = "1:"+vaultTestKey("a"), vaultTestKey("f")
	if got, err := devVaultKeys(set, t.TempDir()); err != nil || got.VaultKeys != set.VaultKeys {
		t.Fatalf("configured keys replaced: %v", err)
	}
}

func TestVaultRotateCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.Pool(t, url)
	keys1, err := vault.ParseKeys("1:"+vaultTestKey("a"), vaultTestKey("f"))
	if err != nil {
		t.Fatal(err)
	}
	v := vault.New(vault.Config{Pool: pool, Keys: keys1})
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, err := v.Create(ctx, vault.CreateInput{TenantID: tenant, Key: key, RequestHash: []byte{1},
			Card: vault.CardInput{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2099}}); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"DATABASE_URL": url, "PAYORCH_LOG_LEVEL": "error",
		"PAYORCH_VAULT_KEYS": "1:" + vaultTestKey("a") + ",2:" + vaultTestKey("b"), "PAYORCH_VAULT_FINGERPRINT_KEY": vaultTestKey("f")}
	out, err := cli(t, env, "vault", "rotate", "--batch", "2")
	if err != nil || !strings.Contains(out, "rotated 3, about 0 left") || !strings.Contains(out, "done: 3 data keys re-wrapped under version 2") {
		t.Fatalf("vault rotate: %v\n%s", err, out)
	}
	var old int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payment_method_keys WHERE kek_version <> 2`).Scan(&old); err != nil || old != 0 {
		t.Fatalf("%d keys not on version 2 (%v)", old, err)
	}
	if out, err = cli(t, env, "vault", "rotate"); err != nil || !strings.Contains(out, "done: 0 data keys") {
		t.Fatalf("second vault rotate: %v\n%s", err, out)
	}
	delete(env, "PAYORCH_VAULT_KEYS")
	delete(env, "PAYORCH_VAULT_FINGERPRINT_KEY")
	if _, err := cli(t, env, "vault", "rotate"); err == nil || !strings.Contains(err.Error(), "PAYORCH_VAULT_KEYS") {
		t.Fatalf("vault rotate without keys: %v", err)
	}
	if _, err := cli(t, env, "vault", "spin"); err == nil {
		t.Fatal("vault spin accepted")
	}
}

func TestServeSweepsCVCsWhenTheVaultIsOn(t *testing.T) {
	t.Parallel()
	pool := pgtest.DB(t)
	logger := newLogger(config{LogLevel: "error"})
	cfg := config{ReconcileSchedule: "off"}
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Logger: logger})
	keys, err := vault.ParseKeys("1:"+vaultTestKey("a"), vaultTestKey("f"))
	if err != nil {
		t.Fatal(err)
	}
	names := func(cards *vault.Vault) []string {
		jobs, err := backgroundJobs(cfg, svc, nil, nil, cards, logger)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, j := range jobs {
			ns = append(ns, j.Name())
		}
		return ns
	}
	if on := names(vault.New(vault.Config{Pool: pool, Keys: keys})); !slices.Contains(on, "cvc-sweeper") {
		t.Fatalf("jobs with the vault on: %v", on)
	}
	if off := names(nil); slices.Contains(off, "cvc-sweeper") {
		t.Fatalf("jobs with the vault off: %v", off)
	}
}

func TestVaultDecryptionsAreExportedToPrometheus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.DB(t)
	logger := newLogger(config{LogLevel: "error"})
	tel, err := startTelemetry(ctx, config{LogLevel: "error"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tel.stop)
	cfg := config{VaultKeys: "1:" + vaultTestKey("a"), VaultFingerprintKey: vaultTestKey("f"), VaultCVCTTL: vault.DefaultCVCTTL}
	v, err := openVault(ctx, cfg, pool, logger, tel)
	if err != nil {
		t.Fatal(err)
	}
	var tenant int64
	if err := pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	pm, err := v.Create(ctx, vault.CreateInput{TenantID: tenant, Key: "k", RequestHash: []byte{1},
		Card: vault.CardInput{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2099}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := v.Reveal(ctx, tenant, pm.ID, orchestrator.RevealAuthorize); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	tel.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := regexp.MustCompile(`(?m)^payorch_vault_decryptions_total\{[^}]*reason="authorize"[^}]*\} 2$`)
	if !want.MatchString(rec.Body.String()) {
		t.Fatalf("no payorch_vault_decryptions_total of 2 for authorize in /metrics:\n%s", grepLines(rec.Body.String(), "vault"))
	}
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
