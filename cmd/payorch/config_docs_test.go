package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// configDocs is the page that documents every variable, relative to the
// module's root.
const configDocs = "docs/configuration.md"

// envName is a variable the docs must list when the code reads it.
var envName = regexp.MustCompile(`^(PAYORCH|DATABASE|STRIPE)_[A-Z0-9_]+$`)

// connectorPrefix starts the variables of a connector's settings,
// PAYORCH_CONNECTOR_<NAME>_<SETTING> (connectorVar): the code holds the
// prefix and, as the constants setting…, the settings.
const connectorPrefix = "PAYORCH_CONNECTOR_"

// harnessDirs are the packages of the test harness: their variables are
// the tests', listed apart.
var harnessDirs = []string{"internal/pgtest", "internal/testkit", "internal/pgbouncer", "internal/pgautofailover"}

// TestConfigDocsListEveryVariable fails when the code reads a PAYORCH_,
// DATABASE_ or STRIPE_ variable that the table of docs/configuration.md
// does not list, or the table lists one nothing reads; and likewise for
// its test harness table and the variables only tests and the harness
// read. The variables are the string literals of the module's Go files
// (go/parser: comments and longer messages do not count).
func TestConfigDocsListEveryVariable(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	product, harness, err := variablesInCode(root)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, configDocs))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range checkConfigDocs(string(doc), product, harness) {
		t.Error(e)
	}
}

// TestConfigDocsCheckCatchesDrift proves checkConfigDocs on the real page
// changed: a row removed, a row of a variable nothing reads added, a
// harness row removed.
func TestConfigDocsCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	product, harness, err := variablesInCode(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, configDocs))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"RowRemoved", removeRow(t, doc, "PAYORCH_REPLAY_CACHE"), "PAYORCH_REPLAY_CACHE is read by the code but not listed"},
		{"ConnectorRowRemoved", removeRow(t, doc, "PAYORCH_CONNECTOR_<NAME>_SOFT_DECLINES"), "PAYORCH_CONNECTOR_<NAME>_SOFT_DECLINES is read by the code but not listed"},
		{"UnreadRowAdded", strings.Replace(doc, "| `PAYORCH_LISTEN` |", "| `PAYORCH_NOTHING` | — | nothing |\n| `PAYORCH_LISTEN` |", 1), "PAYORCH_NOTHING is listed in " + configDocs + ", ## Variables, but nothing reads it"},
		{"HarnessRowRemoved", removeRow(t, doc, "PAYORCH_TEST_DATABASE_URL"), "PAYORCH_TEST_DATABASE_URL is read by the tests or their harness but not listed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkConfigDocs(tc.doc, product, harness)
			if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, tc.want) }) {
				t.Errorf("errors %q, want one saying %q", errs, tc.want)
			}
		})
	}
	if errs := checkConfigDocs(doc, product, harness); len(errs) != 0 {
		t.Errorf("the page as it is: %q", errs)
	}
}

// removeRow returns doc without the table row of variable name.
func removeRow(t *testing.T, doc, name string) string {
	t.Helper()
	row := "| `" + name + "` |"
	i := strings.Index(doc, row)
	if i < 0 {
		t.Fatalf("%s has no row %s", configDocs, row)
	}
	end := strings.IndexByte(doc[i:], '\n')
	return doc[:i] + doc[i+end+1:]
}

// checkConfigDocs compares the two tables of doc (under "## Variables"
// and "## Test harness") with the variables the code reads, and says
// what differs.
func checkConfigDocs(doc string, product, harness []string) []string {
	tables := documentedVariables(doc)
	var errs []string
	compare := func(section, readBy string, documented, read []string) {
		for _, v := range read {
			if !slices.Contains(documented, v) {
				errs = append(errs, v+" is read by "+readBy+" but not listed in "+configDocs+", "+section)
			}
		}
		for _, v := range documented {
			if !slices.Contains(read, v) {
				errs = append(errs, v+" is listed in "+configDocs+", "+section+", but nothing reads it")
			}
		}
	}
	compare("## Variables", "the code", tables["Variables"], product)
	compare("## Test harness", "the tests or their harness", tables["Test harness"], harness)
	return errs
}

// documentedVariables returns, by section title, the variables named in
// the first cell of each table row.
func documentedVariables(doc string) map[string][]string {
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(doc, "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(title)
			continue
		}
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		out[section] = append(out[section], name)
	}
	return out
}

// variablesInCode returns the variables the module's production code
// reads (connector settings as PAYORCH_CONNECTOR_<NAME>_<SETTING>), and
// those only its tests and test harness read, each sorted.
func variablesInCode(root string) (product, harness []string, err error) {
	var settings, prefixed, testOnly []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		inHarness := strings.HasSuffix(path, "_test.go") || slices.Contains(harnessDirs, filepath.ToSlash(rel))
		for _, s := range stringLiterals(f) {
			switch {
			case s == connectorPrefix && !inHarness:
				prefixed = append(prefixed, s)
			case !envName.MatchString(s):
			case inHarness:
				testOnly = append(testOnly, s)
			default:
				product = append(product, s)
			}
		}
		if !inHarness {
			settings = append(settings, settingConstants(f)...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(prefixed) > 0 {
		for _, s := range settings {
			product = append(product, connectorPrefix+"<NAME>_"+s)
		}
	}
	slices.Sort(product)
	product = slices.Compact(product)
	connectorVar := regexp.MustCompile(`^` + connectorPrefix + `[A-Z0-9_]+_(` + strings.Join(settings, "|") + `)$`)
	for _, v := range testOnly {
		// Tests set the product's variables too, name real connectors'
		// and build them from the prefix.
		if !slices.Contains(product, v) && !connectorVar.MatchString(v) && v != connectorPrefix && strings.HasPrefix(v, "PAYORCH_") {
			harness = append(harness, v)
		}
	}
	slices.Sort(harness)
	return product, slices.Compact(harness), nil
}

// stringLiterals returns the values of f's string literals.
func stringLiterals(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}

// settingConstants returns the values of f's string constants named
// setting…: the suffixes of PAYORCH_CONNECTOR_<NAME>_… (connector.go).
func settingConstants(f *ast.File) []string {
	var out []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "setting") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// moduleRoot is the folder of go.mod, above the test's working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above %s", dir)
		}
		dir = parent
	}
}
