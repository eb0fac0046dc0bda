package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestConsoleSignInLimitConfig(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]int{"": 10, "0": 0, "25": 25} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_CONSOLE_SIGNIN_LIMIT": env}))
		if err != nil || cfg.ConsoleSignInLimit != want {
			t.Errorf("PAYORCH_CONSOLE_SIGNIN_LIMIT=%q: %d (%v), want %d", env, cfg.ConsoleSignInLimit, err, want)
		}
	}
	for _, bad := range []string{"-1", "many"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_CONSOLE_SIGNIN_LIMIT": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_CONSOLE_SIGNIN_LIMIT") {
			t.Errorf("PAYORCH_CONSOLE_SIGNIN_LIMIT=%q: err %v", bad, err)
		}
	}
}

func TestTrustedProxiesConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(envOf(nil))
	if err != nil || cfg.TrustedProxies != nil {
		t.Fatalf("default trusted proxies %v (%v), want none", cfg.TrustedProxies, err)
	}
	cfg, err = loadConfig(envOf(map[string]string{"PAYORCH_TRUSTED_PROXIES": "10.0.0.7, 10.1.2.3/16,fd00::/8 ,::1"}))
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::1/128")}
	if err != nil || !slices.Equal(cfg.TrustedProxies, want) {
		t.Fatalf("trusted proxies %v (%v), want %v", cfg.TrustedProxies, err, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.internal", "10.0.0.1,"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_TRUSTED_PROXIES": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_TRUSTED_PROXIES") {
			t.Errorf("PAYORCH_TRUSTED_PROXIES=%q: err %v", bad, err)
		}
	}
}

func TestBackofficeMaxConnsConfig(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]int{"": 4, "2": 2, "12": 12} {
		cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_BACKOFFICE_MAX_CONNS": env}))
		if err != nil || cfg.BackofficeMaxConns != want {
			t.Errorf("PAYORCH_BACKOFFICE_MAX_CONNS=%q: %d (%v), want %d", env, cfg.BackofficeMaxConns, err, want)
		}
	}
	for _, bad := range []string{"1", "0", "-3", "4000", "few"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_BACKOFFICE_MAX_CONNS": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_BACKOFFICE_MAX_CONNS") {
			t.Errorf("PAYORCH_BACKOFFICE_MAX_CONNS=%q: err %v", bad, err)
		}
	}
}
