package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// The messages of govulncheck's -format json stream
// (golang.org/x/vuln/internal/govulncheck, protocol v1.0.0) that the
// verdict reads; each line of the stream holds one of the fields.
type (
	message struct {
		Config  *scanConfig `json:"config"`
		OSV     *osvSummary `json:"osv"`
		Finding *finding    `json:"finding"`
	}
	scanConfig struct {
		ScannerName    string     `json:"scanner_name"`
		ScannerVersion string     `json:"scanner_version"`
		GoVersion      string     `json:"go_version"`
		DBLastModified *time.Time `json:"db_last_modified"`
		ScanLevel      string     `json:"scan_level"`
	}
	osvSummary struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	}
	finding struct {
		OSV          string   `json:"osv"`
		FixedVersion string   `json:"fixed_version"`
		Trace        []*frame `json:"trace"`
	}
	frame struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Package  string `json:"package"`
		Function string `json:"function"`
		Receiver string `json:"receiver"`
		Position *struct {
			Filename string `json:"filename"`
			Line     int    `json:"line"`
		} `json:"position"`
	}
)

// How far a vulnerability reaches into payorch, as govulncheck finds it:
// its module is required, a vulnerable package is imported, or a
// vulnerable function is called (reachable).
const (
	levelModule = iota + 1
	levelPackage
	levelSymbol
)

// vuln is one OSV entry that govulncheck found, at the deepest level it
// reached.
type vuln struct {
	id, summary              string
	level                    int
	module, version, fixedIn string
	trace                    []*frame // the shortest call path found to it, vulnerable symbol first
}

// result is one scan's findings.
type result struct {
	config scanConfig
	vulns  map[string]*vuln
}

// scan runs the govulncheck binary bin on patterns against the database
// in dbDir and reads its findings.
func scan(ctx context.Context, bin, dbDir string, patterns []string) (*result, error) {
	abs, err := filepath.Abs(dbDir)
	if err != nil {
		return nil, err
	}
	db := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	args := append([]string{"-db", db, "-format", "json"}, patterns...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	res, readErr := readFindings(stdout)
	io.Copy(io.Discard, stdout) // let govulncheck finish writing if reading stopped early
	// In -format json govulncheck exits 0 whatever it finds; anything
	// else is a failure to scan, never a pass.
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	if readErr != nil {
		return nil, fmt.Errorf("reading govulncheck's output: %w", readErr)
	}
	return res, nil
}

// readFindings reads a govulncheck -format json stream.
func readFindings(r io.Reader) (*result, error) {
	res := &result{vulns: map[string]*vuln{}}
	sawConfig := false
	dec := json.NewDecoder(r)
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch {
		case m.Config != nil:
			res.config, sawConfig = *m.Config, true
		case m.OSV != nil:
			res.vuln(m.OSV.ID).summary = m.OSV.Summary
		case m.Finding != nil && len(m.Finding.Trace) > 0:
			res.add(m.Finding)
		}
	}
	if !sawConfig {
		return nil, errors.New("no config message: not a govulncheck -format json stream")
	}
	// Only a symbol-level scan tells reachable from merely imported; a
	// coarser one would turn every imported vulnerability into a failure
	// or hide reachable ones.
	if res.config.ScanLevel != "symbol" {
		return nil, fmt.Errorf("scan level %q, want symbol", res.config.ScanLevel)
	}
	return res, nil
}

func (res *result) vuln(id string) *vuln {
	v := res.vulns[id]
	if v == nil {
		v = &vuln{id: id}
		res.vulns[id] = v
	}
	return v
}

// add records a finding, keeping the deepest level it reaches and, of the
// call paths to it (govulncheck gives one per vulnerable symbol), the
// shortest: the easiest to read and to check by hand.
func (res *result) add(f *finding) {
	v := res.vuln(f.OSV)
	top := f.Trace[0]
	level := levelModule
	switch {
	case top.Function != "":
		level = levelSymbol
	case top.Package != "":
		level = levelPackage
	}
	if level == levelSymbol && v.level == levelSymbol && len(f.Trace) < len(v.trace) {
		v.trace = f.Trace
	}
	if level <= v.level {
		return
	}
	v.level, v.module, v.version, v.fixedIn = level, top.Module, top.Version, f.FixedVersion
	if level == levelSymbol {
		v.trace = f.Trace
	}
}

// byLevel returns the vulnerabilities found at level, with a fix or
// without, sorted by id.
func (res *result) byLevel(level int, fixed bool) []*vuln {
	var out []*vuln
	for _, v := range res.vulns {
		if v.level == level && (v.fixedIn != "") == fixed {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b *vuln) int { return strings.Compare(a.id, b.id) })
	return out
}

// failing says whether a reachable vulnerability has a fixed version.
// Reachable ones without a fix are reported but pass: nothing can be
// upgraded, and failing every build until upstream ships would teach
// people to skip the check.
func (res *result) failing() bool {
	return len(res.byLevel(levelSymbol, true)) > 0
}

// print writes the report: every reachable vulnerability with its fix and
// a call path to it, then a count of the ones only imported or required.
func (res *result) print(w io.Writer) {
	c := res.config
	fmt.Fprintf(w, "vulncheck: %s@%s, Go %s", c.ScannerName, c.ScannerVersion, c.GoVersion)
	if c.DBLastModified != nil {
		fmt.Fprintf(w, ", database last modified %s", c.DBLastModified.UTC().Format(time.DateOnly))
	}
	fmt.Fprintln(w)
	fixed, unfixed := res.byLevel(levelSymbol, true), res.byLevel(levelSymbol, false)
	if len(fixed) > 0 {
		fmt.Fprintf(w, "\nReachable, fixed in a newer version (these fail the check):\n")
		for _, v := range fixed {
			v.print(w)
		}
	}
	if len(unfixed) > 0 {
		fmt.Fprintf(w, "\nReachable, no fixed version yet (reported; they do not fail the check):\n")
		for _, v := range unfixed {
			v.print(w)
		}
	}
	imported := append(res.byLevel(levelPackage, true), res.byLevel(levelPackage, false)...)
	required := append(res.byLevel(levelModule, true), res.byLevel(levelModule, false)...)
	if len(imported)+len(required) > 0 {
		fmt.Fprintf(w, "\nNot called by payorch's code (reported; they do not fail the check):\n")
		for _, v := range imported {
			fmt.Fprintf(w, "  %s  %s@%s, package imported: %s\n", v.id, v.module, goVersion(v.module, v.version), v.summary)
		}
		for _, v := range required {
			fmt.Fprintf(w, "  %s  %s@%s, module required: %s\n", v.id, v.module, goVersion(v.module, v.version), v.summary)
		}
	}
	fmt.Fprintf(w, "\nvulncheck: %d reachable with a fix, %d reachable without a fix; not called: %d in imported packages, %d in required modules\n",
		len(fixed), len(unfixed), len(imported), len(required))
}

func (v *vuln) print(w io.Writer) {
	fix := "no fix"
	if v.fixedIn != "" {
		fix = "fixed in " + goVersion(v.module, v.fixedIn)
	}
	fmt.Fprintf(w, "  %s  %s@%s, %s: %s\n", v.id, v.module, goVersion(v.module, v.version), fix, v.summary)
	if len(v.trace) == 0 {
		return
	}
	// The trace runs from the vulnerable symbol out to payorch's code;
	// printed the way a call reads, from payorch's side.
	names := make([]string, 0, len(v.trace))
	for i := len(v.trace) - 1; i >= 0; i-- {
		names = append(names, v.trace[i].name())
	}
	where := ""
	if entry := v.trace[len(v.trace)-1]; entry.Position != nil {
		where = relPath(entry.Position.Filename) + fmt.Sprintf(":%d: ", entry.Position.Line)
	}
	fmt.Fprintf(w, "      %s%s\n", where, strings.Join(names, " -> "))
}

// name is a frame's function as Go code spells it: pkg.Func or
// pkg.Type.Method.
func (f *frame) name() string {
	pkg := path.Base(f.Package)
	if semver.Major(pkg) == pkg && pkg != path.Dir(f.Package) {
		// github.com/labstack/echo/v4 is package echo.
		pkg = path.Base(path.Dir(f.Package))
	}
	if f.Receiver != "" {
		return pkg + "." + strings.TrimPrefix(f.Receiver, "*") + "." + f.Function
	}
	return pkg + "." + f.Function
}

// goVersion spells the standard library's and toolchain's versions as
// Go releases (go1.26.8) instead of the semver govulncheck reports.
func goVersion(module, version string) string {
	if (module == "stdlib" || module == "toolchain") && strings.HasPrefix(version, "v") {
		return "go" + version[1:]
	}
	return version
}

func relPath(file string) string {
	wd, err := os.Getwd()
	if err != nil {
		return file
	}
	if rel, err := filepath.Rel(wd, file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}
