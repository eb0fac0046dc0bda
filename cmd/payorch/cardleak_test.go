package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/payorch/payorch/internal/pgcluster"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// leakMarker is planted where each sink must show it (an idempotency key,
// metadata, a resource attribute, a SQL comment), so that a sink that
// came back empty, or was not searched, fails the test instead of passing
// it.
const leakMarker = "leakmark7q"

// cardSecret is something of a card that must never land anywhere: a
// number (searched as a substring) or a CVC (searched as a token: not
// inside a longer run of letters or digits, nor after or before a '.',
// so that hex ids and fractional seconds do not match it). Every CVC of
// the test starts with 0: a count, a size or a duration is never written
// with a leading zero, so a CVC token is not matched by chance.
type cardSecret struct {
	what, value string
	token       bool
}

// testCard is a card the test sends, and what of it is secret.
type testCard struct {
	name, number, cvc string
}

// slug names c in idempotency keys (never by anything of the card).
func (c testCard) slug() string { return strings.Join(strings.Fields(c.name), "-") }

func (c testCard) secrets() []cardSecret {
	out := []cardSecret{{what: c.name + " number", value: strings.ReplaceAll(c.number, " ", "")}}
	if strings.Contains(c.number, " ") {
		out = append(out, cardSecret{what: c.name + " number as sent", value: c.number})
	}
	if c.cvc != "" {
		out = append(out, cardSecret{what: c.name + " CVC", value: c.cvc, token: true})
	}
	return out
}

func tokenByte(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '.'
}

// findSecret returns a short excerpt around the first place hay holds s
// (s itself masked), or "" when it holds none.
func findSecret(hay string, s cardSecret) string {
	for from := 0; ; {
		i := strings.Index(hay[from:], s.value)
		if i < 0 {
			return ""
		}
		i += from
		j := i + len(s.value)
		if !s.token || (i == 0 || !tokenByte(hay[i-1])) && (j == len(hay) || !tokenByte(hay[j])) {
			lo, hi := max(0, i-40), min(len(hay), j+40)
			return fmt.Sprintf("offset %d: %q", i, hay[lo:i]+"<"+s.what+">"+hay[j:hi])
		}
		from = i + 1
	}
}

// haystack is one place cards could land, as collected texts.
type haystack struct {
	mu    sync.Mutex
	name  string
	parts []labeled
}

type labeled struct{ label, text string }

func (h *haystack) add(label string, b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.parts = append(h.parts, labeled{label, string(b)})
}

func (h *haystack) size() (n int) {
	for _, p := range h.parts {
		n += len(p.text)
	}
	return n
}

// search reports every secret found in h, naming the part and an excerpt,
// never the whole haystack.
func (h *haystack) search(t *testing.T, secrets []cardSecret) {
	t.Helper()
	for _, p := range h.parts {
		for _, s := range secrets {
			if ex := findSecret(p.text, s); ex != "" {
				t.Errorf("LEAK: %s found in %s (%s) at %s", s.what, h.name, p.label, ex)
			}
		}
	}
}

// mustHold is the positive control: h holds want (a planted marker or
// something it must show), so it is not empty and was searched.
func (h *haystack) mustHold(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, p := range h.parts {
			if findSecret(p.text, cardSecret{what: "control", value: w}) != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("control: %s (%d parts, %d bytes) does not hold %q: the sink is not searched for real", h.name, len(h.parts), h.size(), w)
		}
	}
}

// rawOTLPCollector keeps every OTLP/HTTP trace export whole, as protojson
// text: attributes, events, links, status messages and resource.
func rawOTLPCollector(t *testing.T, into *haystack) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, fmt.Sprint(err), 400)
			return
		}
		// Raw bytes too: a string field protojson would escape is still
		// searched as sent.
		text, _ := protojson.Marshal(&req)
		into.add("export "+r.URL.Path, append(append(text, '\n'), b...))
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// quotingProvider stands between payorch and the fake and answers the
// create of the cards it quotes as a careless provider would: for
// quote.message, a 400 whose message quotes the card's number (as digits
// and spaced), its CVC and the whole request; for quote.code, a 402
// decline whose code does. Every other request goes through to the fake.
func quotingProvider(t *testing.T, target string, quote struct{ message, code testCard }, quotes *atomic.Int64) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var in struct {
			Card struct{ Number, CVC string }
		}
		if r.Method == http.MethodPost && r.URL.Path == "/v1/holds" && json.Unmarshal(b, &in) == nil &&
			(in.Card.Number == quote.message.number || in.Card.Number == quote.code.number) {
			quotes.Add(1)
			msg := fmt.Sprintf("Your card number %s (%s) with security code %s is not accepted; request: %s",
				in.Card.Number, spaced(in.Card.Number), in.Card.CVC, b)
			e, status := map[string]string{"type": "invalid_request_error", "code": "invalid_request", "message": msg,
				"param": "card[number]"}, http.StatusBadRequest
			if in.Card.Number == quote.code.number {
				e, status = map[string]string{"type": "card_error", "message": "declined",
					"code": "do_not_honor_" + in.Card.Number + "_" + spaced(in.Card.Number) + "_cvc_" + in.Card.CVC}, http.StatusPaymentRequired
			}
			out, _ := json.Marshal(map[string]any{"error": e})
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(out)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func spaced(n string) string {
	var b strings.Builder
	for i, r := range n {
		if i > 0 && i%4 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// leakClient sends requests to a serve process and keeps every answer.
type leakClient struct {
	t       *testing.T
	base    string
	answers *haystack
}

func (lc *leakClient) do(method, path, key, idem, body string, hdr map[string]string) (int, []byte) {
	lc.t.Helper()
	req, err := http.NewRequest(method, lc.base+path, strings.NewReader(body))
	if err != nil {
		lc.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		lc.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		lc.t.Fatal(err)
	}
	lc.answers.add(fmt.Sprintf("%s %s → %d", method, path, res.StatusCode), b)
	return res.StatusCode, b
}

func (lc *leakClient) want(what string, status, want int, b []byte) {
	lc.t.Helper()
	if status != want {
		lc.t.Fatalf("%s: %d, want %d", what, status, want)
	}
}

func cardBody(number, cvc string) string {
	return `{"type":"card","card":{"number":"` + number + `","exp_month":11,"exp_year":2031,"cvc":"` + cvc +
		`"},"metadata":{"note":"` + leakMarker + `-pm"}}`
}

// TestNoCardDataLeaksAnywhere tokenizes cards (and sends cards that are
// refused), pays with them, captures, delivers webhooks, has a provider
// answer an error quoting a card, reads the console, the card form and
// /metrics, and then searches every place a card could land for every
// number and CVC sent: the serve process's log, every exported span,
// every event and webhook delivery body, every answer, the console pages,
// /metrics, a full data dump of the database (bytea columns decoded) and
// pg_stat_statements' query texts. Each place is first shown to hold a
// planted marker, so that none passes by being empty.
func TestNoCardDataLeaksAnywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.DurableStatsURL(t)
	w := newWorld(t, dbURL)
	if _, err := w.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}

	var (
		approved     = testCard{"approved card", "4242424242424242", "073"}
		declined     = testCard{"declined card", "4000000000000002", "095"}
		insufficient = testCard{"insufficient-funds card", "4000000000009995", "061"}
		amex         = testCard{"amex", "378282246310005", "0482"}
		withSpaces   = testCard{"card sent with spaces", "5555 5555 5555 4444", "038"}
		quoted       = testCard{"card the provider quotes", "4000056655665556", "086"}
		quotedInCode = testCard{"card the provider quotes in its code", "4000002760003184", "027"}
		badLuhn      = testCard{"bad-Luhn number", "4242424242424241", "017"}
		asJSONNumber = testCard{"number sent as a JSON number", "6011111111111117", ""}
		badCVC       = testCard{"card with a bad CVC", "5105105105105100", "05821"}
		inReusedBody = testCard{"number in a reused key's body", "4012888888881881", "019"}
		challenged   = testCard{"card its issuer challenges", "4000000000003220", "034"}
	)
	var secrets []cardSecret
	for _, c := range []testCard{approved, declined, insufficient, amex, withSpaces, quoted, quotedInCode, badLuhn, asJSONNumber, badCVC, inReusedBody, challenged} {
		secrets = append(secrets, c.secrets()...)
	}

	sinks := map[string]*haystack{}
	sink := func(name string) *haystack {
		sinks[name] = &haystack{name: name}
		return sinks[name]
	}
	logs, spans, answers, events, hooks := sink("serve log"), sink("exported spans"), sink("API answers"), sink("events API"), sink("webhook deliveries")
	console, cardForm, metrics, dump, statements := sink("console pages"), sink("card form page"), sink("/metrics"), sink("database dump"), sink("pg_stat_statements")
	challengePage := sink("3-D Secure challenge page")

	collector := rawOTLPCollector(t, spans)
	var quotes atomic.Int64
	provider := quotingProvider(t, w.fake.URL(), struct{ message, code testCard }{quoted, quotedInCode}, &quotes)
	receiver := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hooks.add("delivery "+r.Header.Get(webhooksig.EventIDHeader), b)
	}))
	t.Cleanup(receiver.Close)

	svc := orchestrator.NewService(orchestrator.Config{Pool: w.pool})
	const shop = "https://shop.example"
	if _, err := svc.SetBrowserOrigins(ctx, w.tenant, []string{shop}, false); err != nil {
		t.Fatal(err)
	}
	_, publishable, err := svc.CreateAPIKey(ctx, orchestrator.RolePublishable, w.tenant, "")
	if err != nil {
		t.Fatal(err)
	}
	_, support, err := svc.CreateAPIKey(ctx, orchestrator.RoleSupport, 0, "")
	if err != nil {
		t.Fatal(err)
	}

	srv := startServe(t, w.env(map[string]string{
		"PAYORCH_FAKE_URL":              provider.URL,
		"PAYORCH_VAULT_KEYS":            testVaultKeys,
		"PAYORCH_VAULT_FINGERPRINT_KEY": testVaultFingerprintKey,
		"PAYORCH_LOG_LEVEL":             "debug",
		"OTEL_EXPORTER_OTLP_ENDPOINT":   collector.URL,
		"OTEL_BSP_SCHEDULE_DELAY":       "200",
		"OTEL_RESOURCE_ATTRIBUTES":      "payorch.test.marker=" + leakMarker + "-resource",
		"PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true",
		"PAYORCH_WEBHOOK_INTERVAL":      "50ms",
		"PAYORCH_KEY_SWEEP_INTERVAL":    "0",
	}))
	lc := &leakClient{t: t, base: srv.base, answers: answers}

	st, b := lc.do("POST", "/v1/webhook_endpoints", w.key, leakMarker+"-ep", `{"url":"`+receiver.URL+`","event_types":["*"]}`, nil)
	lc.want("create endpoint", st, 201, b)

	// Tokenize: with the secret key, and one card from the shop's page
	// with the publishable key.
	methods := map[string]string{}
	create := func(c testCard, key string, hdr map[string]string) {
		t.Helper()
		st, b := lc.do("POST", "/v1/payment_methods", key, leakMarker+"-pm-"+c.slug(), cardBody(c.number, c.cvc), hdr)
		lc.want("create "+c.name, st, 201, b)
		var pm struct{ ID string }
		if err := json.Unmarshal(b, &pm); err != nil || !orchestrator.IsVaulted(pm.ID) {
			t.Fatalf("create %s: %v", c.name, err)
		}
		methods[c.name] = pm.ID
	}
	for _, c := range []testCard{approved, declined, insufficient, amex, quoted, quotedInCode, challenged} {
		create(c, w.key, nil)
	}
	create(withSpaces, publishable, map[string]string{"Origin": shop})

	// The error paths of a create: each a 4xx that must not echo the card.
	st, b = lc.do("POST", "/v1/payment_methods", w.key, leakMarker+"-bad-luhn", cardBody(badLuhn.number, badLuhn.cvc), nil)
	lc.want("bad Luhn", st, 400, b)
	st, b = lc.do("POST", "/v1/payment_methods", w.key, leakMarker+"-json-number",
		`{"type":"card","card":{"number":`+asJSONNumber.number+`,"exp_month":11,"exp_year":2031}}`, nil)
	lc.want("number as a JSON number", st, 400, b)
	st, b = lc.do("POST", "/v1/payment_methods", w.key, leakMarker+"-bad-cvc", cardBody(badCVC.number, badCVC.cvc), nil)
	lc.want("bad CVC", st, 400, b)
	st, b = lc.do("POST", "/v1/payment_methods", w.key, leakMarker+"-pm-"+approved.slug(), cardBody(approved.number, approved.cvc), nil)
	lc.want("replayed create", st, 201, b)
	st, b = lc.do("POST", "/v1/payment_methods", w.key, leakMarker+"-pm-"+approved.slug(), cardBody(inReusedBody.number, inReusedBody.cvc), nil)
	if st != 409 && st != 422 {
		t.Fatalf("a create's key reused with another card: %d", st)
	}

	// Pay with each card; capture the approved one.
	payments := map[string]string{}
	pay := func(c testCard) int {
		t.Helper()
		st, b := lc.do("POST", "/v1/payments", w.key, leakMarker+"-pay-"+c.slug(),
			`{"amount_minor":1234,"currency":"EUR","payment_method":"`+methods[c.name]+`","metadata":{"note":"`+leakMarker+`-pay"}}`, nil)
		var p struct{ ID string }
		_ = json.Unmarshal(b, &p)
		if p.ID != "" {
			payments[c.name] = p.ID
		}
		return st
	}
	for _, c := range []testCard{approved, amex, withSpaces} {
		if st := pay(c); st != 201 {
			t.Fatalf("pay with the %s: %d", c.name, st)
		}
	}
	for _, c := range []testCard{declined, insufficient, quoted, quotedInCode} {
		if st := pay(c); st < 400 || st >= 500 {
			t.Fatalf("pay with the %s: %d, want a 4xx", c.name, st)
		}
	}
	st, b = lc.do("POST", "/v1/payments/"+payments[approved.name]+"/capture", w.key, leakMarker+"-cap", "", nil)
	lc.want("capture", st, 200, b)
	payments[challenged.name] = payThroughChallenge(t, lc, w.key, methods[challenged.name], challengePage)

	// Read back what the API shows of them.
	for name, id := range payments {
		for _, p := range []string{"", "/events", "/attempts"} {
			st, b = lc.do("GET", "/v1/payments/"+id+p, w.key, "", "", nil)
			lc.want("read payment of the "+name+p, st, 200, b)
		}
	}
	for _, id := range methods {
		st, b = lc.do("GET", "/v1/payment_methods/"+id, w.key, "", "", nil)
		lc.want("read payment method", st, 200, b)
	}
	st, b = lc.do("GET", "/v1/payment_methods", w.key, "", "", nil)
	lc.want("list payment methods", st, 200, b)

	// Every event, through the API and as delivered.
	var nEvents int
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() (bool, error) {
		nEvents = w.count(t, `SELECT count(*) FROM events WHERE tenant_id = $1`, w.tenant)
		hooks.mu.Lock()
		got := len(hooks.parts)
		hooks.mu.Unlock()
		return nEvents > 0 && got >= nEvents, fmt.Errorf("%d of %d events delivered", got, nEvents)
	})
	for after := ""; ; {
		st, b = call(t, "GET", srv.base+"/v1/events?limit=100&starting_after="+after, w.key, "", "")
		lc.want("list events", st, 200, b)
		events.add("GET /v1/events after "+after, b)
		var page struct {
			Data    []struct{ ID string }
			HasMore bool `json:"has_more"`
		}
		if err := json.Unmarshal(b, &page); err != nil || len(page.Data) == 0 {
			t.Fatalf("events page: %v", err)
		}
		if !page.HasMore {
			break
		}
		after = page.Data[len(page.Data)-1].ID
	}

	readConsole(t, srv.base, support, payments, console)
	st, b = call(t, "GET", srv.base+"/card_form?key="+url.QueryEscape(publishable)+"&origin="+url.QueryEscape(shop), "", "", "")
	lc.want("card form", st, 200, b)
	cardForm.add("GET /card_form", b)
	st, b = call(t, "GET", srv.base+"/metrics", "", "", "")
	lc.want("metrics", st, 200, b)
	metrics.add("GET /metrics", b)

	// Stop the process cleanly, so its last spans are flushed and its log
	// is complete.
	srv.stop(t)
	logs.add("stdout and stderr", []byte(srv.logs.String()))

	dumpDatabase(t, dbURL, dump)
	// A statement of its own shape (pg_stat_statements keeps the text of
	// a shape's first run only: a comment would not do).
	for _, q := range []string{`CREATE TABLE ` + leakMarker + `_statement ()`, `SELECT count(*) FROM ` + leakMarker + `_statement`} {
		if _, err := w.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := w.pool.Query(ctx, `SELECT query FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			t.Fatal(err)
		}
		statements.add("query", []byte(q))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// Controls: each sink holds what it must, so a search of it means
	// something; then the searches.
	last4 := approved.number[12:]
	logs.mustHold(t, leakMarker+"-pay-"+approved.slug(), "/v1/payment_methods")
	spans.mustHold(t, leakMarker+"-resource", "POST /v1/payment_methods", "provider authorize")
	answers.mustHold(t, `"last4":"`+last4+`"`, leakMarker+"-pay", "problem")
	events.mustHold(t, `"last4":"`+last4+`"`, leakMarker+"-pay", payments[approved.name])
	hooks.mustHold(t, `"last4":"`+last4+`"`, leakMarker+"-pay", payments[approved.name])
	console.mustHold(t, payments[approved.name], last4)
	cardForm.mustHold(t, publishable)
	challengePage.mustHold(t, "Complete", challenged.number[12:])
	metrics.mustHold(t, leakMarker+"-resource", "payorch_http_requests_total")
	// The provider answered the quoting error, and
	if quotes.Load() < 2 {
		t.Error("control: the provider never answered an error quoting the card")
	}
	// payorch read it (its code is in the answer); payorch keeps a
	// provider error's code, never its message, so the message itself
	// must be in no sink.
	answers.mustHold(t, "declined: invalid_request")
	dump.mustHold(t, leakMarker+"-pm", `"`+last4+`"`, leakMarker+"-pay-"+approved.slug())
	// The stored answers are bytea: decoded, they show the payment.
	if !strings.Contains(dump.parts[len(dump.parts)-1].text, `"note":"`+leakMarker+`-pay"`) {
		t.Error("control: the decoded bytea values of the dump hold no stored payment answer")
	}
	statements.mustHold(t, leakMarker+"_statement", "payment_methods")
	for _, h := range sinks {
		h.search(t, secrets)
		t.Logf("searched %s: %d parts, %d bytes", h.name, len(h.parts), h.size())
	}
}

// payThroughChallenge pays with vaulted method pm, whose issuer
// challenges, keeps the provider's challenge page in page, completes the
// challenge there as the shopper would (its form), confirms, and returns
// the payment's id.
func payThroughChallenge(t *testing.T, lc *leakClient, key, pm string, page *haystack) string {
	t.Helper()
	st, b := lc.do("POST", "/v1/payments", key, leakMarker+"-pay-3ds",
		`{"amount_minor":1500,"currency":"EUR","payment_method":"`+pm+`","return_url":"https://shop.example/back"}`, nil)
	var p struct {
		ID         string
		NextAction struct{ URL string } `json:"next_action"`
	}
	if st != 201 || json.Unmarshal(b, &p) != nil || p.NextAction.URL == "" {
		t.Fatalf("pay with a challenged card: %d %s", st, b)
	}
	st, b = call(t, "GET", p.NextAction.URL, "", "", "")
	lc.want("challenge page", st, 200, b)
	page.add("GET challenge page", b)
	u, err := url.Parse(p.NextAction.URL)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"token": {u.Query().Get("token")}, "result": {"complete"}}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(u.Scheme+"://"+u.Host+u.Path, form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("complete the challenge: %d", res.StatusCode)
	}
	st, b = lc.do("POST", "/v1/payments/"+p.ID+"/confirm", key, leakMarker+"-confirm-3ds", "", nil)
	lc.want("confirm", st, 200, b)
	return p.ID
}

var consoleCSRF = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// readConsole signs into the console with key (support) and keeps the
// pages of payments, their search and the holds page.
func readConsole(t *testing.T, base, key string, payments map[string]string, into *haystack) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	get := func(path string) string {
		t.Helper()
		res, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("console %s: %d", path, res.StatusCode)
		}
		into.add("GET "+path, b)
		return string(b)
	}
	m := consoleCSRF.FindStringSubmatch(get("/console/signin"))
	if m == nil {
		t.Fatal("no CSRF token on the console's sign-in page")
	}
	res, err := c.PostForm(base+"/console/signin", url.Values{"csrf_token": {m[1]}, "api_key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Request.URL.Path, "/console/") || res.Request.URL.Path == "/console/signin" {
		t.Fatalf("console sign-in: %d at %s", res.StatusCode, res.Request.URL.Path)
	}
	into.add("console home", b)
	for _, id := range payments {
		get("/console/payments/" + id)
		get("/console/search?q=" + id)
	}
	get("/console/holds")
}

// dumpDatabase adds a data-only pg_dump of the database at dbURL to into,
// and the text of every bytea value in it (pg_dump writes them as hex:
// an answer stored as bytes would otherwise never be searched; the
// ciphertexts decode to noise).
func dumpDatabase(t *testing.T, dbURL string, into *haystack) {
	t.Helper()
	bin, err := pgcluster.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "pg_dump"), "--data-only", "--no-owner", "--dbname="+dbURL).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("pg_dump: %v %s", err, stderr)
	}
	into.add("pg_dump --data-only", out)
	var decoded bytes.Buffer
	decoded.WriteString("decoded bytea\n")
	for _, h := range regexp.MustCompile(`\\{1,2}x([0-9a-f]+)`).FindAllSubmatch(out, -1) {
		if b, err := hex.DecodeString(string(h[1])); err == nil {
			decoded.Write(b)
			decoded.WriteByte('\n')
		}
	}
	into.add("bytea values of the dump, decoded", decoded.Bytes())
}
