package orchestrator_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/payorch/payorch/orchestrator"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	same := [][]string{
		{`{"a":1,"b":"x"}`, `{"b":"x","a":1}`, " {\n\"a\" : 1.0 , \"b\":\"\\u0078\"} "},
		{`{"n":100}`, `{"n":1e2}`, `{"n":100.00}`, `{"n":1E+2}`},
		{`{"n":0.5}`, `{"n":5e-1}`, `{"n":0.50}`, `{"n":50E-2}`},
		{`{"n":-1.001}`, `{"n":-1001e-3}`, `{"n":-0.1001e1}`},
		{`{"n":0}`, `{"n":-0}`, `{"n":0.0e5}`},
		{`{"m":{"y":[1,2],"x":null}}`, `{"m":{"x":null,"y":[1.0,2e0]}}`},
		{``, `{}`, "  "},
	}
	for _, group := range same {
		want, err := orchestrator.CanonicalJSON([]byte(group[0]))
		if err != nil {
			t.Fatalf("%s: %v", group[0], err)
		}
		for _, other := range group[1:] {
			got, err := orchestrator.CanonicalJSON([]byte(other))
			if err != nil {
				t.Fatalf("%s: %v", other, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s → %s, but %s → %s", group[0], want, other, got)
			}
		}
	}
	different := [][2]string{
		{`{"a":1}`, `{"a":"1"}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":100}`, `{"a":100.5}`},
		{`{"a":null}`, `{}`},
	}
	for _, d := range different {
		x, _ := orchestrator.CanonicalJSON([]byte(d[0]))
		y, _ := orchestrator.CanonicalJSON([]byte(d[1]))
		if bytes.Equal(x, y) {
			t.Errorf("%s and %s canonicalise alike", d[0], d[1])
		}
	}
	if got, _ := orchestrator.CanonicalJSON([]byte(`{"n":1.001}`)); string(got) != `{"n":1.001}` {
		t.Errorf("1.001 canonicalised to %s, which must stay valid JSON", got)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1} x`, `{"a":}`, `{"a":1e99999}`, "{\"a\":\"\xff\"}",
		strings.Repeat("[", 40) + strings.Repeat("]", 40)} {
		if _, err := orchestrator.CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(op string, params map[string]string, body string) orchestrator.Fingerprint {
		t.Helper()
		f, err := orchestrator.NewFingerprint(op, params, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := fp("POST /x", map[string]string{"id": "1"}, `{"a":1,"b":2}`)
	if b := fp("POST /x", map[string]string{"id": "1"}, `{"b":2.0,"a":1}`); !bytes.Equal(a.Hash, b.Hash) {
		t.Fatal("spelling changed the fingerprint")
	}
	for name, other := range map[string]orchestrator.Fingerprint{
		"operation":  fp("POST /y", map[string]string{"id": "1"}, `{"a":1,"b":2}`),
		"path param": fp("POST /x", map[string]string{"id": "2"}, `{"a":1,"b":2}`),
		"body":       fp("POST /x", map[string]string{"id": "1"}, `{"a":1,"b":3}`),
	} {
		if bytes.Equal(a.Hash, other.Hash) {
			t.Errorf("%s does not change the fingerprint", name)
		}
	}
	diff := orchestrator.DifferingFields(a.Fields, fp("POST /x", map[string]string{"id": "2"}, `{"a":1,"c":2}`).Fields)
	if strings.Join(diff, ",") != "b,c,path.id" {
		t.Fatalf("differing fields %v", diff)
	}
}

// FuzzCanonicalJSON: canonicalisation never panics, is idempotent, and its
// output is accepted again.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"b":[1,2.5e3,{"c":null}],"a":"\u00e9"}`, `[]`, `1e400`, `{"a":1,"a":1}`, ``, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := orchestrator.CanonicalJSON(b)
		if err != nil {
			return
		}
		again, err := orchestrator.CanonicalJSON(c)
		if err != nil {
			t.Fatalf("canonical form %q rejected: %v", c, err)
		}
		if !bytes.Equal(c, again) {
			t.Fatalf("not idempotent: %q → %q", c, again)
		}
	})
}
