package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is payorch's module path; rules name its packages relative to it.
const module = "github.com/payorch/payorch"

// The third-party libraries the rules keep in their place.
const (
	echo     = "github.com/labstack/echo"
	stripeGo = "github.com/stripe/stripe-go"
	cron     = "github.com/robfig/cron"
	pgx      = "github.com/jackc/pgx"
)

// rule says which packages must not import what.
type rule struct {
	name string
	// importers are the packages the rule covers, relative to the module:
	// "httpapi" is that package, "providers/..." the tree under providers,
	// "..." every package.
	importers []string
	// except are packages (same patterns) the rule does not cover.
	except []string
	// forbidden are import paths the importers must not use; a path
	// covers the packages under it ("github.com/labstack/echo" covers
	// github.com/labstack/echo/v4/middleware). Paths in the module are
	// relative ("orchestrator").
	forbidden []string
	// transitive checks every package an importer depends on, not only
	// what it imports itself.
	transitive bool
	// knownViolations are the imports that break the rule today, as
	// "importer -> forbidden import", each to be removed when the code is
	// fixed: the test fails on any violation not listed, and on any
	// listed one that is gone.
	knownViolations []string
}

// rules are payorch's layering as it should be (STYLE.md: Where things
// live). Production code only: tests may import what they need.
var rules = []rule{
	{
		name:       "the domain uses no HTTP framework, provider SDK or scheduler",
		importers:  []string{"orchestrator/..."},
		forbidden:  []string{echo, stripeGo, cron},
		transitive: true,
	},
	{
		name:       "the core does not know its webhooks",
		importers:  []string{"orchestrator"},
		forbidden:  []string{"orchestrator/webhooks"},
		transitive: true,
	},
	{
		name:       "webhooks are built on the domain, not on its users or their libraries",
		importers:  []string{"orchestrator/webhooks/..."},
		forbidden:  []string{"httpapi", "reconcile", echo, stripeGo, cron},
		transitive: true,
	},
	{
		name:      "httpapi reaches the database only through orchestrator",
		importers: []string{"httpapi/..."},
		forbidden: []string{pgx, "migrations"},
	},
	{
		name:       "provider adapters know nothing of the domain or its users",
		importers:  []string{"providers/..."},
		forbidden:  []string{"orchestrator", "httpapi", "reconcile"},
		transitive: true,
	},
	{
		name:      "only providers/stripe imports stripe-go",
		importers: []string{"..."},
		except:    []string{"providers/stripe"},
		forbidden: []string{stripeGo},
	},
	{
		name:      "only httpapi imports Echo",
		importers: []string{"..."},
		except:    []string{"httpapi/..."},
		forbidden: []string{echo},
	},
	{
		name:      "only reconcile imports cron",
		importers: []string{"..."},
		except:    []string{"reconcile/..."},
		forbidden: []string{cron},
	},
	{
		name:       "test helpers stay out of production code",
		importers:  []string{"..."},
		except:     []string{"internal/pgtest", "internal/testkit"},
		forbidden:  []string{"internal/pgtest", "internal/testkit"},
		transitive: true,
	},
}

// pkg is one package as `go list -json` describes it; paths are relative
// to the module where they are in it.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// TestLayering checks the rules against the module's packages as they
// are.
func TestLayering(t *testing.T) {
	t.Parallel()
	pkgs := listPackages(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			found, fixed := check(r, pkgs)
			for _, v := range found {
				t.Errorf("%s breaks the rule", v)
			}
			for _, v := range fixed {
				t.Errorf("%s is listed as a known violation but no longer happens: remove it from knownViolations", v)
			}
		})
	}
}

// TestRulesCatchViolations proves the checker on made-up packages: each
// rule finds a breach, direct or through another package, and a known
// violation that disappeared is reported.
func TestRulesCatchViolations(t *testing.T) {
	t.Parallel()
	bad := []pkg{
		{ImportPath: "orchestrator", Imports: []string{"providers"}, Deps: []string{"providers", "widget", echo + "/v4", "orchestrator/webhooks"}},
		{ImportPath: "orchestrator/webhooks", Imports: []string{"orchestrator", "gadget"}, Deps: []string{"orchestrator", "gadget", "reconcile"}},
		{ImportPath: "widget", Imports: []string{echo + "/v4"}, Deps: []string{echo + "/v4"}},
		{ImportPath: "httpapi", Imports: []string{"orchestrator", echo + "/v4"}, Deps: []string{"orchestrator", echo + "/v4", pgx + "/v5"}},
		{ImportPath: "providers/fake", Imports: []string{"providers", "widget"}, Deps: []string{"providers", "widget", "reconcile", "internal/testkit"}},
		{ImportPath: "cmd/payorch", Imports: []string{stripeGo + "/v76", cron + "/v3"}, Deps: []string{stripeGo + "/v76", cron + "/v3"}},
	}
	want := map[string][]string{
		"the domain uses no HTTP framework, provider SDK or scheduler": {"orchestrator -> " + echo + "/v4"},
		// orchestrator reaches webhooks only through widget; webhooks
		// reaches reconcile only through gadget.
		"the core does not know its webhooks":                                   {"orchestrator -> orchestrator/webhooks"},
		"webhooks are built on the domain, not on its users or their libraries": {"orchestrator/webhooks -> reconcile"},
		// httpapi depends on pgx only through orchestrator: not a breach.
		"httpapi reaches the database only through orchestrator":    nil,
		"provider adapters know nothing of the domain or its users": {"providers/fake -> reconcile"},
		"only providers/stripe imports stripe-go":                   {"cmd/payorch -> " + stripeGo + "/v76"},
		"only httpapi imports Echo":                                 {"widget -> " + echo + "/v4"},
		"only reconcile imports cron":                               {"cmd/payorch -> " + cron + "/v3"},
		"test helpers stay out of production code":                  {"providers/fake -> internal/testkit"},
	}
	for _, r := range rules {
		found, fixed := check(r, bad)
		if !slices.Equal(found, want[r.name]) {
			t.Errorf("%s: found %q, want %q", r.name, found, want[r.name])
		}
		if !slices.Equal(fixed, r.knownViolations) {
			t.Errorf("%s: reported %q as fixed, want %q", r.name, fixed, r.knownViolations)
		}
	}
}

// check returns r's violations among pkgs that are not known, and the
// known violations that no longer happen.
func check(r rule, pkgs []pkg) (found, fixed []string) {
	seen := map[string]bool{}
	for _, p := range pkgs {
		if !matchAny(p.ImportPath, r.importers) || matchAny(p.ImportPath, r.except) {
			continue
		}
		imports := p.Imports
		if r.transitive {
			imports = p.Deps
		}
		for _, imp := range imports {
			for _, f := range r.forbidden {
				if imp == f || strings.HasPrefix(imp, f+"/") {
					seen[p.ImportPath+" -> "+imp] = true
				}
			}
		}
	}
	for v := range seen {
		if !slices.Contains(r.knownViolations, v) {
			found = append(found, v)
		}
	}
	for _, v := range r.knownViolations {
		if !seen[v] {
			fixed = append(fixed, v)
		}
	}
	slices.Sort(found)
	return found, fixed
}

// matchAny reports whether path matches one of patterns ("a", "a/...",
// "...").
func matchAny(path string, patterns []string) bool {
	for _, p := range patterns {
		switch {
		case p == "...":
			return true
		case strings.HasSuffix(p, "/..."):
			if base := strings.TrimSuffix(p, "/..."); path == base || strings.HasPrefix(path, base+"/") {
				return true
			}
		case path == p:
			return true
		}
	}
	return false
}

// listPackages lists the module's packages with `go list`, their paths
// made relative to the module.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-e", "-json=ImportPath,Imports,Deps,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	rel := func(p string) string {
		if p == module {
			return "."
		}
		return strings.TrimPrefix(p, module+"/")
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			pkg
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		p.ImportPath = rel(p.ImportPath)
		for i := range p.Imports {
			p.Imports[i] = rel(p.Imports[i])
		}
		for i := range p.Deps {
			p.Deps[i] = rel(p.Deps[i])
		}
		pkgs = append(pkgs, p.pkg)
	}
	// A list that misses the packages the rules are about proves nothing.
	for _, must := range []string{"orchestrator", "orchestrator/webhooks", "httpapi", "reconcile", "providers/stripe", "providers/fake", "cmd/payorch"} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == must }) {
			t.Fatalf("go list did not list %s", must)
		}
	}
	return pkgs
}
