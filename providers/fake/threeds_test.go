package fake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// returnURL is the shop's page the cardholder comes back to.
const returnURL = "https://shop.example/return?order=42"

// threeDSReq is an authorization charging method (pm_…) or card number,
// with the 3-D Secure parameters given.
func threeDSReq(t *testing.T, method, ret string, request bool) providers.AuthorizeRequest {
	req := authReq(t, 1234)
	if strings.HasPrefix(method, "pm_") {
		req.PaymentMethod = method
	} else {
		req = cardReq(t, 1234, method)
	}
	req.ReturnURL, req.RequestThreeDS = ret, request
	return req
}

// challenge authorizes req, which must be challenged, and returns the
// waiting hold.
func challenge(t *testing.T, c *fake.Client, req providers.AuthorizeRequest) providers.Hold {
	t.Helper()
	h, err := c.Authorize(t.Context(), req)
	if err != nil || h.Status != providers.StatusRequiresAction || h.NextActionURL == "" {
		t.Fatalf("Authorize: %+v, %v; want requires_action with a URL", h, err)
	}
	return h
}

// TestThreeDSMethodsAndCardsKeepStripesMeaning: each 3-D Secure test
// method and number, as a payment method and as a card, with and without
// a return URL and a request for authentication.
func TestThreeDSMethodsAndCardsKeepStripesMeaning(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{HoldLifetime: time.Hour})
	const (
		authorized = "authorized"
		challenged = "challenged"
		needsAuth  = providers.CodeAuthenticationRequired
	)
	// want: without a return URL, with one, with one and a request.
	for _, tc := range []struct {
		name, method string
		want         [3]string
	}{
		{"Required", "pm_card_threeDSecure2Required", [3]string{needsAuth, challenged, challenged}},
		{"RequiredCard", fake.TestCardThreeDSRequired, [3]string{needsAuth, challenged, challenged}},
		{"Optional", "pm_card_threeDSecureOptional", [3]string{authorized, authorized, challenged}},
		{"OptionalCard", fake.TestCardThreeDSOptional, [3]string{authorized, authorized, challenged}},
		{"IssuerInsists", "pm_card_authenticationRequired", [3]string{needsAuth, needsAuth, challenged}},
		{"IssuerInsistsCard", fake.TestCardAuthenticationRequired, [3]string{needsAuth, needsAuth, challenged}},
		{"Visa", "pm_card_visa", [3]string{authorized, authorized, challenged}},
		{"VisaCard", "4242424242424242", [3]string{authorized, authorized, challenged}},
		{"DeclineBeforeAnyChallenge", "pm_card_chargeDeclined", [3]string{providers.CodeCardDeclined, providers.CodeCardDeclined, providers.CodeCardDeclined}},
		{"DeclinedCardBeforeAnyChallenge", "4000000000009995", [3]string{providers.CodeInsufficientFunds, providers.CodeInsufficientFunds, providers.CodeInsufficientFunds}},
	} {
		for i, params := range []struct {
			ret     string
			request bool
		}{{"", false}, {returnURL, false}, {returnURL, true}} {
			t.Run(tc.name+[]string{"NoReturnURL", "ReturnURL", "RequestThreeDS"}[i], func(t *testing.T) {
				t.Parallel()
				h, err := c.Authorize(t.Context(), threeDSReq(t, tc.method, params.ret, params.request))
				switch want := tc.want[i]; want {
				case authorized:
					if err != nil || h.Status != providers.StatusAuthorized || h.NextActionURL != "" || h.CaptureBefore.IsZero() {
						t.Fatalf("%+v, %v; want authorized at once", h, err)
					}
				case challenged:
					if err != nil || h.Status != providers.StatusRequiresAction || !h.CaptureBefore.IsZero() {
						t.Fatalf("%+v, %v; want requires_action, nothing held", h, err)
					}
					prefix := r.URL() + "/3ds/" + h.Ref + "?token="
					if !strings.HasPrefix(h.NextActionURL, prefix) || len(h.NextActionURL) < len(prefix)+64 {
						t.Fatalf("NextActionURL %q, want %s<64 hex digits>", h.NextActionURL, prefix)
					}
					got, err := c.Lookup(t.Context(), h.Ref)
					if err != nil || got.Status != providers.StatusRequiresAction || got.NextActionURL != h.NextActionURL {
						t.Fatalf("Lookup %+v, %v; want requires_action with %s", got, err, h.NextActionURL)
					}
				default:
					wantKind(t, err, providers.KindDeclined, want)
					if h.Status != providers.StatusDeclined || h.DeclineCode != want || h.Ref == "" {
						t.Fatalf("declined hold %+v, want declined %s", h, want)
					}
				}
			})
		}
	}
}

func TestThreeDSParametersAreValidated(t *testing.T) {
	t.Parallel()
	_, c := start(t, fake.Config{})
	for name, req := range map[string]providers.AuthorizeRequest{
		"RequestWithoutReturnURL": threeDSReq(t, "pm_card_visa", "", true),
		"RelativeReturnURL":       threeDSReq(t, "pm_card_threeDSecure2Required", "/return", false),
		"JavascriptReturnURL":     threeDSReq(t, "pm_card_threeDSecure2Required", "javascript:alert(1)", false),
		"FTPReturnURL":            threeDSReq(t, "pm_card_threeDSecure2Required", "ftp://shop.example/", false),
		"CredentialsInReturnURL":  threeDSReq(t, "pm_card_threeDSecure2Required", "https://u:p@shop.example/", false),
		"HostThatEndsACSPSource":  threeDSReq(t, "pm_card_threeDSecure2Required", "https://shop.example;x/", false),
		"LongReturnURL":           threeDSReq(t, "pm_card_threeDSecure2Required", "https://shop.example/"+strings.Repeat("a", 2048), false),
	} {
		_, err := c.Authorize(t.Context(), req)
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Kind != providers.KindRejected || pe.Code != providers.CodeInvalidRequest {
			t.Errorf("%s: %v, want KindRejected invalid_request", name, err)
		}
	}
}

func TestThreeDSChallengeIsReplayedNeverRepeated(t *testing.T) {
	t.Parallel()

	t.Run("SameKeySameAnswer", func(t *testing.T) {
		t.Parallel()
		_, c := start(t, fake.Config{})
		req := threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false)
		first := challenge(t, c, req)
		again := challenge(t, c, req)
		if again != first {
			t.Fatalf("retry answered %+v, want the first answer %+v", again, first)
		}
		if ops := operations(t, c, req.Key); len(ops) != 1 || ops[0].Outcome != fake.OutcomeRequiresAction {
			t.Fatalf("operations %+v, want one authorize that asked for action", ops)
		}
		other := req
		other.ReturnURL = "https://shop.example/elsewhere"
		_, err := c.Authorize(t.Context(), other)
		wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
		other = req
		other.RequestThreeDS = true
		_, err = c.Authorize(t.Context(), other)
		wantKind(t, err, providers.KindRejected, providers.CodeIdempotencyMismatch)
	})

	t.Run("ConcurrentDuplicatesMakeOneChallenge", func(t *testing.T) {
		t.Parallel()
		_, c, rc := startHooked(t, fake.Config{})
		req := threeDSReq(t, fake.TestCardThreeDSRequired, returnURL, false)
		// The one that claims the key executes while holding it, so the
		// others find it in use and retry, as payorch would.
		inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultLatency, LatencyMS: 200, Count: 1, IdempotencyKey: req.Key})
		const n = 8
		holds := make([]providers.Hold, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				deadline := time.Now().Add(10 * time.Second)
				for {
					h, err := c.Authorize(t.Context(), req)
					if providers.KindOf(err) == providers.KindNotExecuted && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if err != nil {
						t.Errorf("Authorize: %v", err)
					}
					holds[i] = h
					return
				}
			})
		}
		wg.Wait()
		for i, h := range holds {
			if h.Status != providers.StatusRequiresAction || h != holds[0] {
				t.Fatalf("answer %d is %+v, want the one challenge %+v", i, h, holds[0])
			}
		}
		if ops := operations(t, c, req.Key); len(ops) != 1 {
			t.Fatalf("operations %+v, want one", ops)
		}
		day := time.Now().UTC().Add(-time.Hour)
		rows := 0
		for _, row := range report(t, c, day, day.Add(2*time.Hour)) {
			if row.PaymentID == req.PaymentID {
				rows++
				if row.Status != providers.StatusRequiresAction {
					t.Errorf("report row %+v, want requires_action", row)
				}
			}
		}
		if rows != 1 {
			t.Fatalf("the report lists %d holds of the payment, want 1", rows)
		}
		// No second requires_action event is on its way: events leave in
		// order, so once a later one (the failure) arrived, all earlier
		// ones have.
		if _, err := c.Authenticate(t.Context(), holds[0].Ref, false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the failure event", func() bool { return len(rc.types(holds[0].Ref)) >= 2 })
		if got := strings.Join(rc.types(holds[0].Ref), " "); got != fake.EventHoldRequiresAction+" "+fake.EventHoldPaymentFailed {
			t.Fatalf("events %s, want one requires_action then payment_failed", got)
		}
	})

	t.Run("FaultsOnTheConfirmationStillApply", func(t *testing.T) {
		t.Parallel()
		_, c := start(t, fake.Config{})
		req := threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false)
		inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute, Count: 1, IdempotencyKey: req.Key})
		_, err := c.Authorize(t.Context(), req)
		wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
		if ops := operations(t, c, req.Key); len(ops) != 0 {
			t.Fatalf("an error before executing ran %+v", ops)
		}
		first := challenge(t, c, req)

		lost := threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false)
		inject(t, c, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultTimeoutAfterExecute, Count: 1, IdempotencyKey: lost.Key})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = c.Authorize(ctx, lost)
		wantKind(t, err, providers.KindUnknown, "")
		retried := challenge(t, c, lost)
		if retried.Ref == first.Ref || retried.NextActionURL == first.NextActionURL {
			t.Fatalf("two payments share a challenge: %+v", retried)
		}
		if ops := operations(t, c, lost.Key); len(ops) != 1 {
			t.Fatalf("the lost answer's retry executed again: %+v", ops)
		}
	})
}

func TestAuthenticateByTheAdminAPI(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	_, c := start(t, fake.Config{Clock: clk.Now, HoldLifetime: time.Hour})
	ctx := t.Context()

	req := threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false)
	h := challenge(t, c, req)
	clk.Add(time.Minute)
	done, err := c.Authenticate(ctx, h.Ref, true)
	if err != nil || done.Status != providers.StatusAuthorized || !done.CaptureBefore.Equal(clk.Now().Add(time.Hour)) || done.NextActionURL != "" {
		t.Fatalf("Authenticate: %+v, %v; want authorized until an hour after the challenge", done, err)
	}
	if got, err := c.Lookup(ctx, h.Ref); err != nil || got != done {
		t.Fatalf("Lookup %+v, %v; want %+v", got, err, done)
	}
	_, err = c.Authenticate(ctx, h.Ref, false)
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	ops := operations(t, c, req.Key)
	if len(ops) != 2 || ops[1].Operation != fake.OpAuthenticate || ops[1].Outcome != fake.OutcomeSucceeded || ops[1].Ref != h.Ref {
		t.Fatalf("operations %+v, want the challenge, then one authentication", ops)
	}
	if _, err := c.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: h.Ref}); err != nil {
		t.Fatalf("capture after the challenge: %v", err)
	}

	failed := challenge(t, c, threeDSReq(t, "pm_card_authenticationRequired", returnURL, true))
	got, err := c.Authenticate(ctx, failed.Ref, false)
	if err != nil || got.Status != providers.StatusDeclined || got.DeclineCode != providers.CodeAuthenticationFailed || !got.CaptureBefore.IsZero() {
		t.Fatalf("failed challenge: %+v, %v; want declined authentication_failed", got, err)
	}
	if got, err := c.Lookup(ctx, failed.Ref); err != nil || got.Status != providers.StatusDeclined || got.DeclineCode != providers.CodeAuthenticationFailed {
		t.Fatalf("Lookup of the failed challenge: %+v, %v", got, err)
	}
	_, err = c.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: failed.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)

	plain := authorize(t, c, 1000)
	_, err = c.Authenticate(ctx, plain.Ref, true)
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	_, err = c.Authenticate(ctx, "fh_nope", true)
	wantKind(t, err, providers.KindRejected, providers.CodeNotFound)
}

func TestWaitingHoldCanBeCanceledNotCaptured(t *testing.T) {
	t.Parallel()
	_, c, rc := startHooked(t, fake.Config{})
	ctx := t.Context()
	h := challenge(t, c, threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false))
	_, err := c.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: h.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	_, err = c.ExtendHold(ctx, providers.ExtendRequest{Key: newKey(t), Ref: h.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)

	cancelReq := providers.CancelRequest{Key: newKey(t), Ref: h.Ref}
	canceled, err := c.Cancel(ctx, cancelReq)
	if err != nil || canceled.Status != providers.StatusCanceled || canceled.NextActionURL != "" {
		t.Fatalf("Cancel: %+v, %v; want canceled", canceled, err)
	}
	if again, err := c.Cancel(ctx, cancelReq); err != nil || again != canceled {
		t.Fatalf("Cancel replayed %+v, %v; want %+v", again, err, canceled)
	}
	if ops := operations(t, c, cancelReq.Key); len(ops) != 1 || ops[0].AmountMinor != 0 {
		t.Fatalf("cancel operations %+v, want one releasing nothing", ops)
	}
	_, err = c.Authenticate(ctx, h.Ref, true)
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	if got, err := c.Lookup(ctx, h.Ref); err != nil || got.Status != providers.StatusCanceled {
		t.Fatalf("Lookup: %+v, %v; want canceled", got, err)
	}
	// The refused capture executed, so it has its capture.failed event.
	waitFor(t, "the cancel event", func() bool { return len(rc.types(h.Ref)) == 3 })
	if got := strings.Join(rc.types(h.Ref), " "); got != "hold.requires_action capture.failed hold.canceled" {
		t.Fatalf("events %s", got)
	}
	for _, ev := range rc.events() {
		if ev.HoldRef == h.Ref && ev.Type == fake.EventHoldRequiresAction && ev.Kind != providers.WebhookRequiresAction {
			t.Errorf("requires_action event of kind %s", ev.Kind)
		}
	}
}

func TestPublicURLAndRestartKeepTheChallenge(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "fake.json")
	cfg := fake.Config{StateFile: file, PublicURL: "https://fake.example:8443/psp/"}
	r1, c1 := start(t, cfg)
	h := challenge(t, c1, threeDSReq(t, "pm_card_threeDSecure2Required", returnURL, false))
	if !strings.HasPrefix(h.NextActionURL, "https://fake.example:8443/psp/3ds/"+h.Ref+"?token=") {
		t.Fatalf("NextActionURL %s, want one under the public URL", h.NextActionURL)
	}
	shutdown(t, r1)
	_, c2 := start(t, cfg)
	if got, err := c2.Lookup(t.Context(), h.Ref); err != nil || got.NextActionURL != h.NextActionURL {
		t.Fatalf("after a restart: %+v, %v; want the same challenge", got, err)
	}
	if got, err := c2.Authenticate(t.Context(), h.Ref, true); err != nil || got.Status != providers.StatusAuthorized {
		t.Fatalf("completing after a restart: %+v, %v", got, err)
	}
	for _, bad := range []string{"ftp://fake.example", "https://fake.example/?a=b", "https://u:p@fake.example", "/relative"} {
		if _, err := fake.Start("", fake.Config{PublicURL: bad}); err == nil {
			t.Errorf("PublicURL %q accepted", bad)
		}
	}
}

// TestThreeDSOnTheWire: the confirmation carries return_url and
// request_three_d_secure too (replacing the create's), under its key's
// fingerprint, and answers the challenge as next_action.
func TestThreeDSOnTheWire(t *testing.T) {
	t.Parallel()
	r, _ := start(t, fake.Config{})
	key := newKey(t)
	hdr := map[string]string{"Idempotency-Key": key}
	created := do(t, http.MethodPost, r.URL()+"/v1/holds", hdr,
		[]byte(`{"amount_minor":500,"currency":"EUR","payment_method":"pm_card_threeDSecureOptional"}`))
	var h struct{ Ref string }
	if err := json.Unmarshal(created.body, &h); err != nil || h.Ref == "" {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	confirm := r.URL() + "/v1/holds/" + h.Ref + "/confirm"
	if got := do(t, http.MethodPost, confirm, hdr, []byte(`{"request_three_d_secure":true}`)); got.status != http.StatusBadRequest ||
		!strings.Contains(string(got.body), `"param":"request_three_d_secure"`) {
		t.Fatalf("request without a return_url: %d %s", got.status, got.body)
	}
	body := []byte(`{"return_url":"http://127.0.0.1:9/back","request_three_d_secure":true}`)
	first := do(t, http.MethodPost, confirm, hdr, body)
	var v struct {
		Status string         `json:"status"`
		Raw    map[string]any `json:"next_action"`
	}
	if err := json.Unmarshal(first.body, &v); err != nil || first.status != http.StatusOK || v.Status != "requires_action" ||
		v.Raw["type"] != "redirect_to_url" || v.Raw["return_url"] != "http://127.0.0.1:9/back" ||
		!strings.HasPrefix(v.Raw["url"].(string), r.URL()+"/3ds/"+h.Ref+"?token=") {
		t.Fatalf("confirm: %d %s", first.status, first.body)
	}
	again := do(t, http.MethodPost, confirm, hdr, body)
	if !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %s, want %s", again.body, first.body)
	}
	other := do(t, http.MethodPost, confirm, hdr, []byte(`{"return_url":"http://127.0.0.1:9/back"}`))
	if other.status != http.StatusBadRequest || !strings.Contains(string(other.body), providers.CodeIdempotencyMismatch) {
		t.Fatalf("other parameters under the key: %d %s", other.status, other.body)
	}
}

// TestClientSendsThreeDSOnCreateAndConfirm watches the Client's requests
// on their way to a real fake.
func TestClientSendsThreeDSOnCreateAndConfirm(t *testing.T) {
	t.Parallel()
	r, _ := start(t, fake.Config{})
	target, err := url.Parse(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	bodies := map[string]string{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		mu.Lock()
		bodies[path.Base(req.URL.Path)] = string(b)
		mu.Unlock()
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(hs.Close)
	c := fake.NewClient(hs.URL, nil).WithToken(testToken)
	sent := func(step string) string {
		mu.Lock()
		defer mu.Unlock()
		return bodies[step]
	}
	challenge(t, c, threeDSReq(t, "pm_card_visa", returnURL, true))
	for _, step := range []string{"holds", "confirm"} {
		if !strings.Contains(sent(step), `"return_url":"https://shop.example/return?order=42","request_three_d_secure":true`) {
			t.Errorf("%s sent %s", step, sent(step))
		}
	}
	if _, err := c.Authorize(t.Context(), authReq(t, 100)); err != nil {
		t.Fatal(err)
	}
	if sent("confirm") != "{}" {
		t.Errorf("a confirmation without 3-D Secure sent %s, want {} as before", sent("confirm"))
	}
}
