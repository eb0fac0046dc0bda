package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// vulndbModule holds the Go vulnerability database's reports; its data/osv
// folder has one OSV JSON file per report, the same entries vuln.go.dev
// serves.
const vulndbModule = "golang.org/x/vulndb"

// sourceFile, written last into a built database, names where it came
// from; a folder of the cache without it is not one of ours and is never
// pruned.
const sourceFile = "SOURCE"

// osvEntry is the part of an OSV entry (https://ossf.github.io/osv-schema/)
// the index needs; the entry itself is copied byte for byte.
type osvEntry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases"`
	Affected []struct {
		Package struct {
			Name string `json:"name"` // the module path, or "stdlib" or "toolchain"
		} `json:"package"`
		Ranges []osvRange `json:"ranges"`
	} `json:"affected"`
}

type osvRange struct {
	Type   string `json:"type"`
	Events []struct {
		Introduced string `json:"introduced"`
		Fixed      string `json:"fixed"`
	} `json:"events"`
}

// The v1 database's index files
// (https://go.dev/security/vuln/database#api), as govulncheck reads them.
type (
	dbMeta struct {
		Modified time.Time `json:"modified"`
	}
	moduleMeta struct {
		Path  string       `json:"path"`
		Vulns []moduleVuln `json:"vulns"`
	}
	moduleVuln struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
		// Fixed lets govulncheck skip reading an entry for a module
		// version at or past it, so it must never be earlier than the
		// entry's real fix: latestFixed says why it can be empty.
		Fixed string `json:"fixed,omitempty"`
	}
	vulnMeta struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
		Aliases  []string  `json:"aliases,omitempty"`
	}
)

// ensureDB returns the folder of the database built from vulndb version
// version under cacheRoot, building it first when it is not there:
// download gives the folder of OSV files to build it from, and is called
// only then. Databases of other versions are removed once the new one is
// in place.
func ensureDB(cacheRoot, version string, download func() (string, error)) (string, error) {
	if version != filepath.Base(version) || version == "." || version == ".." {
		return "", fmt.Errorf("vulndb version %q is not a version", version)
	}
	final := filepath.Join(cacheRoot, version)
	if _, err := os.Stat(filepath.Join(final, sourceFile)); err == nil {
		return final, nil
	}
	osvDir, err := download()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return "", err
	}
	// Built aside and renamed into place, so that an interrupted build
	// or a concurrent one never leaves a half database under final.
	tmp, err := os.MkdirTemp(cacheRoot, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	n, err := buildDB(osvDir, tmp, snapshotTime(version))
	if err != nil {
		return "", fmt.Errorf("building the database from %s: %w", osvDir, err)
	}
	source := fmt.Sprintf("%s@%s data/osv: %d entries\n", vulndbModule, version, n)
	if err := os.WriteFile(filepath.Join(tmp, sourceFile), []byte(source), 0o644); err != nil {
		return "", err
	}
	os.RemoveAll(final) // a leftover without SOURCE, never a finished one
	if err := os.Rename(tmp, final); err != nil {
		if _, statErr := os.Stat(filepath.Join(final, sourceFile)); statErr == nil {
			return final, nil // another run finished the same version first
		}
		return "", err
	}
	pruneOthers(cacheRoot, version)
	return final, nil
}

// pruneOthers removes the databases of versions other than keep.
func pruneOthers(cacheRoot, keep string) {
	dirs, _ := os.ReadDir(cacheRoot)
	for _, d := range dirs {
		dir := filepath.Join(cacheRoot, d.Name())
		if d.Name() == keep || !d.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, sourceFile)); err == nil {
			os.RemoveAll(dir)
		}
	}
}

// downloadOSV fetches golang.org/x/vulndb at version through the Go
// module proxy (or finds it in the module cache) and returns its folder of
// OSV files.
func downloadOSV(ctx context.Context, version string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", vulndbModule+"@"+version)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &mod); err != nil || mod.Error != "" || runErr != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v %s %s", vulndbModule, version, runErr, mod.Error, stderr.Bytes())
	}
	return filepath.Join(mod.Dir, "data", "osv"), nil
}

// snapshotTime is when the vulndb commit at version was made, read from
// its pseudo-version; zero when version is not one.
func snapshotTime(version string) time.Time {
	t, err := module.PseudoVersionTime(version)
	if err != nil {
		return time.Time{}
	}
	return t
}

// buildDB writes the v1 database of the OSV files in osvDir into out and
// returns how many entries it holds. An empty folder is an error: a
// database without entries would let every scan pass. The entries in
// x/vulndb's data/osv carry no modification time (vuln.go.dev stamps them
// when it publishes), so index/db.json says snapshot, the time of the
// vulndb commit, unless an entry is newer; govulncheck prints it as the
// database's date.
func buildDB(osvDir, out string, snapshot time.Time) (int, error) {
	files, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no OSV entries (*.json) in %s", osvDir)
	}
	if err := os.MkdirAll(filepath.Join(out, "ID"), 0o755); err != nil {
		return 0, err
	}
	db := dbMeta{Modified: snapshot.UTC()}
	modules := map[string]*moduleMeta{}
	vulns := make([]vulnMeta, 0, len(files))
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return 0, err
		}
		var e osvEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
		if e.ID == "" || filepath.Base(file) != e.ID+".json" {
			return 0, fmt.Errorf("%s: file name does not match the entry's id %q", file, e.ID)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return 0, err
		}
		if e.Modified.After(db.Modified) {
			db.Modified = e.Modified
		}
		vulns = append(vulns, vulnMeta{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		for _, a := range e.Affected {
			m := modules[a.Package.Name]
			if m == nil {
				m = &moduleMeta{Path: a.Package.Name}
				modules[a.Package.Name] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified, Fixed: latestFixed(a.Ranges)})
		}
	}
	return len(files), writeIndex(filepath.Join(out, "index"), db, modules, vulns)
}

// writeIndex writes index/db.json, index/modules.json (modules sorted by
// path, each one's vulnerabilities by id) and index/vulns.json (by id).
func writeIndex(dir string, db dbMeta, modules map[string]*moduleMeta, vulns []vulnMeta) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mods := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		slices.SortStableFunc(m.Vulns, func(a, b moduleVuln) int { return strings.Compare(a.ID, b.ID) })
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b *moduleMeta) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(vulns, func(a, b vulnMeta) int { return strings.Compare(a.ID, b.ID) })
	for name, v := range map[string]any{"db.json": db, "modules.json": mods, "vulns.json": vulns} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// latestFixed is the version that fixes every SEMVER range of an affected
// module, or "" when the vulnerability was introduced again after the last
// fix (nothing fixes it for good) or has no fix. It is the rule that
// golang.org/x/vulndb's own database builder and govulncheck's in-memory
// index use, so this database indexes entries as vuln.go.dev does.
func latestFixed(ranges []osvRange) string {
	var latest string
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		for _, e := range r.Events {
			if e.Fixed != "" && semverLess(latest, e.Fixed) {
				latest = e.Fixed
			}
		}
		for _, e := range r.Events {
			if e.Introduced != "" && e.Introduced != "0" && semverLess(latest, e.Introduced) {
				latest = ""
				break
			}
		}
	}
	return latest
}

// semverLess compares OSV versions, which carry no "v"; "" sorts before
// every version.
func semverLess(a, b string) bool {
	return semver.Compare("v"+a, "v"+b) < 0
}
