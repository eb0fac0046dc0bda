// Command vulncheck runs govulncheck over payorch against a vulnerability
// database built on this machine, so that `make test` checks for known
// vulnerabilities without reaching anything but the Go module proxy.
//
// The database is golang.org/x/vulndb's OSV files (its data/osv folder),
// fetched as a module and laid out in the v1 layout that govulncheck's
// -db file://… reads (index/db.json, index/modules.json, index/vulns.json,
// ID/<id>.json). It is built once per vulndb version into a cache folder
// outside the repository (~/.cache/payorch-vulncheck/db) and reused until
// the version changes.
//
// govulncheck is installed once per version and Go toolchain into the same
// cache (bin/), and run with -format json so that the verdict can tell a
// reachable vulnerability that has a fix (fails: upgrade) from one that has
// none (reported, does not fail: there is nothing to upgrade to). Once both
// are built, a check reaches no network.
//
// Usage:
//
//	go run ./internal/tools/vulncheck -vulndb VERSION -scanner MODULE/CMD@VERSION [-cache DIR] [packages]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck:", err)
		os.Exit(1)
	}
}

// errVulnerable is run's answer when a reachable vulnerability has a fix;
// the report says which.
var errVulnerable = errors.New("reachable vulnerabilities with a fixed version: upgrade the modules (or Go) named above")

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("vulncheck", flag.ContinueOnError)
	vulndb := fs.String("vulndb", "", "version of the golang.org/x/vulndb module whose data/osv is the database (required)")
	scanner := fs.String("scanner", "", "govulncheck to install and run, as `module/cmd@version` (required)")
	cache := fs.String("cache", "", "folder holding the built databases (db/, one per vulndb version) and scanners (bin/) (default: the user cache dir's payorch-vulncheck)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *vulndb == "" || *scanner == "" {
		return errors.New("-vulndb and -scanner are required")
	}
	patterns := fs.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	if *cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("-cache not given and no user cache dir: %w", err)
		}
		*cache = filepath.Join(dir, "payorch-vulncheck")
	}

	dbDir, err := ensureDB(filepath.Join(*cache, "db"), *vulndb, func() (string, error) { return downloadOSV(ctx, *vulndb) })
	if err != nil {
		return err
	}
	goVersion, err := goEnv(ctx, "GOVERSION")
	if err != nil {
		return err
	}
	bin, err := ensureScanner(filepath.Join(*cache, "bin"), goVersion, *scanner,
		func(gobin string) error { return goInstall(ctx, *scanner, gobin) })
	if err != nil {
		return err
	}
	res, err := scan(ctx, bin, dbDir, patterns)
	if err != nil {
		return err
	}
	res.print(os.Stdout)
	if res.failing() {
		return errVulnerable
	}
	return nil
}
