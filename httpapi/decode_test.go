package httpapi

import (
	"reflect"
	"testing"

	"github.com/payorch/payorch/orchestrator"
)

func TestMinorUnits(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{`100`: 100, `1e2`: 100, `100.0`: 100, `1E+2`: 100, `0`: 0, `-5`: -5, `99999999999`: 99999999999} {
		var m minorUnits
		if err := m.UnmarshalJSON([]byte(in)); err != nil || !m.set || m.value != want {
			t.Errorf("%s → %+v, %v; want %d", in, m, err, want)
		}
	}
	for _, in := range []string{`10.5`, `"100"`, `null`, `1e-2`, `99999999999999999999`, `1e100000000`, `true`} {
		var m minorUnits
		if err := m.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s accepted as %d", in, m.value)
		}
	}
}

// FuzzDecodeCreatePayment: the strict decoder never panics, and whatever it
// accepts has a canonical form that fingerprints, so a request can never be
// executed without being claimable.
func FuzzDecodeCreatePayment(f *testing.F) {
	for _, s := range []string{
		`{"amount_minor":1000,"currency":"EUR"}`,
		`{"amount_minor":1e3,"currency":"EUR","metadata":{"a":"b"},"description":"x"}`,
		`{"amount_minor":1000,"amount_minor":1}`,
		`{"amount_minor":10.5}`,
		`{"metadata":{"a":1}}`,
		`{"provider":"fake","payment_method":"pm_card_visa"} x`,
		`[]`, ``, `null`, `{"amount_minor":"1"}`, `{"unknown":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req createPaymentRequest
		if err := decodeStrict(b, &req); err != nil {
			if orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed {
				t.Fatalf("decode error with code %s: %v", orchestrator.ErrorCode(err), err)
			}
			return
		}
		if _, err := orchestrator.NewFingerprint(orchestrator.OpAuthorize, nil, b); err != nil {
			t.Fatalf("accepted body %q does not fingerprint: %v", b, err)
		}
	})
}

// An unknown member is named by its path, however deep (json.Decoder
// names only the member).
func TestDecodeStrictNamesTheUnknownMembersPath(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"colour":"red"}`: "colour",
		`{"default":{"strategy":"priority","connectors":[{"name":"a"},{"name":"b","zz":1}]}}`: "default.connectors[1].zz",
		`{"Default":{"Strategy":"priority","zz":1}}`:                                          "Default.zz",
		`{"rules":[{"match":{"metadata":{"x":"y"},"currencies":["EUR"]},"zz":[1,{"a":2}]}]}`:  "rules[0].zz",
		`{"rules":[{},{"match":{"amount_min":1,"colour":{}}}]}`:                               "rules[1].match.colour",
	} {
		var rules orchestrator.RoutingRules
		err := decodeStrict([]byte(body), &rules)
		if e, ok := err.(*orchestrator.Error); !ok || e.Code != orchestrator.CodeValidationFailed || e.Param != want {
			t.Errorf("%s: %v, want validation_failed on %q", body, err, want)
		}
	}
}

// FuzzDecodeRoutingRules: the strict decoder never panics on a routing
// body, and refuses only with validation_failed.
func FuzzDecodeRoutingRules(f *testing.F) {
	for _, s := range []string{
		`{"rules":[{"name":"r","match":{"currencies":["EUR"],"amount_min":1},"connectors":{"strategy":"priority","connectors":[{"name":"a"}]}}],"default":{"strategy":"volume_split","connectors":[{"name":"a","weight":1}]}}`,
		`{"default":{"connectors":[{"name":"a","zz":1}]}}`, `{"rules":[[]]}`, `{"rules":[{"match":{"metadata":{"k":1}}}]}`,
		`{"rules":{"a":1},"zz":[1]}`, `[]`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var rules orchestrator.RoutingRules
		if err := decodeStrict(b, &rules); err != nil && orchestrator.ErrorCode(err) != orchestrator.CodeValidationFailed {
			t.Fatalf("decode error with code %s: %v", orchestrator.ErrorCode(err), err)
		}
	})
}

// TestIndexPath: encoding/json's type-error paths (Go 1.27 names a slice
// element as a segment of its own) become the API's field names; a map's
// numeric key stays a key.
func TestIndexPath(t *testing.T) {
	type conn struct {
		Weight int `json:"weight"`
	}
	type choice struct {
		Connectors []conn `json:"connectors"`
	}
	type body struct {
		Default  choice            `json:"default"`
		Metadata map[string]string `json:"metadata"`
	}
	typ := reflect.TypeFor[*body]()
	for in, want := range map[string]string{
		"default.connectors.0.weight":  "default.connectors[0].weight",
		"default.connectors.12.weight": "default.connectors[12].weight",
		"default.connectors.weight":    "default.connectors.weight", // Go 1.26's spelling
		"metadata.0":                   "metadata.0",
		"":                             "",
	} {
		if got := indexPath(in, typ); got != want {
			t.Errorf("indexPath(%q) = %q, want %q", in, got, want)
		}
	}
}
