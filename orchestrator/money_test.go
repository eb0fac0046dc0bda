package orchestrator_test

// The harness of the money-path tests (authorize_test.go,
// operation_test.go, resolver_test.go): a Service on a real database,
// with the real fake provider served on loopback as its only provider,
// and keyed requests run through the idempotency protocol the
// way httpapi runs them (claim, execute, store a final answer or release
// the key).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// moneyStart is the time every money-path test starts at, on the clock
// the Service and the fake provider share.
var moneyStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// moneyWorld is a Service on a database of its own and a fake provider
// of its own per connector, on one settable clock. Tests that move the
// clock or run the resolver (which sweeps every tenant) have a world each;
// the others share one per group, each with a tenant of its own
// (newTenant), since a database takes a while to make.
type moneyWorld struct {
	svc *orchestrator.Service
	// hooks is the webhooks' service on the same database (withHooks
	// tunes it).
	hooks *webhooks.Service
	clk   *testkit.Clock
	fake  *fake.Client   // the first connector's fake
	gates *gatedProvider // the first connector's gates
	// fakes and gated are every connector's, by name.
	fakes map[string]*fake.Client
	gated map[string]*gatedProvider
	// cfg is the Service's configuration: instance makes another
	// Service on it, as a second serve instance would be.
	cfg orchestrator.Config
}

// instance is another Service on w's database, providers and clock, as
// another serve instance is.
func (w *moneyWorld) instance() *orchestrator.Service { return orchestrator.NewService(w.cfg) }

// newMoneyWorld builds a moneyWorld with one connector, fake. providerTimeout bounds each
// provider call (0: the Service's default); tests that make a call time
// out use a short one, since they wait it out.
func newMoneyWorld(t *testing.T, providerTimeout time.Duration) *moneyWorld {
	t.Helper()
	return newConnectorWorld(t, providerTimeout, nil, "fake")
}

// newConnectorWorld builds a moneyWorld with one connector per name, each
// a fake provider of its own (its own holds, faults and operations log);
// the first is the default. tune, when set, adjusts the Service's
// configuration before it is made.
func newConnectorWorld(t *testing.T, providerTimeout time.Duration, tune func(*orchestrator.Config), names ...string) *moneyWorld {
	t.Helper()
	clk := testkit.NewClock(moneyStart)
	w := &moneyWorld{clk: clk, fakes: map[string]*fake.Client{}, gated: map[string]*gatedProvider{}}
	provs := map[string]providers.Provider{}
	for _, name := range names {
		fr, err := fake.Start("127.0.0.1:0", fake.Config{Clock: clk.Now, TimeoutHang: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
		tr := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(tr.CloseIdleConnections)
		fc := fr.Client(&http.Client{Transport: tr})
		gates := &gatedProvider{Provider: fc, gates: map[string]chan struct{}{}}
		w.fakes[name], w.gated[name], provs[name] = fc, gates, gates
	}
	w.fake, w.gates = w.fakes[names[0]], w.gated[names[0]]
	cfg := orchestrator.Config{
		Pool: pgtest.DB(t), Clock: clk.Now, Lease: 30 * time.Second, ProviderTimeout: providerTimeout,
		Providers: provs, DefaultProvider: names[0],
	}
	if tune != nil {
		tune(&cfg)
	}
	w.svc, w.cfg = orchestrator.NewService(cfg), cfg
	w.hooks = webhooks.New(webhooks.Config{Pool: cfg.Pool, Clock: clk.Now})
	return w
}

// withHooks makes w's webhooks service anew, as tune configures it.
func (w *moneyWorld) withHooks(tune func(*webhooks.Config)) *moneyWorld {
	cfg := webhooks.Config{Pool: w.svc.Pool(), Clock: w.clk.Now}
	tune(&cfg)
	w.hooks = webhooks.New(cfg)
	return w
}

// gatedProvider is the fake provider's client with gates: an
// authorization carrying a gated forwarded key waits, before it is sent,
// until its gate opens. It is how a test keeps an execution in flight for
// as long as it needs, without guessing at sleeps.
type gatedProvider struct {
	providers.Provider
	mu    sync.Mutex
	gates map[string]chan struct{}
	// once marks gates that hold only the first call with their key.
	once map[string]bool
}

// Authorize waits for req.Key's gate, if any, then authorizes.
func (g *gatedProvider) Authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Hold, error) {
	g.mu.Lock()
	gate := g.gates[req.Key]
	if g.once[req.Key] {
		delete(g.gates, req.Key)
	}
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return providers.Hold{}, &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeProviderUnavailable,
				Message: "gate never opened", Err: ctx.Err()}
		}
	}
	return g.Provider.Authorize(ctx, req)
}

// ExtendHold extends through the fake (gates hold authorizations and
// refunds only).
func (g *gatedProvider) ExtendHold(ctx context.Context, req providers.ExtendRequest) (providers.Hold, error) {
	return g.Provider.(providers.HoldExtender).ExtendHold(ctx, req)
}

// IncrementAuthorization and FlexibleHolds go through to the fake.
func (g *gatedProvider) IncrementAuthorization(ctx context.Context, req providers.IncrementRequest) (providers.Hold, error) {
	return g.Provider.(providers.Incrementer).IncrementAuthorization(ctx, req)
}

func (g *gatedProvider) FlexibleHolds() providers.FlexSupport {
	return g.Provider.(providers.FlexibleHolds).FlexibleHolds()
}

// Refund waits for req.Key's gate, if any, then refunds.
func (g *gatedProvider) Refund(ctx context.Context, req providers.RefundRequest) (providers.Refund, error) {
	g.mu.Lock()
	gate := g.gates[req.Key]
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return providers.Refund{}, &providers.Error{Kind: providers.KindNotExecuted, Code: providers.CodeProviderUnavailable,
				Message: "gate never opened", Err: ctx.Err()}
		}
	}
	return g.Provider.Refund(ctx, req)
}

// gate closes the gate of authorizations of the request under the client
// key key, and returns the function that opens it.
func (e *moneyEnv) gate(key string) (open func()) {
	return e.gateOp(orchestrator.OpAuthorize, key)
}

// gateOp closes the gate of the provider calls of operation op (the
// authorization or a refund) under the client key key, and returns the
// function that opens it.
func (e *moneyEnv) gateOp(op, key string) (open func()) {
	fwd := providers.ForwardedKey(e.tenant, op, key)
	ch := make(chan struct{})
	e.gates.mu.Lock()
	e.gates.gates[fwd] = ch
	e.gates.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

// moneyEnv is one test's view of a world: its own tenant, so its keys,
// payments, forwarded keys (and so faults and the fake's operations log)
// are its alone.
type moneyEnv struct {
	*moneyWorld
	tenant int64
}

// newTenant returns an env on w with a new tenant named after t.
func (w *moneyWorld) newTenant(t *testing.T) *moneyEnv {
	t.Helper()
	tenant, _, _, err := w.svc.CreateTenant(context.Background(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return &moneyEnv{moneyWorld: w, tenant: tenant.ID}
}

// newMoneyEnv is a world of the test's own, and a tenant on it.
func newMoneyEnv(t *testing.T, providerTimeout time.Duration) *moneyEnv {
	t.Helper()
	return newMoneyWorld(t, providerTimeout).newTenant(t)
}

// answer is what one keyed request got.
type answer struct {
	out orchestrator.Outcome
	err error
	// replay is the stored answer the key replayed; nothing executed.
	replay *orchestrator.StoredResponse
	// claim is the claim the request executed under (nil for a replay or
	// a refusal by BeginIdempotent).
	claim *orchestrator.Claim
	// stored is what the key holds after the request, nil when the key
	// was released for a retry (pending and provider_unavailable).
	stored *orchestrator.StoredResponse
}

// code is the error code of the answer ("" for none).
func (a answer) code() orchestrator.Code { return orchestrator.ErrorCode(a.err) }

// render is the final answer to an authorization with this outcome, as
// the domain decides it (orchestrator.Claim.Answer) and httpapi sends and
// stores it; ok is false for what is not stored.
func render(out orchestrator.Outcome, err error) (orchestrator.StoredResponse, bool) {
	c := &orchestrator.Claim{Operation: orchestrator.OpAuthorize}
	res, final, aerr := c.Answer(out.Payment.ID, out, err)
	return res, final && aerr == nil
}

// keyed runs one request of operation op about payment id under key with
// the idempotency protocol, exec being the money method. Safe to call
// from goroutines: it reports protocol failures with t.Errorf.
func (e *moneyEnv) keyed(t *testing.T, op, id, key string, fp orchestrator.Fingerprint,
	exec func(context.Context, *orchestrator.Claim) (orchestrator.Outcome, error)) answer {
	ctx := context.Background()
	b, err := e.svc.BeginIdempotent(ctx, orchestrator.IdempotencyRequest{TenantID: e.tenant, Operation: op, Key: key, Fingerprint: fp})
	if err != nil {
		return answer{err: err}
	}
	if b.Replay != nil {
		return answer{replay: b.Replay}
	}
	c := b.Claim
	a := answer{claim: c}
	a.out, a.err = exec(ctx, c)
	if done := c.Completed(); done != nil { // stored by Authorize's settling statement
		a.stored = done
		return a
	}
	res, final, err := c.Answer(id, a.out, a.err)
	if err != nil {
		t.Errorf("answer of key %q: %v", key, err)
	}
	if final {
		if err := e.svc.CompleteIdempotent(ctx, c, id, res); err != nil {
			t.Errorf("complete key %q: %v", key, err)
		}
		a.stored = &res
		return a
	}
	if err := e.svc.ReleaseIdempotent(ctx, c); err != nil {
		t.Errorf("release key %q: %v", key, err)
	}
	return a
}

// fingerprint is the request's fingerprint; body must be valid JSON.
func fingerprint(t *testing.T, op string, params map[string]string, body string) orchestrator.Fingerprint {
	fp, err := orchestrator.NewFingerprint(op, params, []byte(body))
	if err != nil {
		t.Errorf("fingerprint of %s: %v", body, err)
	}
	return fp
}

// authorizeBody is the body of an authorization, as httpapi decodes it.
type authorizeBody struct {
	AmountMinor                     int64             `json:"amount_minor"`
	Currency                        string            `json:"currency"`
	Provider                        string            `json:"provider"`
	PaymentMethod                   string            `json:"payment_method"`
	Description                     string            `json:"description"`
	Metadata                        map[string]string `json:"metadata"`
	ReturnURL                       string            `json:"return_url"`
	RequestIncrementalAuthorization bool              `json:"request_incremental_authorization"`
	RequestMulticapture             bool              `json:"request_multicapture"`
	RequestOvercapture              bool              `json:"request_overcapture"`
}

// authorize sends POST /v1/payments with body under key.
func (e *moneyEnv) authorize(t *testing.T, key, body string) answer {
	var in authorizeBody
	if err := json.Unmarshal([]byte(body), &in); err != nil {
		t.Errorf("authorize body %s: %v", body, err)
	}
	fp := fingerprint(t, orchestrator.OpAuthorize, nil, body)
	return e.keyed(t, orchestrator.OpAuthorize, orchestrator.PaymentID(e.tenant, key), key, fp, func(ctx context.Context, c *orchestrator.Claim) (orchestrator.Outcome, error) {
		return e.svc.Authorize(ctx, c, orchestrator.AuthorizeInput{
			TenantID: e.tenant, Key: key, Fingerprint: fp, AmountMinor: in.AmountMinor, Currency: in.Currency,
			Provider: in.Provider, PaymentMethod: in.PaymentMethod, Description: in.Description, Metadata: in.Metadata,
			ReturnURL: in.ReturnURL, RequestIncrementalAuthorization: in.RequestIncrementalAuthorization,
			RequestMulticapture: in.RequestMulticapture, RequestOvercapture: in.RequestOvercapture,
		})
	})
}

// authorized authorizes amount EUR under key and fails the test unless
// the payment is authorized.
func (e *moneyEnv) authorized(t *testing.T, key string, amount int64) orchestrator.Payment {
	t.Helper()
	a := e.authorize(t, key, fmt.Sprintf(`{"amount_minor":%d,"currency":"EUR"}`, amount))
	if a.err != nil || a.out.Payment.Status != orchestrator.StatusAuthorized {
		t.Fatalf("authorize %s: %+v %v", key, a.out.Payment, a.err)
	}
	return a.out.Payment
}

// captured authorizes and captures amount EUR under key.
func (e *moneyEnv) captured(t *testing.T, key string, amount int64) orchestrator.Payment {
	t.Helper()
	p := e.authorized(t, key, amount)
	a := e.capture(t, p.ID, key+"-capture", `{}`)
	if a.err != nil || a.out.Payment.Status != orchestrator.StatusCaptured {
		t.Fatalf("capture %s: %+v %v", p.ID, a.out.Payment, a.err)
	}
	return a.out.Payment
}

type operationMethod func(*orchestrator.Service, context.Context, *orchestrator.Claim, orchestrator.OperationInput) (orchestrator.Outcome, error)

// operation sends capture, cancel or refund (op) of payment id with body
// ({} or {"amount_minor":N}) under key.
func (e *moneyEnv) operation(t *testing.T, op string, do operationMethod, id, key, body string) answer {
	var in struct {
		AmountMinor   int64 `json:"amount_minor"`
		IncreaseMinor int64 `json:"increase_minor"`
		FinalCapture  *bool `json:"final_capture"`
	}
	if err := json.Unmarshal([]byte(body), &in); err != nil {
		t.Errorf("%s body %s: %v", op, body, err)
	}
	notFinal := in.FinalCapture != nil && !*in.FinalCapture
	fp := fingerprint(t, op, map[string]string{"id": id}, body)
	return e.keyed(t, op, id, key, fp, func(ctx context.Context, c *orchestrator.Claim) (orchestrator.Outcome, error) {
		return do(e.svc, ctx, c, orchestrator.OperationInput{TenantID: e.tenant, PaymentID: id, Key: key,
			AmountMinor: in.AmountMinor, NotFinal: notFinal, IncreaseMinor: in.IncreaseMinor})
	})
}

func (e *moneyEnv) capture(t *testing.T, id, key, body string) answer {
	return e.operation(t, orchestrator.OpCapture, (*orchestrator.Service).Capture, id, key, body)
}

func (e *moneyEnv) cancel(t *testing.T, id, key string) answer {
	return e.operation(t, orchestrator.OpCancel, (*orchestrator.Service).Cancel, id, key, `{}`)
}

func (e *moneyEnv) refund(t *testing.T, id, key, body string) answer {
	return e.operation(t, orchestrator.OpRefund, (*orchestrator.Service).Refund, id, key, body)
}

// payment reads a payment as stored.
func (e *moneyEnv) payment(t *testing.T, id string) orchestrator.Payment {
	t.Helper()
	p, err := e.svc.GetPayment(context.Background(), orchestrator.Scope{TenantID: e.tenant}, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return p
}

// history is a payment's events, one line each: "state_changed
// pending>authorized" or "provider_call capture ok".
func (e *moneyEnv) history(t *testing.T, id string) []string {
	t.Helper()
	evs, err := e.svc.PaymentEvents(context.Background(), orchestrator.Scope{TenantID: e.tenant}, id)
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	out := make([]string, len(evs))
	for i, ev := range evs {
		switch ev.Type {
		case "state_changed":
			out[i] = ev.Type + " " + deref(ev.FromStatus) + ">" + deref(ev.ToStatus)
		default:
			out[i] = ev.Type + " " + deref(ev.Operation) + " " + deref(ev.Outcome)
		}
	}
	return out
}

// wantHistory fails the test unless payment id's history is want.
func (e *moneyEnv) wantHistory(t *testing.T, id string, want ...string) {
	t.Helper()
	if got := e.history(t, id); !slices.Equal(got, want) {
		t.Fatalf("history of %s:\n got  %s\n want %s", id, strings.Join(got, " | "), strings.Join(want, " | "))
	}
}

// fakeOps returns the operations the fake provider executed for the
// request of operation op under the client key key (by its forwarded
// key): replays and requests a fault stopped are not in it.
func (e *moneyEnv) fakeOps(t *testing.T, op, key string) []fake.Operation {
	t.Helper()
	ops, err := e.fake.Operations(context.Background(), providers.ForwardedKey(e.tenant, op, key))
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// holds returns every hold the fake provider has for payment id, whatever
// its status (a hold created but never confirmed too), from its report.
func (e *moneyEnv) holds(t *testing.T, id string) []providers.ReportRow {
	t.Helper()
	var out []providers.ReportRow
	req := providers.ReportRequest{From: moneyStart.Add(-time.Hour), To: e.clk.Now().Add(time.Hour)}
	err := e.fake.Report(context.Background(), req, func(r providers.ReportRow) error {
		if r.PaymentID == id {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantOneHold fails the test unless the fake holds exactly one hold for
// payment p, with p's reference, in status want.
func (e *moneyEnv) wantOneHold(t *testing.T, p orchestrator.Payment, want providers.Status) providers.ReportRow {
	t.Helper()
	hs := e.holds(t, p.ID)
	if len(hs) != 1 || p.ProviderRef == nil || hs[0].Ref != *p.ProviderRef || hs[0].Status != want {
		t.Fatalf("holds at the provider for %s (ref %v): %+v, want one %s", p.ID, p.ProviderRef, hs, want)
	}
	return hs[0]
}

// arm arms a fault at the fake for the request of operation op under
// the client key key (its forwarded key), on the provider operation
// target.
func (e *moneyEnv) arm(t *testing.T, op, key string, f fake.Fault) {
	t.Helper()
	f.IdempotencyKey = providers.ForwardedKey(e.tenant, op, key)
	if err := e.fake.InjectFault(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

// lookup reads payment p's hold at the fake provider.
func (e *moneyEnv) lookup(t *testing.T, p orchestrator.Payment) providers.Hold {
	t.Helper()
	h, err := e.fake.Lookup(context.Background(), *p.ProviderRef)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantRefusal fails the test unless err is an *orchestrator.Error with
// code, naming param ("" for none).
func wantRefusal(t *testing.T, err error, code orchestrator.Code, param string) {
	t.Helper()
	var appErr *orchestrator.Error
	if !errors.As(err, &appErr) || appErr.Code != code || appErr.Param != param {
		t.Fatalf("got %v (%+v), want %s on %q", err, appErr, code, param)
	}
}

// count runs a count(*) query.
func (e *moneyEnv) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.svc.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sameJSON fails the test unless a and b marshal to the same JSON.
func sameJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("%s:\n got  %s\n want %s", what, ja, jb)
	}
}
