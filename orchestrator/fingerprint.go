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

// CanonicalJSON returns the canonical form of a JSON document: objects with
// keys sorted, no insignificant white space, numbers spelled as exact
// rationals (1e2, 100 and 100.0 are the same number), strings re-escaped by
// one rule. It rejects what a strict decoder must: duplicate keys, trailing
// data, invalid UTF-8, nesting deeper than 32. An empty body is {}.
func CanonicalJSON(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), nil
	}
	if !utf8.Valid(body) {
		return nil, errors.New("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON document")
	}
	return out.Bytes(), nil
}

func canonValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("JSON nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			type member struct {
				key string
				val []byte
			}
			var members []member
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return fmt.Errorf("malformed JSON: %w", err)
				}
				k, ok := kt.(string)
				if !ok {
					return errors.New("malformed JSON: object key is not a string")
				}
				if seen[k] {
					return fmt.Errorf("duplicate key %q", k)
				}
				seen[k] = true
				var v bytes.Buffer
				if err := canonValue(dec, &v, depth+1); err != nil {
					return err
				}
				members = append(members, member{k, v.Bytes()})
			}
			if _, err := dec.Token(); err != nil { // '}'
				return fmt.Errorf("malformed JSON: %w", err)
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
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := canonValue(dec, out, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // ']'
				return fmt.Errorf("malformed JSON: %w", err)
			}
			out.WriteByte(']')
		default:
			return errors.New("malformed JSON")
		}
	case json.Number:
		n, err := canonNumber(string(t))
		if err != nil {
			return err
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

// canonNumber spells a JSON number exactly and one way: an integer in
// decimal, anything else as the shortest exact decimal fraction (a JSON
// number always has one). 1e2, 100 and 100.0 are all "100".
func canonNumber(s string) (string, error) {
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		// big.Rat would expand 1e999999999 in memory: bound it first.
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 400 || e < -400 {
			return "", fmt.Errorf("number %q out of range", s)
		}
		mant, exp = s[:i], e
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", fmt.Errorf("malformed number %q", s)
	}
	if r.IsInt() {
		return r.Num().String(), nil
	}
	places := 0
	if j := strings.IndexByte(mant, '.'); j >= 0 {
		places = len(mant) - j - 1
	}
	places -= exp
	f := r.FloatString(max(places, 0))
	if strings.Contains(f, ".") {
		f = strings.TrimRight(strings.TrimRight(f, "0"), ".")
	}
	return f, nil
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
