package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsureScannerInstallsOncePerVersionAndGo(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	installs := 0
	install := func(gobin string) error {
		installs++
		return os.WriteFile(filepath.Join(gobin, "govulncheck"), []byte("#!/bin/sh\n"), 0o755)
	}
	const scanner = "golang.org/x/vuln/cmd/govulncheck@v1.9.0"

	bin, err := ensureScanner(cache, "go1.27.3", scanner, install)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "go1.27.3-govulncheck@v1.9.0", "govulncheck"); bin != want {
		t.Errorf("binary at %q, want %q", bin, want)
	}
	if again, err := ensureScanner(cache, "go1.27.3", scanner, install); err != nil || again != bin || installs != 1 {
		t.Errorf("second call: %q, %v, %d installs; want %q, nil, 1 (reused)", again, err, installs, bin)
	}
	if _, err := ensureScanner(cache, "go1.26.8", scanner, install); err != nil || installs != 2 {
		t.Errorf("another Go: err %v, %d installs; want a second install", err, installs)
	}
	if _, err := ensureScanner(cache, "go1.27.3", "golang.org/x/vuln/cmd/govulncheck@v1.10.0", install); err != nil || installs != 3 {
		t.Errorf("another version: err %v, %d installs; want a third install", err, installs)
	}
	left, _ := filepath.Glob(filepath.Join(cache, ".install-*"))
	if len(left) > 0 {
		t.Errorf("install folders left behind: %v", left)
	}
}

func TestEnsureScannerRefusesWhatIsNotThere(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	noop := func(string) error { return nil }
	if _, err := ensureScanner(cache, "go1.27.3", "golang.org/x/vuln/cmd/govulncheck@v1.9.0", noop); err == nil {
		t.Error("an install that put no binary in place was taken")
	}
	failed := errors.New("proxy said no")
	if _, err := ensureScanner(cache, "go1.27.3", "golang.org/x/vuln/cmd/govulncheck@v1.9.0",
		func(string) error { return failed }); !errors.Is(err, failed) {
		t.Errorf("install error = %v, want %v", err, failed)
	}
	for _, bad := range []string{"golang.org/x/vuln/cmd/govulncheck", "golang.org/x/vuln/cmd/govulncheck@", "@v1.9.0", "x@v1/../../etc"} {
		if _, err := ensureScanner(cache, "go1.27.3", bad, noop); err == nil {
			t.Errorf("scanner %q was taken", bad)
		}
	}
	if entries, _ := os.ReadDir(cache); len(entries) > 0 {
		t.Errorf("the cache holds %d entries after failed installs", len(entries))
	}
}
