package stripe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
)

// emulator is a small, stateful, Stripe-shaped API on loopback, enough for
// the adapter: PaymentIntents (create, confirm, capture, cancel, retrieve,
// list; 3-D Secure challenges the test completes or fails, see
// emulator_3ds_test.go; incremental authorization, multicapture and
// overcapture, see emulator_flex_test.go), refunds, balance transactions
// (fee, net, available_on, reporting category, the payout filter), payouts
// and disputes (planted by the test, see emulator_money_test.go) and events, with Stripe's
// idempotency (same key and parameters replay the stored answer, other
// parameters are a 400 idempotency_error, a key still executing is a 409
// idempotency_key_in_use). It records every request, fails the test on a
// write without an Idempotency-Key, on an unknown form parameter, on a
// missing Stripe-Version or a telemetry header, and answers scripted
// faults.
type emulator struct {
	t      *testing.T
	srv    *httptest.Server
	secret string

	mu       sync.Mutex
	intents  map[string]*emuIntent
	charges  map[string]*emuCharge
	refunds  map[string]*emuRefund
	bts      []*emuBT
	payouts  map[string]*emuPayout
	disputes map[string]*emuDispute
	events   []*emuEvent
	keys     map[string]*emuKey
	executed map[string]int
	faults   []*emuFault
	requests []emuRequest
}

// emuKey is the idempotent record of one key: claimed while the first
// request executes, then its stored answer.
type emuKey struct {
	fingerprint string
	done        bool
	status      int
	body        []byte
}

// emuRequest is one request as received.
type emuRequest struct {
	Method, Path, Key string
	Form              url.Values
	Header            http.Header
}

// faultKind is what a scripted fault does.
type faultKind int

const (
	// faultAnswer answers status and body before executing anything (a
	// 409, 429, 500 or 400 that ran nothing).
	faultAnswer faultKind = iota
	// faultHangAfterExecute executes and stores the write, then never
	// answers: the connection is dropped once the client gives up.
	faultHangAfterExecute
	// faultBlock claims the key, signals arrived, and executes only once
	// release is closed: the key is in flight meanwhile.
	faultBlock
)

// emuFault is one scripted answer for the requests it matches.
type emuFault struct {
	kind faultKind
	// key and path (a suffix) select requests; "" matches any.
	key, path string
	status    int
	body      any
	// count is how many requests it still applies to, after the first
	// skip matching ones.
	count, skip      int
	arrived, release chan struct{}
}

// answer is what an endpoint produced. noStore marks a request Stripe
// refuses before executing (invalid parameters): no idempotent result.
type answer struct {
	status  int
	body    any
	noStore bool
}

const emuSecret = "sk_test_emulated_0123456789"

// newEmulator starts an emulator on loopback for the test.
func newEmulator(t *testing.T) *emulator {
	t.Helper()
	e := &emulator{
		t: t, secret: emuSecret,
		intents: map[string]*emuIntent{}, charges: map[string]*emuCharge{}, refunds: map[string]*emuRefund{},
		payouts: map[string]*emuPayout{}, disputes: map[string]*emuDispute{},
		keys: map[string]*emuKey{}, executed: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", e.write(e.createIntent, "amount", "currency", "capture_method",
		"payment_method", "payment_method_types[", "description", "metadata[", "expand[",
		"payment_method_options[card][request_extended_authorization]",
		"payment_method_options[card][request_three_d_secure]",
		"payment_method_options[card][request_incremental_authorization]",
		"payment_method_options[card][request_multicapture]",
		"payment_method_options[card][request_overcapture]"))
	mux.HandleFunc("POST /v1/payment_intents/{id}/confirm", e.write(e.confirmIntent, "error_on_requires_action", "return_url",
		"expand[",
		"payment_method_data[type]",
		"payment_method_data[card][number]", "payment_method_data[card][exp_month]", "payment_method_data[card][exp_year]",
		"payment_method_data[card][cvc]", "payment_method_data[billing_details][name]"))
	mux.HandleFunc("POST /v1/payment_intents/{id}/capture", e.write(e.captureIntent, "amount_to_capture", "final_capture", "expand["))
	mux.HandleFunc("POST /v1/payment_intents/{id}/increment_authorization", e.write(e.incrementIntent, "amount", "expand["))
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", e.write(e.cancelIntent, "cancellation_reason", "expand["))
	mux.HandleFunc("POST /v1/refunds", e.write(e.createRefund, "payment_intent", "amount", "expand["))
	mux.HandleFunc("GET /v1/payment_intents/{id}", e.read(e.getIntent, "expand["))
	mux.HandleFunc("GET /v1/payment_intents", e.read(e.listIntents, "created[", "limit", "starting_after", "expand["))
	mux.HandleFunc("GET /v1/balance_transactions", e.read(e.listBalance, "created[", "limit", "starting_after", "expand[", "payout"))
	mux.HandleFunc("GET /v1/payouts", e.read(e.listPayouts, "created[", "limit", "starting_after"))
	mux.HandleFunc("GET /v1/events", e.read(e.listEvents, "created[", "limit", "starting_after", "type"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		e.t.Errorf("emulator: unexpected request %s %s", r.Method, r.URL.Path)
		writeJSON(w, stripeError(http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL", ""))
	})
	e.srv = httptest.NewServer(e.check(mux))
	t.Cleanup(e.srv.Close)
	return e
}

// client returns an adapter for the emulator; timeout bounds one request.
func (e *emulator) client(t *testing.T, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(Config{SecretKey: e.secret, APIBase: e.srv.URL, Timeout: timeout})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// check records the request and checks what every request must carry.
func (e *emulator) check(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			e.t.Errorf("emulator: %s %s: unparsable form: %v", r.Method, r.URL.Path, err)
		}
		e.mu.Lock()
		e.requests = append(e.requests, emuRequest{Method: r.Method, Path: r.URL.Path,
			Key: r.Header.Get("Idempotency-Key"), Form: r.Form, Header: r.Header.Clone()})
		e.mu.Unlock()
		if got := r.Header.Get("Stripe-Version"); got != stripego.APIVersion {
			e.t.Errorf("emulator: %s %s: Stripe-Version %q, want %q", r.Method, r.URL.Path, got, stripego.APIVersion)
		}
		if h := r.Header.Get("X-Stripe-Client-Telemetry"); h != "" {
			e.t.Errorf("emulator: %s %s: telemetry header sent: %s", r.Method, r.URL.Path, h)
		}
		if r.Header.Get("Authorization") != "Bearer "+e.secret {
			writeJSON(w, stripeError(http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided", ""))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkParams fails the test on a parameter the endpoint does not take
// (allowed entries ending in "[" are prefixes).
func (e *emulator) checkParams(r *http.Request, form url.Values, allowed []string) bool {
	ok := true
	for name := range form {
		if !slices.ContainsFunc(allowed, func(a string) bool {
			return a == name || strings.HasSuffix(a, "[") && strings.HasPrefix(name, a)
		}) {
			e.t.Errorf("emulator: %s %s: unknown parameter %q", r.Method, r.URL.Path, name)
			ok = false
		}
	}
	return ok
}

// read serves a GET.
func (e *emulator) read(fn func(r *http.Request, q url.Values) answer, allowed ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !e.checkParams(r, r.Form, allowed) {
			writeJSON(w, stripeError(http.StatusBadRequest, "invalid_request_error", "parameter_unknown", "Received unknown parameter", ""))
			return
		}
		e.mu.Lock()
		if f := e.fault("", r.URL.Path); f != nil && f.kind == faultAnswer {
			e.mu.Unlock()
			writeJSON(w, answer{status: f.status, body: f.body})
			return
		}
		a := fn(r, r.Form)
		e.mu.Unlock()
		writeJSON(w, a)
	}
}

// write serves a POST the way Stripe does: check the key and parameters,
// apply a scripted fault, replay or refuse a used key, else execute once,
// store the answer and answer.
func (e *emulator) write(fn func(r *http.Request, form url.Values) answer, allowed ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		form := r.PostForm
		switch {
		case key == "":
			e.t.Errorf("emulator: %s %s without Idempotency-Key", r.Method, r.URL.Path)
			writeJSON(w, stripeError(http.StatusBadRequest, "invalid_request_error", "", "Idempotency-Key required here", ""))
			return
		case len(key) > 255:
			e.t.Errorf("emulator: %s %s: Idempotency-Key of %d characters", r.Method, r.URL.Path, len(key))
			writeJSON(w, stripeError(http.StatusBadRequest, "invalid_request_error", "", "Idempotency-Key too long", ""))
			return
		case len(r.URL.Query()) > 0:
			e.t.Errorf("emulator: %s %s: query string on a write: %s", r.Method, r.URL.Path, r.URL.RawQuery)
		}
		if !e.checkParams(r, form, allowed) {
			writeJSON(w, stripeError(http.StatusBadRequest, "invalid_request_error", "parameter_unknown", "Received unknown parameter", ""))
			return
		}
		fp := r.Method + " " + r.URL.Path + "?" + form.Encode()

		e.mu.Lock()
		f := e.fault(key, r.URL.Path)
		if f != nil && f.kind == faultAnswer {
			e.mu.Unlock()
			writeJSON(w, answer{status: f.status, body: f.body})
			return
		}
		if k, ok := e.keys[key]; ok {
			e.mu.Unlock()
			switch {
			case k.fingerprint != fp:
				writeJSON(w, stripeError(http.StatusBadRequest, "idempotency_error", "",
					"Keys for idempotent requests can only be used with the same parameters they were first used with.", ""))
			case !k.done:
				writeJSON(w, stripeError(http.StatusConflict, "invalid_request_error", "idempotency_key_in_use",
					"There is currently another in-progress request using this Idempotent Key.", ""))
			default:
				w.Header().Set("Idempotent-Replayed", "true")
				writeRaw(w, k.status, k.body)
			}
			return
		}
		k := &emuKey{fingerprint: fp}
		e.keys[key] = k
		if f != nil && f.kind == faultBlock {
			e.mu.Unlock()
			close(f.arrived)
			<-f.release
			e.mu.Lock()
		}
		a := fn(r, form)
		body, err := json.Marshal(a.body)
		if err != nil {
			e.t.Errorf("emulator: encoding answer: %v", err)
		}
		if a.noStore {
			delete(e.keys, key)
		} else {
			k.done, k.status, k.body = true, a.status, body
			if a.status/100 == 2 || a.status == http.StatusPaymentRequired {
				e.executed[key]++
			}
		}
		e.mu.Unlock()

		if f != nil && f.kind == faultHangAfterExecute {
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
				e.t.Errorf("emulator: %s %s: the client never gave up on a hanging answer", r.Method, r.URL.Path)
			}
			panic(http.ErrAbortHandler) // drop the connection, answer nothing
		}
		writeRaw(w, a.status, body)
	}
}

// fault returns the first armed fault matching a request and uses it up.
// Called with mu held.
func (e *emulator) fault(key, path string) *emuFault {
	for i, f := range e.faults {
		if (f.key == "" || f.key == key) && (f.path == "" || strings.HasSuffix(path, f.path)) {
			if f.skip > 0 {
				f.skip--
				continue
			}
			if f.count--; f.count <= 0 {
				e.faults = slices.Delete(e.faults, i, i+1)
			}
			return f
		}
	}
	return nil
}

// arm scripts a fault.
func (e *emulator) arm(f *emuFault) *emuFault {
	if f.count == 0 {
		f.count = 1
	}
	if f.kind == faultBlock {
		f.arrived, f.release = make(chan struct{}), make(chan struct{})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, f)
	return f
}

// answerWith arms a scripted error answer, before anything executes, for
// the next request with key on a path ending in path.
func (e *emulator) answerWith(key, path string, status int, errType, code, declineCode string) {
	a := stripeError(status, errType, code, "scripted answer", "")
	if declineCode != "" {
		a.body.(map[string]any)["error"].(map[string]any)["decline_code"] = declineCode
	}
	e.arm(&emuFault{kind: faultAnswer, key: key, path: path, status: status, body: a.body})
}

// executions returns how many writes with key Stripe executed.
func (e *emulator) executions(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.executed[key]
}

// recorded returns the requests received so far whose key starts with
// prefix ("" for all).
func (e *emulator) recorded(prefix string) []emuRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []emuRequest
	for _, r := range e.requests {
		if prefix == "" || strings.HasPrefix(r.Key, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// emuIDs numbers the objects of every emulator in the test binary, so two
// emulators (two accounts) never share an id.
var emuIDs atomic.Int64

// newID is a fresh Stripe-looking id.
func (e *emulator) newID(prefix string) string {
	return fmt.Sprintf("%s_emu%020d", prefix, emuIDs.Add(1))
}

// stripeError is an error answer in Stripe's shape.
func stripeError(status int, errType, code, msg, param string) answer {
	body := map[string]any{"type": errType, "message": msg}
	if code != "" {
		body["code"] = code
	}
	if param != "" {
		body["param"] = param
	}
	return answer{status: status, body: map[string]any{"error": body}}
}

// withIntent adds the PaymentIntent to an error answer, as Stripe does on
// PaymentIntent endpoints.
func withIntent(a answer, pi map[string]any) answer {
	a.body.(map[string]any)["error"].(map[string]any)["payment_intent"] = pi
	return a
}

func writeJSON(w http.ResponseWriter, a answer) {
	b, _ := json.Marshal(a.body)
	writeRaw(w, a.status, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_emulated")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
