package orchestrator_test

import (
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/payorch/payorch/orchestrator"
)

func TestPublishableKeys(t *testing.T) {
	t.Parallel()

	t.Run("ArePrintedPpkAndActForTheirTenant", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		tenant, _, _, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		k, secret, err := s.CreateAPIKey(ctx, orchestrator.RolePublishable, tenant.ID, "checkout")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, "ppk_") || !strings.Contains(secret, strings.TrimPrefix(k.ID, "key_")) {
			t.Fatalf("publishable key %q: want ppk_ and its id %s", secret, k.ID)
		}
		p, err := s.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if p.Role != orchestrator.RolePublishable || p.TenantID != tenant.ID || p.KeyID != k.ID {
			t.Fatalf("principal %+v", p)
		}
		// The prefix is part of what is hashed: the same secret sent as a
		// secret key is no key at all.
		_, err = s.Authenticate(ctx, "pok_"+strings.TrimPrefix(secret, "ppk_"))
		wantCode(t, err, orchestrator.CodeUnauthorized)
		var stored []byte
		if err := s.Pool().QueryRow(ctx, `SELECT secret_hash FROM api_keys WHERE id = $1`, k.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if want := sha256.Sum256([]byte(secret)); string(stored) != string(want[:]) {
			t.Fatal("stored hash is not SHA-256 of the whole ppk_ key")
		}
		if sc := orchestrator.ScopeOf(p); sc.TenantID != tenant.ID || sc.Staff {
			t.Fatalf("a publishable key's read scope is %+v, want its tenant only", sc)
		}
	})

	t.Run("NeedATenant", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		_, _, err := s.CreateAPIKey(ctx, orchestrator.RolePublishable, 0, "")
		wantCode(t, err, orchestrator.CodeValidationFailed)
		_, _, err = s.CreateAPIKey(ctx, orchestrator.RolePublishable, 999999, "")
		wantCode(t, err, orchestrator.CodeNotFound)
		if r, err := orchestrator.ParseRole("publishable"); err != nil || r != orchestrator.RolePublishable {
			t.Fatalf("ParseRole(publishable) = %q, %v", r, err)
		}
	})
}

func TestBrowserOrigins(t *testing.T) {
	t.Parallel()

	t.Run("AreValidatedAndNormalised", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			in       string
			loopback bool
			want     string // "" = refused
		}{
			{"https://shop.example", false, "https://shop.example"},
			{"HTTPS://Shop.Example:443", false, "https://shop.example"},
			{"https://shop.example:8443", false, "https://shop.example:8443"},
			{"https://[2001:db8::1]:8443", false, "https://[2001:db8::1]:8443"},
			{"https://xn--bcher-kva.example", false, "https://xn--bcher-kva.example"},
			{"http://127.0.0.1:3000", true, "http://127.0.0.1:3000"},
			{"http://localhost", true, "http://localhost"},
			{"http://[::1]:80", true, "http://[::1]"},
			{"http://127.0.0.1:3000", false, ""},
			{"http://shop.example", true, ""},
			{"https://shop.example/", false, ""},
			{"https://shop.example/pay", false, ""},
			{"https://shop.example?x=1", false, ""},
			{"https://shop.example#top", false, ""},
			{"https://user@shop.example", false, ""},
			{"https://*.shop.example", false, ""},
			{"https://bücher.example", false, ""},
			{"https://shop.example:0", false, ""},
			{"https://shop.example:99999", false, ""},
			{"shop.example", false, ""},
			{"ftp://shop.example", false, ""},
			{"null", false, ""},
			{"", false, ""},
		} {
			got, err := orchestrator.ValidateBrowserOrigins([]string{tc.in}, tc.loopback)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("%q (loopback http %v) accepted as %v", tc.in, tc.loopback, got)
			case tc.want == "" && orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed:
				t.Errorf("%q: %v, want validation_failed", tc.in, err)
			case tc.want != "" && (err != nil || len(got) != 1 || got[0] != tc.want):
				t.Errorf("%q: %v, %v; want %s", tc.in, got, err, tc.want)
			}
			if err != nil {
				e := err.(*orchestrator.Error)
				if e.Param != "origins[0]" {
					t.Errorf("%q: param %q, want origins[0]", tc.in, e.Param)
				}
			}
		}
		many := make([]string, orchestrator.MaxBrowserOrigins+1)
		for i := range many {
			many[i] = "https://shop.example:" + string(rune('1'+i%9)) + "000"
		}
		if _, err := orchestrator.ValidateBrowserOrigins(many, false); orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed {
			t.Fatalf("%d origins: %v", len(many), err)
		}
		got, err := orchestrator.ValidateBrowserOrigins([]string{"https://a.example", "https://A.example:443"}, false)
		if err != nil || !slices.Equal(got, []string{"https://a.example"}) {
			t.Fatalf("duplicates: %v %v", got, err)
		}
	})

	t.Run("AreStoredPerTenant", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		ctx := context.Background()
		tenant, _, _, err := s.CreateTenant(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.BrowserOrigins(ctx, tenant.ID)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("a new tenant's origins: %#v, %v", got, err)
		}
		set, err := s.SetBrowserOrigins(ctx, tenant.ID, []string{"https://Shop.example", "http://localhost:3000"}, true)
		if err != nil || !slices.Equal(set, []string{"https://shop.example", "http://localhost:3000"}) {
			t.Fatalf("set: %v %v", set, err)
		}
		if got, err = s.BrowserOrigins(ctx, tenant.ID); err != nil || !slices.Equal(got, set) {
			t.Fatalf("read back %v %v", got, err)
		}
		_, err = s.SetBrowserOrigins(ctx, tenant.ID, []string{"http://localhost:3000"}, false)
		wantCode(t, err, orchestrator.CodeValidationFailed)
		_, err = s.SetBrowserOrigins(ctx, 999999, nil, false)
		wantCode(t, err, orchestrator.CodeNotFound)
		_, err = s.BrowserOrigins(ctx, 999999)
		wantCode(t, err, orchestrator.CodeNotFound)
		if set, err = s.SetBrowserOrigins(ctx, tenant.ID, nil, false); err != nil || set == nil || len(set) != 0 {
			t.Fatalf("clear: %#v %v", set, err)
		}
	})

	t.Run("OriginOfURL", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[string]string{
			"https://Shop.example:443/done?x=1": "https://shop.example",
			"http://127.0.0.1:8080/back":        "http://127.0.0.1:8080",
			"https://[::1]:8443/":               "https://[::1]:8443",
			"javascript:alert(1)":               "",
			"//shop.example/x":                  "",
			"/relative":                         "",
			"https://u:p@shop.example/":         "",
		} {
			if got := orchestrator.OriginOfURL(in); got != want {
				t.Errorf("OriginOfURL(%q) = %q, want %q", in, got, want)
			}
		}
	})
}
