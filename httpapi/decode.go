package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// readBody reads the request body, already capped by the body limit
// (MaxBodyBytes).
// Errors: body_too_large.
func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var he *echo.HTTPError
		var mbe *http.MaxBytesError
		if errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge || errors.As(err, &mbe) {
			return nil, &orchestrator.Error{Code: orchestrator.CodeBodyTooLarge, Message: "request body exceeds 64 KiB"}
		}
		return nil, &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Message: "could not read the request body", Err: err}
	}
	return b, nil
}

// decodeStrict decodes a JSON object body into dst, rejecting what a
// lenient decoder lets through: unknown fields, duplicate keys, trailing
// data, a non-object body. An empty body is {}. It never touches path
// parameters (unlike Echo's Bind). Errors: validation_failed naming the
// field.
func decodeStrict(raw []byte, dst any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if _, err := orchestrator.CanonicalJSON(raw); err != nil {
		return bodyError(err)
	}
	if t := bytes.TrimSpace(raw); t[0] != '{' {
		return &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Message: "request body must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var ute *json.UnmarshalTypeError
		var fe *fieldError
		switch {
		case errors.As(err, &fe):
			return orchestrator.ParamError(fe.field, "%s", fe.msg)
		case errors.As(err, &ute):
			field := indexPath(ute.Field, reflect.TypeOf(dst))
			if field == "" {
				// Since Go 1.27 encoding/json no longer says which field
				// a custom unmarshaler (strictBool) refused.
				field = strictBoolRefused(raw, reflect.TypeOf(dst))
			}
			return orchestrator.ParamError(field, "%s must be a JSON %s", field, jsonKind(ute.Type.Kind().String()))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			if path := unknownFieldPath(raw, reflect.TypeOf(dst)); path != "" {
				return orchestrator.ParamError(orchestrator.FieldName(path), "unknown field %q", orchestrator.FieldName(path))
			}
			return orchestrator.ParamError(name, "unknown field %q", name)
		}
		return &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Message: "request body is not valid JSON for this endpoint"}
	}
	return nil
}

// bodyError is validation_failed for a body CanonicalJSON refused, naming
// the top-level field the fault is in.
func bodyError(err error) error {
	var je *orchestrator.JSONError
	if errors.As(err, &je) && je.Field != "" {
		return orchestrator.ParamError(je.Field, "%s: %s", je.Field, je.Reason)
	}
	return &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Message: "request body: " + err.Error()}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	}
	return "number"
}

// fieldError is returned by custom unmarshalers to name their field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// minorUnits is an amount in a currency's minor unit: a JSON integer, in
// any spelling (100, 1e2, 100.0), never a fraction and never a string.
type minorUnits struct {
	set   bool
	value int64
}

func (m *minorUnits) UnmarshalJSON(b []byte) error { return m.decode(b, "amount_minor") }

// increaseUnits is minorUnits for the field increase_minor.
type increaseUnits struct{ minorUnits }

func (m *increaseUnits) UnmarshalJSON(b []byte) error { return m.decode(b, "increase_minor") }

// decode reads an amount in minor units from b, errors naming field.
func (m *minorUnits) decode(b []byte, field string) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return &fieldError{field, field + " must be an integer number of minor units, not null"}
	}
	if len(s) == 0 || s[0] == '"' || len(s) > orchestrator.MaxNumberLen || strings.ContainsAny(s, "eE") && len(s) > 24 {
		return &fieldError{field, field + " must be an integer number of minor units"}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return &fieldError{field, field + " must be an integer number of minor units (no fractions: 10.50 EUR is 1050)"}
	}
	m.set, m.value = true, r.Num().Int64()
	return nil
}

// unknownFieldPath returns the path (default.connectors[1].zz) of the
// first member of the JSON document raw that the type t (what it is
// decoded into) has no field for, or "" when there is none or raw is not
// valid JSON: json.Decoder names only the member, not where it is.
func unknownFieldPath(raw []byte, t reflect.Type) string {
	path, _ := walkUnknown(json.NewDecoder(bytes.NewReader(raw)), t, "")
	return path
}

// walkUnknown reads one value from dec, which t decodes, and returns the
// path (under at) of its first unknown member, if any.
func walkUnknown(dec *json.Decoder, t reflect.Type, at string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return "", nil // a scalar
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if p, err := walkUnknown(dec, elem, at+"["+strconv.Itoa(i)+"]"); p != "" || err != nil {
				return p, err
			}
		}
	case '{':
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", err
			}
			key, _ := kt.(string)
			name := key
			if at != "" {
				name = at + "." + key
			}
			var member reflect.Type
			switch {
			case t != nil && t.Kind() == reflect.Struct:
				f, ok := jsonField(t, key)
				if !ok {
					return name, nil
				}
				member = f
			case t != nil && t.Kind() == reflect.Map:
				member = t.Elem()
			}
			if p, err := walkUnknown(dec, member, name); p != "" || err != nil {
				return p, err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return "", err
}

// jsonField returns the type of the field of struct type t that
// encoding/json decodes the member key into (its name, or its tag's,
// matched without regard to case, as encoding/json does).
func jsonField(t reflect.Type, key string) (reflect.Type, bool) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.EqualFold(name, key) {
			return f.Type, true
		}
	}
	return nil, false
}

// indexPath writes encoding/json's path of a type error the way the
// API's other errors name a field: since Go 1.27 it names an element of
// a slice by its index as a segment of its own (connectors.0.weight);
// that becomes connectors[0].weight. Segments are read against t, so a
// map's numeric key stays a key.
func indexPath(path string, t reflect.Type) string {
	if path == "" {
		return ""
	}
	var b strings.Builder
	for i, seg := range strings.Split(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && isDigits(seg):
			b.WriteString("[" + seg + "]")
			t = t.Elem()
			continue
		case t != nil && t.Kind() == reflect.Struct:
			t, _ = jsonField(t, seg)
		case t != nil && t.Kind() == reflect.Map:
			t = t.Elem()
		default:
			t = nil
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// strictBoolRefused names the top-level member of raw that a strictBool
// field of the struct t points to (or is) refuses: present and neither
// true nor false. "" when there is none.
func strictBoolRefused(raw []byte, t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var members map[string]json.RawMessage
	if t == nil || t.Kind() != reflect.Struct || json.Unmarshal(raw, &members) != nil {
		return ""
	}
	for key, v := range members {
		ft, ok := jsonField(t, key)
		if !ok || ft != reflect.TypeFor[strictBool]() {
			continue
		}
		if s := string(bytes.TrimSpace(v)); s != "true" && s != "false" {
			return key
		}
	}
	return ""
}

// strictBool is a JSON boolean that must be true or false when present:
// encoding/json leaves a bool untouched by null, which would take a
// hostile null for false.
type strictBool bool

func (b *strictBool) UnmarshalJSON(data []byte) error {
	switch string(bytes.TrimSpace(data)) {
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		return &json.UnmarshalTypeError{Value: string(bytes.TrimSpace(data)), Type: reflect.TypeFor[bool]()}
	}
	return nil
}
