package orchestrator_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

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

// TestCanonicalJSONRefusesWhatCannotBeStored: every string PostgreSQL
// cannot keep in text or jsonb (NUL, invalid UTF-8), every string the
// decoder would silently alter (an unpaired surrogate becomes U+FFFD) and
// every numeral too long to parse cheaply is refused, naming the top-level
// member it is in, at any depth.
func TestCanonicalJSONRefusesWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("9", 64<<10)
	for _, tc := range []struct{ body, field string }{
		{`{"description":"a\u0000b"}`, "description"},
		{`{"metadata":{"k":"\u0000"}}`, "metadata"},
		{`{"metadata":{"\u0000":"v"}}`, "metadata"},
		{`{"a\u0000":1}`, `a\x00`},
		{"{\"note\":\"\xc3\x28\"}", "note"},
		{"{\"m\":{\"\xff\":1}}", "m"},
		{"{\"\xff\":1}", `\ufffd`},
		{`{"x":[1,{"y":["\ud800"]}]}`, "x"},
		{`{"x":"\udc00\ud800"}`, "x"},
		{`{"x":"\ud800\u0041"}`, "x"},
		{`{"x":"\ud800"}`, "x"},
		{`{"amount_minor":` + long + `}`, "amount_minor"},
		{`{"amount_minor":1` + strings.Repeat("0", 40) + `}`, "amount_minor"},
		{`{"amount_minor":0.` + strings.Repeat("0", 40) + `1}`, "amount_minor"},
		{`{"amount_minor":1e40}`, "amount_minor"},
		{`{"amount_minor":1e-40}`, "amount_minor"},
		{`{"amount_minor":-300000000000e400}`, "amount_minor"},
		{`{"deep":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, "deep"},
		{`"\u0000"`, ""},
		{long, ""},
	} {
		_, err := orchestrator.CanonicalJSON([]byte(tc.body))
		var je *orchestrator.JSONError
		if !errors.As(err, &je) {
			t.Errorf("%.60q: error %v, want a *JSONError", tc.body, err)
			continue
		}
		if je.Field != tc.field {
			t.Errorf("%.60q: field %q, want %q (%v)", tc.body, je.Field, tc.field, err)
		}
		if strings.Contains(je.Reason, "999") || strings.ContainsRune(je.Reason, 0) || !utf8.ValidString(je.Reason) {
			t.Errorf("%.60q: the reason repeats the value: %q", tc.body, je.Reason)
		}
		// A numeral too long is refused for its length, before any
		// arithmetic (a 64 KB one used to cost about 200 ms of big.Rat).
		if len(tc.body) > 60000 && strings.Contains(tc.body, "999") && !strings.Contains(je.Reason, "characters long") {
			t.Errorf("%.60q: refused as %q, not for its length", tc.body, je.Reason)
		}
	}
	for _, ok := range []string{`{"s":"\ud83d\ude00 \\ud800 \u00e9 \t"}`, `{"n":12345678901234567890.12345678901234567}`,
		`{"n":1e39}`, `{"n":-1e-37}`} {
		if _, err := orchestrator.CanonicalJSON([]byte(ok)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
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
	for _, s := range []string{`{"a":1}`, `{"b":[1,2.5e3,{"c":null}],"a":"\u00e9"}`, `[]`, `1e400`, `{"a":1,"a":1}`, ``, `"x"`,
		`{"a":"\u0000"}`, `{"\u0000":1}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\\ud800"}`,
		`{"n":` + strings.Repeat("9", 4096) + `}`, `{"n":0.` + strings.Repeat("0", 60) + `1}`, `{"n":1e-38}`, `{"n":-0.0e-400}`,
		strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := orchestrator.CanonicalJSON(b)
		if err != nil {
			var je *orchestrator.JSONError
			if !errors.As(err, &je) {
				t.Fatalf("error %v is not a *JSONError", err)
			}
			return
		}
		// Nothing accepted is unstorable: the canonical form is valid UTF-8
		// and no string in it holds NUL.
		var v any
		if err := json.Unmarshal(c, &v); err != nil || !utf8.Valid(c) || holdsNUL(v) {
			t.Fatalf("accepted %q into %q", b, c)
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

func holdsNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		for _, x := range v {
			if holdsNUL(x) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			if holdsNUL(k) || holdsNUL(x) {
				return true
			}
		}
	}
	return false
}
