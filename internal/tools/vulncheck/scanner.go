package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// ensureScanner returns the path of scanner (module/cmd@version) as built
// by Go goVersion under cacheRoot, calling install with an empty folder to
// put the binary in when it is not there yet.
//
// `go run module@version` would cache the binary as well, but asks the
// module proxy for the module's deprecation on every run; an installed
// binary lets a warm check run with no network at all. The Go version is
// part of the key because govulncheck type-checks the standard library of
// the Go it scans with, and a go1.26-built one cannot read go1.27's.
func ensureScanner(cacheRoot, goVersion, scanner string, install func(gobin string) error) (string, error) {
	pkg, version, ok := strings.Cut(scanner, "@")
	name := path.Base(pkg)
	key := goVersion + "-" + name + "@" + version
	if !ok || version == "" || pkg == "" || name == "." || key != filepath.Base(key) || goVersion == "" {
		return "", fmt.Errorf("scanner %q (Go %q): want module/cmd@version", scanner, goVersion)
	}
	dir := filepath.Join(cacheRoot, key)
	bin := filepath.Join(dir, name)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cacheRoot, ".install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := install(tmp); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(tmp, name)); err != nil {
		return "", fmt.Errorf("installing %s put no %s in place: %w", scanner, name, err)
	}
	os.RemoveAll(dir) // a leftover without the binary, never a finished one
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(bin); statErr == nil {
			return bin, nil // another run installed the same one first
		}
		return "", err
	}
	return bin, nil
}

// goInstall installs scanner into gobin with the go command in use, which
// fetches it through the module proxy.
func goInstall(ctx context.Context, scanner, gobin string) error {
	cmd := exec.CommandContext(ctx, "go", "install", scanner)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install %s: %w\n%s", scanner, err, out)
	}
	return nil
}

// goEnv reads one of the go command's settings (GOVERSION is the
// toolchain that GOTOOLCHAIN selected).
func goEnv(ctx context.Context, name string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "env", name)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w: %s", name, err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out)), nil
}
