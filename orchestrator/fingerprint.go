package orchestrator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Fingerprint identifies one request for the idempotency protocol: a hash
// over its operation, path parameters and canonical JSON body, plus one hash
// per top-level body field and path parameter, so that a mismatch can name
// the fields that differ (names only, never values).
type Fingerprint struct {
	Hash   []byte
	Fields map[string]string
}

// maxJSONDepth bounds nesting in request bodies.
const maxJSONDepth = 32

// MaxNumberLen bounds a JSON number, as sent and in canonical form, in
// characters: a numeral is refused before any big-number arithmetic can
// spend time on it (an int64 has 19 digits; no field needs more).
const MaxNumberLen = 40

// JSONError is why CanonicalJSON refused a document. Field names the
// top-level member the fault is in ("" when it is in no member: a
// malformed document, a non-object body); Reason says what is wrong
// without repeating the value.
type JSONError struct {
	Field  string
	Reason string
}

func (e *JSONError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// CanonicalJSON returns the canonical form of a JSON document: objects with
// keys sorted, no insignificant white space, numbers spelled as exact
// rationals (1e2, 100 and 100.0 are the same number), strings re-escaped by
// one rule. It rejects what a strict decoder must, and what PostgreSQL
// cannot store in text or jsonb: duplicate keys, trailing data, strings
// (member names or values) that are not valid UTF-8, hold an unpaired
// UTF-16 surrogate escape or the NUL character, numbers longer than
// MaxNumberLen characters, nesting deeper than 32. An empty body is {}.
// Errors are *JSONError.
func CanonicalJSON(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), nil
	}
	c := &canonicalizer{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	c.dec.UseNumber()
	var out bytes.Buffer
	if err := c.value(&out, 0); err != nil {
		return nil, err
	}
	if _, err := c.dec.Token(); err != io.EOF {
		return nil, &JSONError{Reason: "trailing data after the JSON document"}
	}
	return out.Bytes(), nil
}

// canonicalizer reads one document token by token and checks each
// token's own bytes as it goes.
type canonicalizer struct {
	dec  *json.Decoder
	body []byte
	// off is where the last token read ended.
	off int64
	// field is the top-level member being read.
	field string
}

func (c *canonicalizer) fail(format string, args ...any) error {
	return &JSONError{Field: c.field, Reason: fmt.Sprintf(format, args...)}
}

// next returns the next token and, for a string (a member name or a
// value), why PostgreSQL could not store it or the decoder would silently
// alter it; "" when it is fine.
func (c *canonicalizer) next() (tok json.Token, bad string, err error) {
	tok, err = c.dec.Token()
	if err != nil {
		return nil, "", c.fail("malformed JSON: %v", err)
	}
	end := c.dec.InputOffset()
	raw := c.body[c.off:end] // the token, after the separators before it
	c.off = end
	if s, ok := tok.(string); ok {
		switch {
		case !utf8.Valid(raw):
			bad = "strings must be valid UTF-8"
		case unpairedSurrogate(raw):
			bad = `strings must not hold an unpaired UTF-16 surrogate (\ud800 to \udfff)`
		case strings.IndexByte(s, 0) >= 0:
			bad = `strings must not hold the NUL character (\u0000)`
		}
	}
	return tok, bad, nil
}

// closing reads the ']' or '}' that ends an array or object.
func (c *canonicalizer) closing() error {
	_, _, err := c.next()
	return err
}

func (c *canonicalizer) value(out *bytes.Buffer, depth int) error {
	if depth > maxJSONDepth {
		return c.fail("JSON nested deeper than %d levels", maxJSONDepth)
	}
	tok, bad, err := c.next()
	if err != nil {
		return err
	}
	if bad != "" {
		return c.fail("%s", bad)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return c.object(out, depth)
		case '[':
			out.WriteByte('[')
			for i := 0; c.dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := c.value(out, depth+1); err != nil {
					return err
				}
			}
			if err := c.closing(); err != nil {
				return err
			}
			out.WriteByte(']')
		default:
			return c.fail("malformed JSON")
		}
	case json.Number:
		n, err := canonNumber(string(t))
		if err != nil {
			return c.fail("%v", err)
		}
		out.WriteString(n)
	case string:
		writeString(out, t)
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	}
	return nil
}

func (c *canonicalizer) object(out *bytes.Buffer, depth int) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	seen := map[string]bool{}
	for c.dec.More() {
		kt, bad, err := c.next()
		if err != nil {
			return err
		}
		k, ok := kt.(string)
		if !ok {
			return c.fail("malformed JSON: object key is not a string")
		}
		if depth == 0 {
			c.field = FieldName(k)
		}
		if bad != "" {
			return c.fail("%s", bad)
		}
		if seen[k] {
			return c.fail("duplicate key %s", strconv.QuoteToASCII(k))
		}
		seen[k] = true
		var v bytes.Buffer
		if err := c.value(&v, depth+1); err != nil {
			return err
		}
		members = append(members, member{k, v.Bytes()})
	}
	if depth == 0 {
		c.field = ""
	}
	if err := c.closing(); err != nil {
		return err
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeString(out, m.key)
		out.WriteByte(':')
		out.Write(m.val)
	}
	out.WriteByte('}')
	return nil
}

// canonNumber spells a JSON number exactly and one way: an integer in
// decimal, anything else as the shortest exact decimal fraction (a JSON
// number always has one). 1e2, 100 and 100.0 are all "100". A numeral, or
// its canonical spelling, longer than MaxNumberLen is refused, the former
// before any arithmetic.
func canonNumber(s string) (string, error) {
	if len(s) > MaxNumberLen {
		return "", fmt.Errorf("numbers must be at most %d characters long", MaxNumberLen)
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		// big.Rat would expand 1e999999999 in memory: bound it first.
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 400 || e < -400 {
			return "", errors.New("number out of range")
		}
		mant, exp = s[:i], e
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", errors.New("malformed number")
	}
	var f string
	if r.IsInt() {
		f = r.Num().String()
	} else {
		places := 0
		if j := strings.IndexByte(mant, '.'); j >= 0 {
			places = len(mant) - j - 1
		}
		places -= exp
		f = r.FloatString(max(places, 0))
		if strings.Contains(f, ".") {
			f = strings.TrimRight(strings.TrimRight(f, "0"), ".")
		}
	}
	if len(f) > MaxNumberLen {
		return "", errors.New("number out of range")
	}
	return f, nil
}

// unpairedSurrogate reports whether the raw bytes of a JSON string hold a
// \u escape of a UTF-16 surrogate that is not part of a pair (the decoder
// would turn it into U+FFFD).
func unpairedSurrogate(raw []byte) bool {
	surrogate := func(i int) (rune, bool) { // the \uXXXX escape at raw[i:]
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(n), err == nil && n >= 0xd800 && n <= 0xdfff
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if r, ok := surrogate(i); ok {
			if r >= 0xdc00 { // a low surrogate with no high one before it
				return true
			}
			if lo, ok := surrogate(i + 6); !ok || lo < 0xdc00 {
				return true
			}
			i += 11 // the pair
			continue
		}
		i++ // the escaped character
	}
	return false
}

// FieldName is a request field's or parameter's name fit to name in an
// error (Error.Param): itself, or quoted in ASCII when it holds something
// unprintable or is not UTF-8; cut to 64 characters.
func FieldName(name string) string {
	for _, r := range name {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			q := strconv.QuoteToASCII(name)
			name = q[1 : len(q)-1]
			break
		}
	}
	if utf8.RuneCountInString(name) > 64 {
		name = string([]rune(name)[:64])
	}
	return name
}

func writeString(out *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // one escaping rule for every spelling of s
	out.Write(b)
}

// NewFingerprint fingerprints a request: operation (the route template),
// its path parameters and its body (which must be valid JSON; see
// CanonicalJSON).
func NewFingerprint(operation string, pathParams map[string]string, body []byte) (Fingerprint, error) {
	canon, err := CanonicalJSON(body)
	if err != nil {
		return Fingerprint{}, err
	}
	fields := map[string]string{}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(canon, &top); err == nil {
		for k, v := range top {
			fields[k] = hashHex(v)
		}
	} else {
		fields[""] = hashHex(canon) // a non-object body is one field
	}
	names := make([]string, 0, len(pathParams))
	for k := range pathParams {
		names = append(names, k)
		fields["path."+k] = hashHex([]byte(pathParams[k]))
	}
	sort.Strings(names)

	h := sha256.New()
	writeField(h, operation)
	for _, k := range names {
		writeField(h, k)
		writeField(h, pathParams[k])
	}
	writeField(h, string(canon))
	return Fingerprint{Hash: h.Sum(nil), Fields: fields}, nil
}

// writeField writes a length-prefixed field, so no two field lists hash
// alike by shifting a separator.
func writeField(w io.Writer, s string) {
	fmt.Fprintf(w, "%d:", len(s))
	io.WriteString(w, s)
}

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// DifferingFields names the fields whose hashes differ between two
// fingerprints (present in one only, or with another value), sorted. Path
// parameters are named as "path.<name>".
func DifferingFields(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
