package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// markdownLink is an inline link or image, [text](target) or
// [text](target "title"): the target is group 1.
var markdownLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)

// markdownHeading is an ATX heading: its text is group 1.
var markdownHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// TestDocLinksResolve fails when a relative link in README.md,
// BENCHMARKS.md or docs/*.md names a file that does not exist, or an
// anchor (#…) that no heading of the file it points to makes: the docs
// link to each other and to the code, and both move.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "BENCHMARKS.md"))
	anchors := map[string][]string{} // by absolute path of a markdown file
	anchorsOf := func(path string) ([]string, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path], nil
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for _, l := range relativeLinks(string(b)) {
			file, anchor, _ := strings.Cut(l.target, "#")
			target := doc
			if file != "" {
				target = filepath.Join(filepath.Dir(doc), filepath.FromSlash(file))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, file)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not markdown", rel, l.line, l.target)
				continue
			}
			have, err := anchorsOf(target)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(have, anchor) {
				t.Errorf("%s:%d: link %q: no heading of %s makes the anchor #%s", rel, l.line, l.target, filepath.Base(target), anchor)
			}
		}
	}
}

// docLink is one relative link of a markdown file.
type docLink struct {
	target string
	line   int
}

// relativeLinks returns the links of a markdown text outside fenced code
// blocks and inline code that point into the repository (no scheme, not
// site-absolute).
func relativeLinks(text string) []docLink {
	var links []docLink
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range markdownLink.FindAllStringSubmatch(withoutInlineCode(line), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "/") {
				continue
			}
			links = append(links, docLink{target: target, line: i + 1})
		}
	}
	return links
}

// withoutInlineCode blanks `code spans`, where brackets are not links.
func withoutInlineCode(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = strings.Repeat(" ", len(parts[i]))
	}
	return strings.Join(parts, "`")
}

// headingAnchors returns the anchors GitHub makes for a markdown text's
// headings: lower case, punctuation dropped, spaces made hyphens, and
// -1, -2 … after a repeated one.
func headingAnchors(text string) []string {
	var out []string
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := markdownHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of one heading's text.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestDocLinkChecker proves the checker's pieces on made-up text: links in
// code are not links, absolute ones are not checked, and anchors follow
// GitHub's rules.
func TestDocLinkChecker(t *testing.T) {
	t.Parallel()
	text := "# Where to read next\n## `BenchmarkServe`: the headline\n## A, b & c\n## A, b & c\n" +
		"see [x](docs/x.md#a-b--c-1) and [y](https://example.com) and `[z](nope.md)`\n```\n[w](nope.md)\n# not a heading\n```\n"
	got := relativeLinks(text)
	if len(got) != 1 || got[0].target != "docs/x.md#a-b--c-1" || got[0].line != 5 {
		t.Errorf("relativeLinks = %+v, want one link, docs/x.md#a-b--c-1 on line 5", got)
	}
	want := []string{"where-to-read-next", "benchmarkserve-the-headline", "a-b--c", "a-b--c-1"}
	if a := headingAnchors(text); !slices.Equal(a, want) {
		t.Errorf("headingAnchors = %q, want %q", a, want)
	}
}
