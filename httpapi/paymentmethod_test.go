package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// Test cards (Stripe's published test numbers).
const (
	visa       = "4242424242424242"
	mastercard = "5555555555554444"
	amex       = "378282246310005"
	visaCVC    = "314"
)

// testVaultKeys is a keyring of fresh random keys.
func testVaultKeys(t *testing.T) *vault.Keyring {
	t.Helper()
	b64 := func() string {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	k, err := vault.ParseKeys("1:"+b64(), b64())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// vaultEnv is newMigratedEnv with a vault, a publishable key of the
// tenant (keys[RolePublishable]) and origins as the tenant's browser
// origins.
func newVaultEnv(t *testing.T, cfg httpapi.Config, origins ...string) *env {
	t.Helper()
	pool := pgtest.Pool(t, testDBURL(t))
	cfg.Vault = vault.New(vault.Config{Pool: pool, Keys: testVaultKeys(t)})
	cfg.AllowHTTPLoopbackOrigins = true
	e := newMigratedEnvWith(t, cfg, orchestrator.Config{Pool: pool, Vault: cfg.Vault}, webhooks.Config{})
	ctx := context.Background()
	_, ppk, err := e.svc.CreateAPIKey(ctx, orchestrator.RolePublishable, e.tenant, "checkout")
	if err != nil {
		t.Fatal(err)
	}
	e.keys[orchestrator.RolePublishable] = ppk
	if _, err := e.svc.SetBrowserOrigins(ctx, e.tenant, origins, true); err != nil {
		t.Fatal(err)
	}
	return e
}

// cardBody is a create's body for number (cvc omitted when "").
func cardBody(number, cvc string) string {
	cvcField := ""
	if cvc != "" {
		cvcField = `,"cvc":"` + cvc + `"`
	}
	return fmt.Sprintf(`{"type":"card","card":{"number":%q,"exp_month":12,"exp_year":%d%s,"holder_name":"Jane Doe"},`+
		`"metadata":{"order":"1"}}`, number, time.Now().Year()+3, cvcField)
}

// createMethod posts body under idemKey with apiKey and hdr.
func (e *env) createMethod(t *testing.T, apiKey, idemKey, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json", "Idempotency-Key": idemKey}
	for k, v := range hdr {
		h[k] = v
	}
	return e.do(t, "POST", "/v1/payment_methods", apiKey, strings.NewReader(body), h)
}

// paymentMethod is a payment method as the API shows it.
type paymentMethod struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"`
	Card   struct {
		Brand       string  `json:"brand"`
		Last4       string  `json:"last4"`
		ExpMonth    int     `json:"exp_month"`
		ExpYear     int     `json:"exp_year"`
		Fingerprint *string `json:"fingerprint"`
	} `json:"card"`
	Metadata  map[string]string `json:"metadata"`
	CreatedAt time.Time         `json:"created_at"`
	DeletedAt *time.Time        `json:"deleted_at"`
}

// noCardIn fails when text holds a card number or CVC, whole or spaced,
// as a token of its own.
func noCardIn(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		spaced := ""
		for i := 0; i < len(s); i += 4 {
			spaced += s[i:min(i+4, len(s))] + " "
		}
		for _, form := range []string{s, strings.TrimSpace(spaced)} {
			// Bounded by anything but a letter or digit: a short CVC may
			// well occur inside a random id (req_…314…).
			re := regexp.MustCompile(`(^|[^0-9A-Za-z])` + regexp.QuoteMeta(form) + `($|[^0-9A-Za-z])`)
			if re.MatchString(text) {
				t.Fatalf("%s holds card data %q:\n%s", what, form, text)
			}
		}
	}
}

func TestPaymentMethods(t *testing.T) {
	t.Parallel()
	e := newVaultEnv(t, httpapi.Config{})
	merchant, support := e.keys[orchestrator.RoleMerchant], e.keys[orchestrator.RoleSupport]
	tenantQ := "?tenant_id=" + strconv.FormatInt(e.tenant, 10)

	t.Run("CreateGetListDeleteRoundTrip", func(t *testing.T) {
		res, b := e.createMethod(t, merchant, "pm-round-1", cardBody("4242 4242 4242 4242", visaCVC), nil)
		if res.StatusCode != 201 {
			t.Fatalf("create: %d %s", res.StatusCode, b)
		}
		noCardIn(t, "create answer", string(b), visa, visaCVC)
		pm := decode[paymentMethod](t, b)
		if !strings.HasPrefix(pm.ID, "vpm_") || pm.Object != "payment_method" || pm.Type != "card" ||
			pm.Card.Brand != "visa" || pm.Card.Last4 != "4242" || pm.Card.ExpMonth != 12 ||
			pm.Card.Fingerprint == nil || *pm.Card.Fingerprint == "" || pm.Metadata["order"] != "1" || pm.DeletedAt != nil {
			t.Fatalf("created %s", b)
		}
		if loc := res.Header.Get("Location"); loc != "/v1/payment_methods/"+pm.ID {
			t.Fatalf("Location %q", loc)
		}
		res, got := e.do(t, "GET", "/v1/payment_methods/"+pm.ID, merchant, nil, nil)
		if res.StatusCode != 200 || !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(b)) {
			t.Fatalf("get: %d %s, want %s", res.StatusCode, got, b)
		}
		// Support reads it too, naming the tenant.
		if res, got = e.do(t, "GET", "/v1/payment_methods/"+pm.ID+tenantQ, support, nil, nil); res.StatusCode != 200 {
			t.Fatalf("support get: %d %s", res.StatusCode, got)
		}
		res, got = e.do(t, "GET", "/v1/payment_methods/"+pm.ID, support, nil, nil)
		if p := wantProblem(t, res, got, 400, "validation_failed"); p.Param != "tenant_id" {
			t.Fatalf("support without tenant_id: param %q", p.Param)
		}
		res, got = e.do(t, "GET", "/v1/payment_methods/vpm_00000000000000000000000000000000", merchant, nil, nil)
		wantProblem(t, res, got, 404, "not_found")
		res, got = e.do(t, "GET", "/v1/payment_methods/"+visa, merchant, nil, nil)
		wantProblem(t, res, got, 404, "not_found")
		noCardIn(t, "404 of a number in the path", string(got), visa)

		// The same card again (another key) and another card.
		res, b2 := e.createMethod(t, merchant, "pm-round-2", cardBody(visa, ""), nil)
		if res.StatusCode != 201 {
			t.Fatalf("second create: %d %s", res.StatusCode, b2)
		}
		twin := decode[paymentMethod](t, b2)
		res, b3 := e.createMethod(t, merchant, "pm-round-3", cardBody(mastercard, "123"), nil)
		if res.StatusCode != 201 {
			t.Fatalf("third create: %d %s", res.StatusCode, b3)
		}
		other := decode[paymentMethod](t, b3)
		if *twin.Card.Fingerprint != *pm.Card.Fingerprint || *other.Card.Fingerprint == *pm.Card.Fingerprint {
			t.Fatalf("fingerprints: %s %s %s", *pm.Card.Fingerprint, *twin.Card.Fingerprint, *other.Card.Fingerprint)
		}
		ids := func(path, key string) []string {
			t.Helper()
			res, b := e.do(t, "GET", path, key, nil, nil)
			if res.StatusCode != 200 {
				t.Fatalf("list %s: %d %s", path, res.StatusCode, b)
			}
			noCardIn(t, "list", string(b), visa, mastercard, visaCVC)
			var out []string
			for _, m := range decode[listOf[paymentMethod]](t, b).Data {
				out = append(out, m.ID)
			}
			return out
		}
		if got := ids("/v1/payment_methods?fingerprint="+*pm.Card.Fingerprint, merchant); len(got) != 2 ||
			got[0] != twin.ID || got[1] != pm.ID {
			t.Fatalf("by fingerprint, newest first: %v", got)
		}
		all := ids("/v1/payment_methods", merchant)
		if len(all) != 3 {
			t.Fatalf("all: %v", all)
		}
		page1 := ids("/v1/payment_methods?limit=2", merchant)
		page2 := ids("/v1/payment_methods?limit=2&starting_after="+page1[1], merchant)
		if len(page1) != 2 || len(page2) != 1 || page2[0] != all[2] {
			t.Fatalf("pages %v %v of %v", page1, page2, all)
		}
		future := rfc3339(time.Now().Add(time.Hour))
		if got := ids("/v1/payment_methods?created_gte="+future, merchant); len(got) != 0 {
			t.Fatalf("created_gte in the future: %v", got)
		}
		if got := ids("/v1/payment_methods?created_lt="+future+"&created_gte="+rfc3339(time.Now().Add(-time.Hour)), merchant); len(got) != 3 {
			t.Fatalf("created range: %v", got)
		}
		if got := ids("/v1/payment_methods"+tenantQ, support); len(got) != 3 {
			t.Fatalf("support's list: %v", got)
		}
		for q, param := range map[string]string{"limit=0": "limit", "limit=101": "limit", "starting_after=pay_1": "starting_after",
			"created_gte=yesterday": "created_gte", "fingerprint=" + strings.Repeat("a", 65): "fingerprint", "fingerprint=a%2Bb": "fingerprint"} {
			res, b := e.do(t, "GET", "/v1/payment_methods?"+q, merchant, nil, nil)
			if p := wantProblem(t, res, b, 400, "validation_failed"); p.Param != param {
				t.Fatalf("%s: param %q, want %s", q, p.Param, param)
			}
		}

		res, b = e.do(t, "DELETE", "/v1/payment_methods/"+pm.ID, merchant, nil, nil)
		if res.StatusCode != 200 {
			t.Fatalf("delete: %d %s", res.StatusCode, b)
		}
		deleted := decode[paymentMethod](t, b)
		if deleted.ID != pm.ID || deleted.DeletedAt == nil || deleted.Card.Last4 != "4242" {
			t.Fatalf("deleted %s", b)
		}
		res, again := e.do(t, "DELETE", "/v1/payment_methods/"+pm.ID, merchant, nil, nil)
		if res.StatusCode != 200 || !bytes.Equal(again, b) {
			t.Fatalf("delete again: %d %s, want %s", res.StatusCode, again, b)
		}
		res, got = e.do(t, "GET", "/v1/payment_methods/"+pm.ID, merchant, nil, nil)
		if res.StatusCode != 200 || decode[paymentMethod](t, got).DeletedAt == nil {
			t.Fatalf("get after delete: %d %s", res.StatusCode, got)
		}
		res, got = e.do(t, "DELETE", "/v1/payment_methods/"+other.ID, support, nil, nil)
		wantProblem(t, res, got, 403, "forbidden")
	})

	t.Run("ReplayIsByteIdenticalAndNothingStoredHoldsTheCard", func(t *testing.T) {
		body := cardBody(amex, "1234")
		res, first := e.createMethod(t, merchant, "pm-replay", body, nil)
		if res.StatusCode != 201 {
			t.Fatalf("create: %d %s", res.StatusCode, first)
		}
		res, second := e.createMethod(t, merchant, "pm-replay", body, nil)
		if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first, second) {
			t.Fatalf("replay: %d %v\n%s\nfirst %s", res.StatusCode, res.Header, second, first)
		}
		noCardIn(t, "replay", string(second), amex, "1234")
		var stored, fields, hash string
		if err := e.pool.QueryRow(context.Background(), `
			SELECT convert_from(response_body, 'UTF8'), field_hashes::text, encode(request_hash, 'hex')
			FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, e.tenant, "pm-replay").Scan(&stored, &fields, &hash); err != nil {
			t.Fatal(err)
		}
		noCardIn(t, "stored answer", stored, amex, "1234")
		// The fingerprint is not a plain hash of the body: with the
		// number in it, that could be reversed by trying every number.
		plain, err := orchestrator.NewFingerprint("POST /v1/payment_methods", nil, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if hash == fmt.Sprintf("%x", plain.Hash) || strings.Contains(fields, plain.Fields["card"]) {
			t.Fatal("the idempotency fingerprint hashes the card number in the clear")
		}
		// Another number (or CVC) under the key is another request.
		for _, other := range []string{cardBody(amex, "4321"), cardBody("371449635398431", "1234")} {
			res, b := e.createMethod(t, merchant, "pm-replay", other, nil)
			p := wantProblem(t, res, b, 409, "idempotency_key_reused")
			if len(p.Fields) != 1 || p.Fields[0] != "card" {
				t.Fatalf("reused fields %v", p.Fields)
			}
			noCardIn(t, "reused", string(b), amex, "371449635398431", "1234", "4321")
		}
		noCardIn(t, "logs", e.logs.String(), amex, "371449635398431", visa, mastercard)
	})

	t.Run("ConcurrentDuplicatesMakeOneMethod", func(t *testing.T) {
		const n = 8
		body := cardBody(mastercard, "999")
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
					res, b := e.createMethod(t, merchant, "pm-concurrent", body, nil)
					switch res.StatusCode {
					case 201:
						ids[i] = decode[paymentMethod](t, b).ID
						return
					case 409: // idempotency_key_in_use: the twin is executing
						time.Sleep(20 * time.Millisecond)
					default:
						t.Errorf("concurrent create: %d %s", res.StatusCode, b)
						return
					}
				}
				t.Errorf("concurrent create never answered 201")
			})
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] || id == "" {
				t.Fatalf("duplicates answered different methods: %v", ids)
			}
		}
		if got := e.count(t, `SELECT count(*) FROM payment_methods WHERE tenant_id = $1 AND idempotency_key = 'pm-concurrent'`, e.tenant); got != 1 {
			t.Fatalf("%d methods for one key", got)
		}
	})

	t.Run("ValidationNamesTheFieldWithoutTheValue", func(t *testing.T) {
		year := strconv.Itoa(time.Now().Year() + 2)
		for name, tc := range map[string]struct{ body, param string }{
			"NumberAsJSONNumber": {`{"type":"card","card":{"number":4242424242424242,"exp_month":1,"exp_year":` + year + `}}`, "card.number"},
			"BadCheckDigit":      {`{"type":"card","card":{"number":"4242424242424241","exp_month":1,"exp_year":` + year + `}}`, "card.number"},
			"WrongLength":        {`{"type":"card","card":{"number":"42424242424242424","exp_month":1,"exp_year":` + year + `}}`, "card.number"},
			"Letters":            {`{"type":"card","card":{"number":"4242-4242-4242-4242","exp_month":1,"exp_year":` + year + `}}`, "card.number"},
			"Expired":            {`{"type":"card","card":{"number":"4242424242424242","exp_month":1,"exp_year":2020}}`, "card.exp_year"},
			"MonthOutOfRange":    {`{"type":"card","card":{"number":"4242424242424242","exp_month":13,"exp_year":` + year + `}}`, "card.exp_month"},
			"CVCTooLong":         {`{"type":"card","card":{"number":"4242424242424242","exp_month":1,"exp_year":` + year + `,"cvc":"31415"}}`, "card.cvc"},
			"CVCAsNumber":        {`{"type":"card","card":{"number":"4242424242424242","exp_month":1,"exp_year":` + year + `,"cvc":314}}`, "card.cvc"},
			"UnknownCardField":   {`{"type":"card","card":{"number":"4242424242424242","exp_month":1,"exp_year":` + year + `,"pin":"3141"}}`, "card.pin"},
			"NoCard":             {`{"type":"card"}`, "card"},
			"CardAsString":       {`{"type":"card","card":"4242424242424242"}`, "card"},
			"TypeIsTheNumber":    {`{"type":"4242424242424242","card":{"number":"4242424242424242","exp_month":1,"exp_year":` + year + `}}`, "type"},
			"BadBillingCountry": {`{"type":"card","card":{"number":"4242424242424242","exp_month":1,"exp_year":` + year + `},` +
				`"billing_details":{"address":{"country":"4242424242424242"}}}`, "billing_details.address.country"},
		} {
			t.Run(name, func(t *testing.T) {
				res, b := e.createMethod(t, merchant, "pm-bad-"+name, tc.body, nil)
				p := wantProblem(t, res, b, 400, "validation_failed")
				if p.Param != tc.param {
					t.Fatalf("param %q, want %s: %s", p.Param, tc.param, b)
				}
				noCardIn(t, "problem", string(b), visa, "4242424242424241", "42424242424242424", "4242-4242", "31415", "314")
			})
		}
		noCardIn(t, "logs", e.logs.String(), visa, "4242424242424241", "42424242424242424", "31415")
		res, b := e.createMethod(t, merchant, "pm-no-method", cardBody(visa, ""), nil)
		if res.StatusCode != 201 {
			t.Fatalf("a valid card after the refusals: %d %s", res.StatusCode, b)
		}
		res, b = e.do(t, "POST", "/v1/payment_methods", merchant, strings.NewReader(cardBody(visa, "")),
			map[string]string{"Content-Type": "application/json"})
		wantProblem(t, res, b, 400, "idempotency_key_missing")
	})
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func TestPaymentMethodsWithoutAVault(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	merchant := e.keys[orchestrator.RoleMerchant]
	res, b := e.createMethod(t, merchant, "pm-off", cardBody(visa, ""), nil)
	wantProblem(t, res, b, 503, "service_unavailable")
	noCardIn(t, "503", string(b), visa)
	res, b = e.do(t, "GET", "/v1/payment_methods", merchant, nil, nil)
	wantProblem(t, res, b, 503, "service_unavailable")
	res, b = e.do(t, "GET", "/v1/payment_methods", e.keys[orchestrator.RoleFinance], nil, nil)
	wantProblem(t, res, b, 403, "forbidden")
}
