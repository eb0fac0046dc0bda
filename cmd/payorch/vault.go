package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/orchestrator/vault"
)

// cvcSweepInterval is how often `serve` erases CVCs past their time: a
// minute late at most, and Reveal never returns one past it anyway.
const cvcSweepInterval = time.Minute

// validateVault checks the vault's keys (both or neither, well formed;
// errors never quote a key) and the CVC's lifetime.
func (c config) validateVault() error {
	if (c.VaultKeys == "") != (c.VaultFingerprintKey == "") {
		return errors.New("PAYORCH_VAULT_KEYS and PAYORCH_VAULT_FINGERPRINT_KEY: set both (the vault on) or neither (off)")
	}
	if _, err := c.vaultKeyring(); err != nil {
		return err
	}
	if c.VaultCVCTTL < time.Second || c.VaultCVCTTL > vault.DefaultCVCTTL {
		return errors.New("PAYORCH_VAULT_CVC_TTL: must be from 1s to 1h (card rules forbid keeping a CVC longer)")
	}
	return nil
}

// vaultKeyring parses the vault's keys; nil when none are configured.
func (c config) vaultKeyring() (*vault.Keyring, error) {
	if c.VaultKeys == "" && c.VaultFingerprintKey == "" {
		return nil, nil
	}
	k, err := vault.ParseKeys(c.VaultKeys, c.VaultFingerprintKey)
	if err != nil {
		return nil, fmt.Errorf("PAYORCH_VAULT_KEYS, PAYORCH_VAULT_FINGERPRINT_KEY: %w", err)
	}
	return k, nil
}

// openVault builds the vault on pool, or nil when no keys are configured.
// Without keys, a database that holds payment methods stops production
// from starting: their cards could not be charged, and every payment
// naming one would fail; elsewhere it is warned about.
func openVault(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger, tel *telemetry) (*vault.Vault, error) {
	keys, err := cfg.vaultKeyring()
	if err != nil {
		return nil, err
	}
	if keys != nil {
		vc := vault.Config{Pool: pool, Keys: keys, Logger: logger, CVCTTL: cfg.VaultCVCTTL}
		if tel != nil {
			vc.Meter = tel.meterProvider.Meter(vault.InstrumentationName)
		}
		return vault.New(vc), nil
	}
	held, err := vaultHoldsCards(ctx, pool)
	if err != nil {
		return nil, err
	}
	switch {
	case held && cfg.Environment == envProduction:
		return nil, errors.New("PAYORCH_VAULT_KEYS and PAYORCH_VAULT_FINGERPRINT_KEY are not set, and the vault holds " +
			"payment methods: set the keys they were stored with (payorch cannot decrypt them otherwise)")
	case held:
		logger.Warn("vault off: PAYORCH_VAULT_KEYS is not set, and the vault holds payment methods; payments naming them will fail")
	}
	return nil, nil
}

// vaultHoldsCards reports whether payment_methods has a row; false when
// the table does not exist yet (a schema not migrated).
func vaultHoldsCards(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('payment_methods') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return false, err
	}
	var held bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM payment_methods)`).Scan(&held)
	return held, err
}

// devVaultKeys gives `dev` vault keys when none are configured: those in
// DataDir/vault.keys, generated there (mode 0600) on the first run. The
// file is in the variables' own spelling, so `set -a; . .payorch/vault.keys`
// hands them to another command (`payorch vault rotate`).
func devVaultKeys(cfg config, dataDir string) (config, error) {
	if cfg.VaultKeys != "" || cfg.VaultFingerprintKey != "" {
		return cfg, nil
	}
	path := filepath.Join(dataDir, "vault.keys")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b = []byte("PAYORCH_VAULT_KEYS=1:" + randomKey() + "\nPAYORCH_VAULT_FINGERPRINT_KEY=" + randomKey() + "\n")
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		return cfg, fmt.Errorf("dev vault keys: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch name {
		case "PAYORCH_VAULT_KEYS":
			cfg.VaultKeys = value
		case "PAYORCH_VAULT_FINGERPRINT_KEY":
			cfg.VaultFingerprintKey = value
		}
	}
	if err := cfg.validateVault(); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// randomKey is a fresh key in the configuration's spelling.
func randomKey() string {
	b := make([]byte, vault.KeySize)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// cmdVault runs the vault's operator tasks: `vault rotate`.
func cmdVault(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "rotate" {
		return usageError{"vault: want rotate"}
	}
	fs := newFlagSet("vault rotate")
	batch := fs.Int("batch", vault.DefaultRotateBatch, "data keys re-wrapped per statement")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError{err.Error()}
	}
	if *batch < 1 || *batch > 100_000 {
		return usageError{"vault rotate: --batch must be 1 to 100000"}
	}
	keys, err := cfg.vaultKeyring() // validated by loadConfig
	if err != nil {
		return err
	}
	if keys == nil {
		return errors.New("vault rotate: set PAYORCH_VAULT_KEYS (the newest version last rotated to, and the older ones) and PAYORCH_VAULT_FINGERPRINT_KEY")
	}
	pool, err := openPool(ctx, cfg, cfg.DatabaseURL, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	return rotateVault(ctx, vault.New(vault.Config{Pool: pool, Keys: keys, Logger: newLogger(cfg)}), *batch, stdout)
}

// rotateVault runs v.Rotate, printing its progress at most once a second
// and a final count.
func rotateVault(ctx context.Context, v *vault.Vault, batch int, stdout io.Writer) error {
	newest := v.Keys().Newest()
	fmt.Fprintf(stdout, "re-wrapping data keys under key-encryption key version %d, %d per batch\n", newest, batch)
	start := time.Now()
	var last time.Time
	var total int64
	err := v.Rotate(ctx, batch, func(done, remaining int64) {
		total = done
		if now := time.Now(); now.Sub(last) >= time.Second || remaining == 0 {
			last = now
			fmt.Fprintf(stdout, "rotated %d, about %d left\n", done, remaining)
		}
	})
	if err != nil {
		return fmt.Errorf("vault rotate: stopped after %d (run it again to resume): %w", total, err)
	}
	fmt.Fprintf(stdout, "done: %d data keys re-wrapped under version %d in %s; every data key is on version %d\n",
		total, newest, time.Since(start).Round(time.Millisecond), newest)
	return nil
}
