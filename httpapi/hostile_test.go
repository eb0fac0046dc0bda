package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// This file feeds every route of the API and of the console, through every
// input it has (path and query parameters, JSON body fields, form fields,
// the whole body, the Idempotency-Key, Authorization and session cookie),
// values that are not valid for it: NUL, invalid UTF-8, unpaired
// surrogates, huge, negative and over-long numbers, out-of-range dates
// and times, very long strings, deep nesting, wrong types. Whatever comes
// in, the server answers without a 5xx, every API 4xx is problem+json
// (validation_failed naming the input), every hostile POST is refused, and
// nothing is written. The values are a table plus a few byte strings from
// a fixed seed, so a failure repeats.

// kind is what a body or form field holds, which decides the values that
// are certainly wrong for it.
type kind int

const (
	// text is free text: wrong only when unstorable (NUL, invalid UTF-8),
	// too long, or not a string.
	text kind = iota
	// token is an id, a code, a name or a date: any odd value is wrong.
	token
	// integer is an amount in minor units.
	integer
	// object is metadata: string keys to string values.
	object
	// lenient is a form field its handler tolerates when odd (it only
	// shapes a redirect): wrong only when unstorable.
	lenient
	// array is a list of objects (routing rules): wrong when not an
	// array, or an array of anything but valid objects.
	array
	// boolean is true or false: anything else is wrong.
	boolean
)

// routeSpec says how to make a valid request to a route, and which inputs
// it reads.
type routeSpec struct {
	// roles are the API key roles (API) or console session roles
	// (console) to send it as; none means unauthenticated.
	roles []orchestrator.Role
	// path holds a valid value of each path parameter.
	path map[string]string
	// query names the query parameters the route reads; baseQuery holds
	// valid values of those a valid request needs (a probe replaces one).
	query     []string
	baseQuery map[string]string
	// accept lists extra Accept headers to try the query with.
	accept []string
	// body holds the members of a valid JSON body (raw JSON values); fields
	// says what each field the route reads holds.
	body   map[string]string
	fields map[string]kind
	// form holds valid form fields of a console POST, besides csrf_token;
	// formKinds what each holds (csrf_token included).
	form      map[string]string
	formKinds map[string]kind
	// csrf: the form carries the session's CSRF token; signin: the
	// sign-in form's double-submit token.
	csrf, signin bool
}

// probe is one hostile request.
type probe struct {
	what    string
	method  string
	path    string // escaped
	query   string // raw
	header  map[string]string
	body    []byte
	console bool
	// input names the mutated parameter or top-level field, which a
	// validation_failed problem must name; "" when it is not one input.
	input string
}

// The hostile values.
var (
	// unstorable strings: PostgreSQL keeps neither NUL nor invalid UTF-8.
	unstorable = []string{"\x00", "a\x00b", "\x00" + strings.Repeat("x", 100), "\xff", "\xc3\x28", "\xed\xa0\x80", "ok\xfe"}
	// huge is a 63 KB numeral: it fits in a body with room to spare.
	huge = strings.Repeat("9", 63<<10)
	// odd strings are wrong for any token and odd for any parameter.
	odd = []string{
		"-300000000000", "300000000000", "9223372036854775808", "-9223372036854775809", "0", "-1", "-0",
		"1e400", "1.5", "0x10", huge, "0000-01-01", "99999-12-31", "9999-12-31", "2020-02-30",
		"0000-01-01T00:00:00Z", "99999-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "-0001-01-01T00:00:00Z",
		"1969-12-31T23:59:59Z", strings.Repeat("x", 5000), " ", "\t", "' OR '1'='1", "%", "../../etc/passwd",
		"true", "null", "[]", "{}", "é", "\u202e", "pay_" + strings.Repeat("g", 32), "pay_" + strings.Repeat("a", 40),
	}
	// rawSegments are path segments and query values sent as they are.
	rawSegments = []string{"%ff", "%FF", "%2F", "%2e%2e", "%C0%80", "%00x", "%ed%a0%80"}
	rawQuery    = []string{"%zz", "%", "%ff%fe", "%00"}
	// numbers are wrong for an amount in minor units.
	numbers = []string{"-300000000000", "0", "-1", "-0", "1e400", "1E+400", "1e-400", "-1e-5", "1e19",
		"9223372036854775808", "-9223372036854775809", "100000000000", "1.5", "1" + strings.Repeat("0", 40), huge}
	// wrongTypes are wrong for a string field.
	wrongTypes = []string{"1", "-300000000000", "1e400", huge, "true", "false", "[]", "{}", `["x"]`, `{"a":"b"}`,
		deepArray(5000), deepObject(40)}
)

func init() {
	// A few arbitrary byte strings, each made unstorable by one NUL or
	// 0xff somewhere, from a fixed seed.
	r := rand.New(rand.NewPCG(12, 2024))
	for i := range 6 {
		b := make([]byte, 1+r.IntN(60))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		b[r.IntN(len(b))] = []byte{0x00, 0xff}[i%2]
		unstorable = append(unstorable, string(b))
	}
}

func deepArray(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func deepObject(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }

// jsonString spells s as a JSON string, bytes as they are: NUL becomes
// \u0000, invalid UTF-8 stays invalid.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// jsonValues are raw JSON values certainly wrong for a field of kind k.
func jsonValues(k kind) []string {
	var out []string
	strs := func() {
		for _, u := range unstorable {
			out = append(out, jsonString(u))
		}
		out = append(out, `"\ud800"`, `"x\udc00"`, `"\udc00\ud800"`, `"\ud800\u0041"`, jsonString(strings.Repeat("x", 60000)))
	}
	switch k {
	case text:
		strs()
		out = append(out, wrongTypes...)
	case token:
		strs()
		out = append(out, wrongTypes...)
		for _, o := range odd {
			if utf8.ValidString(o) && !strings.ContainsRune(o, 0) {
				out = append(out, jsonString(o))
			}
		}
	case integer:
		out = append(out, numbers...)
		out = append(out, `"100"`, "true", "null", "[]", "{}", `"\u0000"`, deepArray(5000), deepObject(40))
	case array:
		strs()
		for _, w := range wrongTypes {
			if w != "[]" {
				out = append(out, w)
			}
		}
		out = append(out, "[null]", "[{}]", "[1]", `[{"zz":1}]`, `[{"name":"\u0000"}]`, "[["+deepArray(40)+"]]")
	case boolean:
		strs()
		out = append(out, `"true"`, `"false"`, "1", "0", "null", "[]", "{}", "[true]", huge, deepArray(5000), deepObject(40))
	case object:
		out = append(out, `{"\u0000":"v"}`, `{"k":"\u0000"}`, `{"\ud800":"v"}`, `{"k":"\udfff"}`, "{\"\xff\":\"v\"}",
			"{\"k\":\"\xc3\x28\"}", `{"k":1}`, `{"k":true}`, `{"k":{"a":"b"}}`, `{"k":[]}`, `{"k":`+deepArray(5000)+`}`,
			`{"k":`+huge+`}`, `{"`+strings.Repeat("k", 41)+`":"v"}`, `{"k":"`+strings.Repeat("v", 501)+`"}`,
			manyKeys(51), "[]", `"s"`, "1", "true", deepObject(40))
	}
	return out
}

func manyKeys(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// formValues are form values certainly wrong for a field of kind k.
func formValues(k kind) []string {
	switch k {
	case text:
		return append(slices.Clone(unstorable), strings.Repeat("x", 60000))
	case token:
		return append(slices.Clone(unstorable), odd...)
	}
	return unstorable
}

// wholeBodies are request bodies wrong for every keyed POST.
var wholeBodies = []string{
	`"\u0000"`, "[]", "null", "1", "true", `"x"`, "{", "}", `{"a":1}}`, deepArray(10000), deepObject(5000),
	"{\"a\":\"\xff\"}", "{\"a\":\"\x00\"}", huge, "\xef\xbb\xbf{}", "{}\x00", `{"":1}`,
}

func joinBody(members map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(members)) {
		parts = append(parts, jsonString(k)+":"+members[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func encodeForm(fields map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(fields[k]))
	}
	return strings.Join(parts, "&")
}

// hostileEnv is a server with a payment of each state and a run with an
// open discrepancy, console sessions, and a way to see whether anything
// was written.
type hostileEnv struct {
	*env
	sessions map[orchestrator.Role]string // console session tokens
	csrf     map[orchestrator.Role]string
	client   *http.Client
	keyN     int
}

// snapshot is every table's row count and a digest of its rows (api_keys:
// count only, since reads touch last_used_at).
func (h *hostileEnv) snapshot(t *testing.T) string {
	t.Helper()
	var parts []string
	for _, table := range []string{"payments", "payment_operations", "payment_events", "payment_attempts", "events", "idempotency_keys",
		"webhook_endpoints", "webhook_deliveries", "webhook_delivery_attempts",
		"routing_versions", "reconciliation_runs", "reconciliation_discrepancies", "console_sessions", "tenants",
		"payment_methods", "payment_method_keys", "connector_bank_accounts", "bank_statements", "bank_statement_lines"} {
		parts = append(parts, fmt.Sprintf(`SELECT '%[1]s', count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM %[1]s t`, table))
	}
	parts = append(parts, `SELECT 'api_keys', count(*), '' FROM api_keys`)
	rows, err := h.pool.Query(context.Background(), strings.Join(parts, " UNION ALL ")+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name, digest string
		var n int64
		if err := rows.Scan(&name, &n, &digest); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%d:%s ", name, n, digest)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// routeSpecs is one spec per route of the API and the console.
func (h *hostileEnv) routeSpecs(authorized, captured payment, run runJSON, discrepancy int64, endpoint, event, method string) map[string]routeSpec {
	merchant, support, finance, admin := orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance, orchestrator.RoleAdmin
	as := func(r ...orchestrator.Role) []orchestrator.Role { return r }
	runID, discID, tenantID := fmt.Sprint(run.ID), fmt.Sprint(discrepancy), fmt.Sprint(h.tenant)
	today := time.Now().UTC().Format(time.DateOnly)
	return map[string]routeSpec{
		"GET /healthz":      {},
		"GET /readyz":       {},
		"GET /openapi.yaml": {},
		"GET /v1/me":        {roles: as(support)},
		"GET /v1/tenants":   {roles: as(admin)},
		"GET /v1/api_keys":  {roles: as(admin), query: []string{"tenant_id"}},
		"POST /v1/payments": {roles: as(merchant),
			body: map[string]string{"amount_minor": "1000", "currency": `"EUR"`, "description": `"d"`, "metadata": `{"k":"v"}`},
			fields: map[string]kind{"amount_minor": integer, "currency": token, "provider": token, "payment_method": token,
				"description": text, "metadata": object, "on_expiry": token, "request_extended_authorization": boolean,
				"return_url": token, "request_incremental_authorization": boolean, "request_multicapture": boolean,
				"request_overcapture": boolean}},
		"POST /v1/payments/:id/capture": {roles: as(merchant), path: map[string]string{"id": authorized.ID},
			body:   map[string]string{"amount_minor": "100"},
			fields: map[string]kind{"amount_minor": integer, "final_capture": boolean}},
		"POST /v1/payments/:id/increment": {roles: as(merchant), path: map[string]string{"id": authorized.ID},
			body:   map[string]string{"amount_minor": "2000"},
			fields: map[string]kind{"amount_minor": integer, "increase_minor": integer}},
		"POST /v1/payments/:id/cancel": {roles: as(merchant), path: map[string]string{"id": authorized.ID},
			body: map[string]string{}},
		"POST /v1/payments/:id/extend": {roles: as(merchant), path: map[string]string{"id": authorized.ID},
			body: map[string]string{}},
		"POST /v1/payments/:id/confirm": {roles: as(merchant), path: map[string]string{"id": authorized.ID},
			body: map[string]string{}},
		"POST /v1/payments/:id/refunds": {roles: as(merchant), path: map[string]string{"id": captured.ID},
			body: map[string]string{"amount_minor": "100"}, fields: map[string]kind{"amount_minor": integer}},
		"GET /v1/payments": {roles: as(merchant, support),
			query: []string{"idempotency_key", "tenant_id", "status", "created_gte", "created_lt", "expiring_before", "limit",
				"starting_after"}},
		"GET /v1/payments/:id":            {roles: as(support), path: map[string]string{"id": authorized.ID}},
		"GET /v1/payments/:id/events":     {roles: as(support), path: map[string]string{"id": authorized.ID}},
		"GET /v1/payments/:id/attempts":   {roles: as(support), path: map[string]string{"id": authorized.ID}},
		"GET /v1/payments/:id/operations": {roles: as(support), path: map[string]string{"id": authorized.ID}},
		"GET /v1/events":                  {roles: as(support, finance), query: []string{"tenant_id", "type", "payment_id", "delivered", "limit", "starting_after"}},
		"GET /v1/events/:id":              {roles: as(support, finance), path: map[string]string{"id": "evt_00000000000000000000000000000000"}},
		"GET /v1/events/:id/deliveries":   {roles: as(merchant, support), path: map[string]string{"id": event}},
		"POST /v1/events/:id/redeliver":   {roles: as(merchant), path: map[string]string{"id": event}, body: map[string]string{}},
		"POST /v1/webhook_endpoints": {roles: as(merchant, finance),
			body:   map[string]string{"url": `"https://example.com/hooks"`, "event_types": `["*"]`, "description": `"d"`},
			fields: map[string]kind{"url": token, "event_types": array, "description": text}},
		"GET /v1/webhook_endpoints":     {roles: as(merchant, finance)},
		"GET /v1/webhook_endpoints/:id": {roles: as(merchant), path: map[string]string{"id": endpoint}},
		"POST /v1/webhook_endpoints/:id": {roles: as(merchant), path: map[string]string{"id": endpoint},
			body: map[string]string{"enabled": "false"}, fields: map[string]kind{"enabled": boolean}},
		"DELETE /v1/webhook_endpoints/:id": {roles: as(merchant), path: map[string]string{"id": endpoint}},
		"POST /v1/webhook_endpoints/:id/rotate_secret": {roles: as(merchant), path: map[string]string{"id": endpoint},
			body: map[string]string{}},
		"POST /v1/reconciliation/runs": {roles: as(finance),
			body:   map[string]string{"provider": `"fake"`, "date": `"` + today + `"`},
			fields: map[string]kind{"provider": token, "date": token}},
		"GET /v1/reconciliation/runs":     {roles: as(finance), query: []string{"provider", "date", "limit", "starting_after"}},
		"GET /v1/reconciliation/runs/:id": {roles: as(finance), path: map[string]string{"id": runID}},
		"GET /v1/reconciliation/runs/:id/discrepancies": {roles: as(finance), path: map[string]string{"id": runID},
			query: []string{"type", "status", "change", "limit", "starting_after"}, accept: []string{"text/csv"}},
		"GET /v1/reconciliation/summary": {roles: as(finance), query: []string{"provider", "business_date"},
			baseQuery: map[string]string{"provider": "fake", "business_date": today}},
		// A payout the fake does not know: each page asks the fake.
		"GET /v1/reconciliation/payouts/:connector/:payout_id": {roles: as(finance),
			path: map[string]string{"connector": "fake", "payout_id": "fpo_hostile"}, query: []string{"limit", "starting_after"}},
		"POST /v1/reconciliation/discrepancies/:id/resolve": {roles: as(finance), path: map[string]string{"id": discID},
			body: map[string]string{"note": `"checked"`}, fields: map[string]kind{"note": text}},
		"GET /v1/tenants/:id/routing": {roles: as(admin), path: map[string]string{"id": tenantID}},
		"PUT /v1/tenants/:id/routing": {roles: as(admin), path: map[string]string{"id": tenantID},
			body:   map[string]string{"default": `{"strategy":"priority","connectors":[{"name":"fake"}]}`},
			fields: map[string]kind{"rules": array, "default": object}},
		"GET /v1/tenants/:id/routing/versions": {roles: as(admin), path: map[string]string{"id": tenantID},
			query: []string{"limit", "starting_after"}},
		"GET /v1/connectors":            {roles: as(admin, support)},
		"GET /v1/connectors/:name/fees": {roles: as(admin), path: map[string]string{"name": "fake"}},
		"PUT /v1/connectors/:name/fees": {roles: as(admin), path: map[string]string{"name": "fake"},
			body:   map[string]string{"currencies": `{"EUR":{"percent_bp":140,"fixed_minor":25}}`, "tolerance_minor": "0"},
			fields: map[string]kind{"currencies": object, "default": object}},
		"GET /v1/connectors/:name/fees/versions": {roles: as(admin), path: map[string]string{"name": "fake"},
			query: []string{"limit", "starting_after"}},
		// An account id is free text to its bank (any odd token may be one):
		// wrong only when unstorable, too long or not a string.
		"GET /v1/connectors/:name/bank_account": {roles: as(finance), path: map[string]string{"name": "fake"}},
		"PUT /v1/connectors/:name/bank_account": {roles: as(admin), path: map[string]string{"name": "fake"},
			body:   map[string]string{"account": `"DE89370400440532013000"`, "match_window_days": "3"},
			fields: map[string]kind{"account": text, "match_window_days": integer}},
		// A statement upload's body is XML or CSV (bankstatement_test.go
		// feeds it bad files); the JSON probes here are refused by type.
		"POST /v1/bank_statements": {roles: as(finance), query: []string{"account", "statement_id"}},
		"GET /v1/bank_statements":  {roles: as(finance), query: []string{"account", "limit", "starting_after"}},
		"GET /v1/bank_statements/:id": {roles: as(finance), path: map[string]string{"id": "1"},
			query: []string{"limit", "starting_after"}},

		// Providers' webhooks: unauthenticated; every probe lacks a
		// valid signature (the connector has no webhook secret here).
		"POST /webhooks/:connector": {path: map[string]string{"connector": "fake"}, body: map[string]string{}},

		"POST /v1/payment_methods": {roles: as(merchant),
			body: map[string]string{"type": `"card"`, "card": `{"number":"4242424242424242","exp_month":12,"exp_year":2040}`,
				"metadata": `{"k":"v"}`},
			fields: map[string]kind{"type": token, "card": object, "billing_details": object, "metadata": object}},
		"OPTIONS /v1/payment_methods": {},
		"GET /v1/payment_methods": {roles: as(merchant),
			query: []string{"tenant_id", "fingerprint", "created_gte", "created_lt", "limit", "starting_after"}},
		"GET /v1/payment_methods/:id":         {roles: as(merchant), path: map[string]string{"id": method}, query: []string{"tenant_id"}},
		"DELETE /v1/payment_methods/:id":      {roles: as(merchant), path: map[string]string{"id": method}},
		"GET /v1/tenants/:id/browser_origins": {roles: as(admin), path: map[string]string{"id": tenantID}},
		"PUT /v1/tenants/:id/browser_origins": {roles: as(admin), path: map[string]string{"id": tenantID},
			body: map[string]string{"origins": `["https://shop.example"]`}, fields: map[string]kind{"origins": array}},
		"GET /card_form": {query: []string{"key", "origin", "return_url"}},

		"GET /console":                    {},
		"GET /console/static/console.css": {},
		"GET /console/signin":             {query: []string{"signed_out"}},
		"POST /console/signin": {signin: true, form: map[string]string{"api_key": h.keys[support]},
			formKinds: map[string]kind{"api_key": token, "csrf_token": token}},
		"GET /console/":             {roles: as(finance)},
		"POST /console/signout":     {roles: as(finance), csrf: true, formKinds: map[string]kind{"csrf_token": token}},
		"GET /console/search":       {roles: as(support), query: []string{"q", "tenant"}},
		"GET /console/payments/:id": {roles: as(support), path: map[string]string{"id": authorized.ID}},
		"GET /console/holds":        {roles: as(support, merchant)},
		"GET /console/runs":         {roles: as(finance), query: []string{"before"}},
		"GET /console/connectors":   {roles: as(support)},
		"GET /console/tenants":      {roles: as(admin)},
		"GET /console/tenants/:id":  {roles: as(admin), path: map[string]string{"id": tenantID}},
		"GET /console/runs/:id":     {roles: as(finance), path: map[string]string{"id": runID}, query: []string{"category", "state", "change", "resolved"}},
		"GET /console/payouts/:connector/:payout_id": {roles: as(finance),
			path: map[string]string{"connector": "fake", "payout_id": "fpo_hostile"}, query: []string{"limit", "after"}},
		"GET /console/runs/:id/discrepancies.csv": {roles: as(finance), path: map[string]string{"id": runID},
			query: []string{"category", "state", "change"}},
		"POST /console/discrepancies/:id/resolve": {roles: as(finance), path: map[string]string{"id": discID}, csrf: true,
			form:      map[string]string{"note": "checked", "category": "amount_mismatch", "state": "open", "change": "new"},
			formKinds: map[string]kind{"csrf_token": token, "note": text, "category": lenient, "state": lenient, "change": lenient}},
	}
}

// withQuery is the raw query of base's parameters with name set to raw
// (already escaped; name "" sets none).
func withQuery(base map[string]string, name, raw string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(base)) {
		if k != name {
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(base[k]))
		}
	}
	if name != "" {
		parts = append(parts, name+"="+raw)
	}
	return strings.Join(parts, "&")
}

// probes are the hostile requests for one route: its valid request with
// one input replaced at a time.
func (h *hostileEnv) probes(route string, spec routeSpec) []probe {
	method, tmpl, _ := strings.Cut(route, " ")
	console := strings.HasPrefix(tmpl, "/console")
	post := method == http.MethodPost
	// A PUT (routing) writes, and reads a JSON body, like a POST, but
	// takes no Idempotency-Key.
	put := method == http.MethodPut
	roles := spec.roles
	if len(roles) == 0 {
		roles = []orchestrator.Role{""}
	}
	var out []probe
	for _, role := range roles {
		buildPath := func(name, segment string) string {
			p := tmpl
			for pn, pv := range spec.path {
				v := url.PathEscape(pv)
				if pn == name {
					v = segment
				}
				p = strings.Replace(p, ":"+pn, v, 1)
			}
			return p
		}
		form := map[string]string{}
		for k, v := range spec.form {
			form[k] = v
		}
		header := map[string]string{}
		var cookies []string
		switch {
		case console && spec.signin:
			cookies = append(cookies, "payorch_signin=hostile-signin-token")
			form["csrf_token"] = "hostile-signin-token"
		case console && role != "":
			cookies = append(cookies, "payorch_session="+h.sessions[role])
			if spec.csrf {
				form["csrf_token"] = h.csrf[role]
			}
		case role != "":
			header["Authorization"] = "Bearer " + h.keys[role]
		}
		if len(cookies) > 0 {
			header["Cookie"] = strings.Join(cookies, "; ")
		}
		var body []byte
		switch {
		case post && console:
			header["Content-Type"] = "application/x-www-form-urlencoded"
			body = []byte(encodeForm(form))
		case post || put:
			header["Content-Type"] = "application/json"
			body = []byte(joinBody(spec.body))
		}
		base := probe{method: method, path: buildPath("", ""), query: withQuery(spec.baseQuery, "", ""), header: header,
			body: body, console: console}
		add := func(what, input string, mutate func(p *probe)) {
			p := base
			p.header = map[string]string{}
			for k, v := range base.header {
				p.header[k] = v
			}
			p.what, p.input = fmt.Sprintf("%s as %q: %s", route, role, what), input
			mutate(&p)
			out = append(out, p)
		}

		// Path parameters.
		for _, name := range slices.Sorted(maps.Keys(spec.path)) {
			var segs []string
			for _, v := range append(slices.Clone(unstorable), odd...) {
				if n, err := strconv.ParseInt(v, 10, 64); post && err == nil && n > 0 {
					// A well-formed id of nothing is not bad input: a keyed
					// POST claims its key, then answers not_found.
					continue
				}
				segs = append(segs, url.PathEscape(v))
			}
			for _, seg := range append(segs, rawSegments...) {
				add(fmt.Sprintf("path %s=%.40q", name, seg), name, func(p *probe) { p.path = buildPath(name, seg) })
			}
		}
		// Query parameters: on a POST or PUT only unstorable values are
		// surely wrong (the route reads no query).
		values := unstorable
		if !post && !put {
			values = append(slices.Clone(unstorable), odd...)
		}
		accepts := append([]string{""}, spec.accept...)
		for _, name := range append(slices.Clone(spec.query), "zz") {
			for _, accept := range accepts {
				var raws []string
				for _, v := range values {
					raws = append(raws, url.QueryEscape(v))
				}
				for _, raw := range append(raws, rawQuery...) {
					add(fmt.Sprintf("query %s=%.40q accept %q", name, raw, accept), name, func(p *probe) {
						p.query = withQuery(spec.baseQuery, name, raw)
						if accept != "" {
							p.header["Accept"] = accept
						}
					})
				}
			}
		}
		for _, u := range unstorable {
			add(fmt.Sprintf("query name %.40q", u), "", func(p *probe) { p.query = withQuery(spec.baseQuery, url.QueryEscape(u), "1") })
		}

		if (post || put) && !console {
			// JSON fields, one at a time.
			for _, name := range slices.Sorted(maps.Keys(spec.fields)) {
				for _, v := range jsonValues(spec.fields[name]) {
					members := map[string]string{}
					for mk, mv := range spec.body {
						members[mk] = mv
					}
					members[name] = v
					add(fmt.Sprintf("field %s=%.60q", name, v), name, func(p *probe) { p.body = []byte(joinBody(members)) })
				}
			}
			// Extra members: unknown, unstorable names, duplicates.
			valid := joinBody(spec.body)
			for _, extra := range []string{`"\u0000":1`, `"zz":1`, `"a\ud800":1`, "\"\xff\":1", `"amount_minor":1,"amount_minor":1`} {
				b := "{" + extra + "," + strings.TrimPrefix(valid, "{")
				if valid == "{}" {
					b = "{" + extra + "}"
				}
				add(fmt.Sprintf("member %.40q", extra), "", func(p *probe) { p.body = []byte(b) })
			}
			for _, mk := range slices.Sorted(maps.Keys(spec.body)) {
				dup := strings.TrimSuffix(valid, "}") + "," + jsonString(mk) + ":" + spec.body[mk] + "}"
				add("duplicate "+mk, "", func(p *probe) { p.body = []byte(dup) })
			}
			// Whole bodies.
			for _, b := range append(slices.Clone(wholeBodies), valid+" x", valid+strings.Repeat(" ", httpapi.MaxBodyBytes)) {
				add(fmt.Sprintf("body %.40q (%d bytes)", b, len(b)), "", func(p *probe) { p.body = []byte(b) })
			}
			// Headers.
			for _, k := range []string{"", "\xff", "é", strings.Repeat("k", 256), "a\tb", " "} {
				if post {
					add(fmt.Sprintf("Idempotency-Key %.40q", k), "", func(p *probe) { p.header["Idempotency-Key"] = k })
				}
			}
			if post {
				add("no Idempotency-Key", "", func(p *probe) { p.header["Idempotency-Key"] = "-" })
			}
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/json; charset=\xff"} {
				add("Content-Type "+ct, "", func(p *probe) { p.header["Content-Type"] = ct })
			}
		}
		if post && console {
			for _, name := range slices.Sorted(maps.Keys(spec.formKinds)) {
				for _, v := range formValues(spec.formKinds[name]) {
					f := map[string]string{}
					for fk, fv := range form {
						f[fk] = fv
					}
					f[name] = v
					add(fmt.Sprintf("form %s=%.40q", name, v), name, func(p *probe) { p.body = []byte(encodeForm(f)) })
				}
			}
			for _, tail := range []string{"&note=%zz", "&%zz=1", "&zz=%00", "&zz=%ff"} {
				add("form tail "+tail, "", func(p *probe) { p.body = append(slices.Clone(base.body), tail...) })
			}
		}
		if strings.HasPrefix(tmpl, "/v1/") {
			for _, a := range []string{"Bearer \xff", "Bearer pk_" + strings.Repeat("x", 5000), "Bearer " + strings.Repeat("é", 64), "Bearer"} {
				add(fmt.Sprintf("Authorization %.40q", a), "", func(p *probe) { p.header["Authorization"] = a })
			}
		}
		if console && role != "" {
			for _, s := range []string{"\xff", strings.Repeat("x", 5000), "%00", "' OR 1=1"} {
				add(fmt.Sprintf("session %.40q", s), "", func(p *probe) { p.header["Cookie"] = "payorch_session=" + s })
			}
		}
	}
	return out
}

func (h *hostileEnv) send(t *testing.T, p probe) (*http.Response, []byte) {
	t.Helper()
	u := h.url + p.path
	if p.query != "" {
		u += "?" + p.query
	}
	req, err := http.NewRequest(p.method, u, bytes.NewReader(p.body))
	if err != nil {
		t.Fatalf("%s: %v", p.what, err)
	}
	for k, v := range p.header {
		if k == "Idempotency-Key" && v == "-" {
			continue
		}
		req.Header.Set(k, v)
	}
	if p.method == http.MethodPost && !p.console {
		if _, ok := p.header["Idempotency-Key"]; !ok {
			h.keyN++
			req.Header.Set("Idempotency-Key", fmt.Sprintf("hostile-%d", h.keyN))
		}
	}
	res, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", p.what, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: %v", p.what, err)
	}
	return res, b
}

// check asserts what every answer to a hostile request must be.
func (h *hostileEnv) check(t *testing.T, p probe, res *http.Response, body []byte) {
	t.Helper()
	ct := res.Header.Get("Content-Type")
	switch {
	case res.StatusCode >= 500:
		t.Errorf("%s: %d %.300s", p.what, res.StatusCode, body)
		return
	case (p.method == http.MethodPost || p.method == http.MethodPut) && res.StatusCode < 400:
		t.Errorf("%s: a hostile %s was accepted: %d %.300s", p.what, p.method, res.StatusCode, body)
		return
	case res.StatusCode < 400:
		return
	case p.console:
		if !strings.HasPrefix(ct, "text/html") {
			t.Errorf("%s: console error page as %q", p.what, ct)
		}
		return
	case strings.HasPrefix(p.path, "/card_form") && strings.HasPrefix(ct, "text/html"):
		return // the card form's refusals are pages (the parameter checks' are problems)
	}
	if ct != "application/problem+json" {
		t.Errorf("%s: %d as %q, want application/problem+json: %.300s", p.what, res.StatusCode, ct, body)
		return
	}
	var prob httpapi.Problem
	if err := json.Unmarshal(body, &prob); err != nil || prob.Code == "" || prob.Status != res.StatusCode {
		t.Errorf("%s: problem body %.300s: %v", p.what, body, err)
		return
	}
	if prob.Code == string(orchestrator.CodeValidationFailed) && p.input != "" &&
		prob.Param != p.input && !strings.HasPrefix(prob.Param, p.input+".") && !strings.HasPrefix(prob.Param, p.input+"[") {
		t.Errorf("%s: validation_failed names param %q, want %q: %.300s", p.what, prob.Param, p.input, body)
	}
}

func TestHostileInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := newVaultEnv(t, httpapi.Config{ConsoleSignInLimit: -1}, "https://shop.example")
	h := &hostileEnv{env: e, sessions: map[orchestrator.Role]string{}, csrf: map[orchestrator.Role]string{},
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}

	// Fixtures: an authorized and a captured payment, a run with one open
	// discrepancy, a console session for support, finance and admin.
	authorized, run := consoleFixture(t, e)
	// A webhook endpoint, so the captured payment's events have deliveries.
	ep, err := e.hooks.CreateWebhookEndpoint(context.Background(), e.tenant, webhooks.WebhookEndpointInput{
		URL: "https://example.com/hooks", EventTypes: []string{"*"}}, "key_hostile")
	if err != nil {
		t.Fatal(err)
	}
	captured := e.authorizeOK(t, "hostile-captured", 5000)
	if res, b := e.post(t, "/v1/payments/"+captured.ID+"/capture", e.keys[orchestrator.RoleMerchant], "hostile-capture", ""); res.StatusCode != 200 {
		t.Fatalf("capture: %d %s", res.StatusCode, b)
	}
	var discrepancy int64
	if err := e.pool.QueryRow(context.Background(),
		`SELECT id FROM reconciliation_discrepancies WHERE run_id = $1`, run.ID).Scan(&discrepancy); err != nil {
		t.Fatal(err)
	}
	for role, page := range map[orchestrator.Role]string{orchestrator.RoleSupport: "/console/search", orchestrator.RoleFinance: "/console/runs",
		orchestrator.RoleAdmin: "/console/tenants"} {
		cc := newConsoleClient(t, e.url)
		cc.signIn(e.keys[role])
		base, _ := url.Parse(e.url + "/console/")
		for _, c := range cc.c.Jar.(*cookiejar.Jar).Cookies(base) {
			if c.Name == "payorch_session" {
				h.sessions[role] = c.Value
			}
		}
		_, body := cc.get(page)
		h.csrf[role] = csrfOf(t, body)
	}

	// An event delivered to the endpoint.
	evs, _, err := e.svc.ListEvents(context.Background(), orchestrator.Scope{TenantID: e.tenant},
		orchestrator.EventFilter{PaymentID: captured.ID, Type: "payment.captured"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("captured event: %v %v", evs, err)
	}

	// A vaulted card.
	res, b := e.createMethod(t, e.keys[orchestrator.RoleMerchant], "hostile-method", cardBody(visa, ""), nil)
	if res.StatusCode != 201 {
		t.Fatalf("payment method: %d %s", res.StatusCode, b)
	}
	specs := h.routeSpecs(authorized, captured, run, discrepancy, ep.ID, evs[0].ID, decode[paymentMethod](t, b).ID)
	// Every route has a spec and every spec a route, so a new route is
	// not left out.
	var routes []string
	for _, r := range append(e.srv.Echo().Routes(), httpapi.ConsoleRoutes(e.srv)...) {
		if r.Method == echo.RouteNotFound || strings.HasPrefix(r.Path, "/test/") {
			continue
		}
		routes = append(routes, r.Method+" "+r.Path)
	}
	for _, r := range routes {
		if _, ok := specs[r]; !ok {
			t.Errorf("route %s has no hostile-input spec: add one to routeSpecs", r)
		}
	}
	for r := range specs {
		if !slices.Contains(routes, r) {
			t.Errorf("spec for %s, which is no route", r)
		}
	}
	sort.Strings(routes)

	before := h.snapshot(t)
	start, n := time.Now(), 0
	for _, route := range routes {
		for _, p := range h.probes(route, specs[route]) {
			n++
			res, body := h.send(t, p)
			h.check(t, p, res, body)
			if p.method == http.MethodPost || p.method == http.MethodPut {
				if now := h.snapshot(t); now != before {
					t.Errorf("%s: wrote to the database:\nbefore %s\nafter  %s", p.what, before, now)
					before = now
				}
			}
		}
	}
	if now := h.snapshot(t); now != before {
		t.Errorf("hostile requests wrote to the database:\nbefore %s\nafter  %s", before, now)
	}
	t.Logf("%d hostile requests over %d routes in %v", n, len(routes), time.Since(start).Round(time.Millisecond))
}

// TestBodyLimitIsExactly64KiB: 65,536 bytes pass the limit, one more is 413
// body_too_large, on a plain route, a keyed POST and a console form, sent
// with a length or chunked.
func TestBodyLimitIsExactly64KiB(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	jsonHdr := map[string]string{"Content-Type": "application/json"}
	pad := func(body string, size int) string { return body + strings.Repeat(" ", size-len(body)) }
	for _, chunked := range []bool{false, true} {
		reader := func(s string) io.Reader {
			if chunked {
				return io.MultiReader(strings.NewReader(s)) // unknown length: sent chunked
			}
			return strings.NewReader(s)
		}
		at := pad(`{"a":1}`, httpapi.MaxBodyBytes)
		res, body := e.do(t, "POST", "/test/echo", "", reader(at), jsonHdr)
		if res.StatusCode != 200 || len(body) != httpapi.MaxBodyBytes {
			t.Fatalf("chunked=%v: a body of exactly %d bytes: %d, %d bytes back", chunked, httpapi.MaxBodyBytes, res.StatusCode, len(body))
		}
		res, body = e.do(t, "POST", "/test/echo", "", reader(at+" "), jsonHdr)
		wantProblem(t, res, body, 413, "body_too_large")

		// A keyed POST reads the whole limit: the amount is refused, not
		// the size.
		m := map[string]string{"Content-Type": "application/json", "Idempotency-Key": fmt.Sprintf("limit-%v", chunked)}
		res, body = e.do(t, "POST", "/v1/payments", e.keys[orchestrator.RoleMerchant],
			reader(pad(`{"amount_minor":0,"currency":"EUR"}`, httpapi.MaxBodyBytes)), m)
		if p := wantProblem(t, res, body, 400, "validation_failed"); p.Param != "amount_minor" {
			t.Fatalf("chunked=%v: param %q", chunked, p.Param)
		}
		res, body = e.do(t, "POST", "/v1/payments", e.keys[orchestrator.RoleMerchant],
			reader(pad(`{"amount_minor":0,"currency":"EUR"}`, httpapi.MaxBodyBytes+1)), m)
		wantProblem(t, res, body, 413, "body_too_large")

		res, body = e.do(t, "POST", "/console/signin", "", reader("api_key="+strings.Repeat("x", httpapi.MaxBodyBytes)),
			map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		if res.StatusCode != 413 {
			t.Fatalf("chunked=%v: console form over the limit: %d %.200s", chunked, res.StatusCode, body)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys`) + e.count(t, `SELECT count(*) FROM payments`); n != 0 {
		t.Fatalf("%d rows written by refused requests", n)
	}
}
