package orchestrator_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newService(t *testing.T) (*orchestrator.Service, *testkit.Clock) {
	t.Helper()
	clk := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	return orchestrator.NewService(orchestrator.Config{Pool: pgtest.DB(t), Clock: clk.Now}), clk
}

func wantCode(t *testing.T, err error, code orchestrator.Code) {
	t.Helper()
	if got := orchestrator.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()

	t.Run("CreatedKeyAuthenticatesAsItsRoleAndTenant", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		tenant, k, secret, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, "pok_") || len(secret) < 60 {
			t.Fatalf("key %q lacks the pok_ prefix or entropy", secret)
		}
		p, err := s.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if p.Role != orchestrator.RoleMerchant || p.TenantID != tenant.ID || p.KeyID != k.ID {
			t.Fatalf("principal %+v, want merchant of tenant %d with key %s", p, tenant.ID, k.ID)
		}
		if !strings.Contains(secret, strings.TrimPrefix(k.ID, "key_")) {
			t.Fatalf("key %q does not embed its id %s", secret, k.ID)
		}
	})

	t.Run("OnlyTheHashIsStored", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		k, secret, err := s.CreateAPIKey(ctx, orchestrator.RoleSupport, 0, "desk")
		if err != nil {
			t.Fatal(err)
		}
		var stored []byte
		var asText string
		err = s.Pool().QueryRow(ctx, `SELECT secret_hash, row(api_keys.*)::text FROM api_keys WHERE id = $1`, k.ID).Scan(&stored, &asText)
		if err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256([]byte(secret))
		if string(stored) != string(want[:]) {
			t.Fatal("stored hash is not SHA-256 of the key")
		}
		secretPart := secret[strings.LastIndex(secret, "_")+1:]
		if strings.Contains(asText, secretPart) {
			t.Fatal("the key's secret is stored in clear")
		}
	})

	t.Run("WrongMalformedOrUnknownKeysAreUnauthorized", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		_, secret, err := s.CreateAPIKey(ctx, orchestrator.RoleFinance, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		last := secret[len(secret)-1]
		flipped := byte('A')
		if last == 'A' {
			flipped = 'B'
		}
		for name, key := range map[string]string{
			"empty":         "",
			"garbage":       "hello",
			"wrong secret":  secret[:len(secret)-1] + string(flipped),
			"unknown id":    "pok_0000000000000000_" + secret[len(secret)-43:],
			"truncated":     secret[:len(secret)-1],
			"other prefix":  "sk_" + secret[4:],
			"trailing junk": secret + "x",
		} {
			_, err := s.Authenticate(ctx, key)
			if orchestrator.ErrorCode(err) != orchestrator.CodeUnauthorized {
				t.Errorf("%s: got %v, want unauthorized", name, err)
			}
		}
	})

	t.Run("RevokedKeyStopsWorkingAndRevokeIsRepeatable", func(t *testing.T) {
		t.Parallel()
		s, clk := newService(t)
		ctx := context.Background()
		k, secret, err := s.CreateAPIKey(ctx, orchestrator.RoleAdmin, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		first, err := s.RevokeAPIKey(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if first.RevokedAt == nil {
			t.Fatal("revoked_at not set")
		}
		_, err = s.Authenticate(ctx, secret)
		wantCode(t, err, orchestrator.CodeUnauthorized)
		clk.Add(time.Hour)
		again, err := s.RevokeAPIKey(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !again.RevokedAt.Equal(*first.RevokedAt) {
			t.Fatalf("second revoke moved revoked_at from %v to %v", first.RevokedAt, again.RevokedAt)
		}
		_, err = s.RevokeAPIKey(ctx, "key_doesnotexist")
		wantCode(t, err, orchestrator.CodeNotFound)
	})

	t.Run("LastUsedAtIsKeptAtMinuteGranularity", func(t *testing.T) {
		t.Parallel()
		s, clk := newService(t)
		ctx := context.Background()
		k, secret, err := s.CreateAPIKey(ctx, orchestrator.RoleSupport, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		lastUsed := func() *time.Time {
			keys, err := s.ListAPIKeys(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range keys {
				if x.ID == k.ID {
					return x.LastUsedAt
				}
			}
			t.Fatal("key not listed")
			return nil
		}
		if lastUsed() != nil {
			t.Fatal("unused key has last_used_at")
		}
		t0 := clk.Now()
		if _, err := s.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); got == nil || !got.Equal(t0) {
			t.Fatalf("last_used_at %v, want %v", got, t0)
		}
		clk.Add(10 * time.Second)
		if _, err := s.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); !got.Equal(t0) {
			t.Fatalf("last_used_at rewritten within a minute: %v", got)
		}
		clk.Add(time.Minute)
		if _, err := s.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); !got.Equal(clk.Now()) {
			t.Fatalf("last_used_at %v, want %v", got, clk.Now())
		}
	})

	t.Run("RoleAndTenantRulesAreEnforced", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		_, _, err := s.CreateAPIKey(ctx, orchestrator.RoleMerchant, 0, "")
		wantCode(t, err, orchestrator.CodeValidationFailed)
		_, _, err = s.CreateAPIKey(ctx, orchestrator.RoleSupport, 1, "")
		wantCode(t, err, orchestrator.CodeValidationFailed)
		_, _, err = s.CreateAPIKey(ctx, orchestrator.Role("owner"), 0, "")
		wantCode(t, err, orchestrator.CodeValidationFailed)
		_, _, err = s.CreateAPIKey(ctx, orchestrator.RoleMerchant, 999999, "")
		wantCode(t, err, orchestrator.CodeNotFound)
	})
}

func TestTenants(t *testing.T) {
	t.Parallel()

	t.Run("DuplicateNameIsAConflictAndCreatesNoKey", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		if _, _, _, err := s.CreateTenant(ctx, "Acme"); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := s.CreateTenant(ctx, "Acme")
		wantCode(t, err, orchestrator.CodeConflict)
		keys, err := s.ListAPIKeys(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 {
			t.Fatalf("%d keys after a failed tenant creation, want 1", len(keys))
		}
	})

	t.Run("EmptyNameIsRejected", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		_, _, _, err := s.CreateTenant(context.Background(), "   ")
		wantCode(t, err, orchestrator.CodeValidationFailed)
	})

	t.Run("ListAndFindByName", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		a, _, _, err := s.CreateTenant(ctx, "A")
		if err != nil {
			t.Fatal(err)
		}
		b, _, _, err := s.CreateTenant(ctx, "B")
		if err != nil {
			t.Fatal(err)
		}
		ts, err := s.ListTenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 2 || ts[0].ID != a.ID || ts[1].ID != b.ID {
			t.Fatalf("tenants %+v", ts)
		}
		got, err := s.TenantByName(ctx, "B")
		if err != nil || got.ID != b.ID {
			t.Fatalf("TenantByName(B) = %+v, %v", got, err)
		}
		_, err = s.TenantByName(ctx, "C")
		wantCode(t, err, orchestrator.CodeNotFound)
		mine, err := s.ListAPIKeys(ctx, a.ID)
		if err != nil || len(mine) != 1 || *mine[0].TenantID != a.ID {
			t.Fatalf("ListAPIKeys(a) = %+v, %v", mine, err)
		}
	})
}
