package stripe

import (
	"bufio"
	"context"
	"fmt"
	"go/build"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
)

// stripeMockVersion is the stripe-mock .ci/run installs.
const stripeMockVersion = "v0.203.0"

// TestStripeMockAcceptsEveryRequest validates the request shapes against
// the real stripe-mock, which checks every request against Stripe's
// OpenAPI spec (unknown or malformed parameters are a 400) and answers
// fixtures: every adapter call must get only 2xx answers and parse. It is
// stateless and ignores idempotency, so only shapes are checked here; the
// behaviour is TestProvider's.
func TestStripeMockAcceptsEveryRequest(t *testing.T) {
	t.Parallel()
	base := startStripeMock(t)
	cards := &stripeMockCards{base: base, next: http.DefaultTransport}
	rec := &statusRecorder{next: cards}
	c, err := New(Config{SecretKey: "sk_test_123", APIBase: base, HTTPClient: &http.Client{Transport: rec, Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := t.Context()
	// stripe-mock answers any id on a path with its fixture.
	const ref = "pi_1PgafyB7WZ01zgkWSjxsAJo3"
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Authorize", func() error {
			req := authReq(1234)
			req.OnReference = func(_ context.Context, ref string) error {
				if !strings.HasPrefix(ref, "pi_") {
					return fmt.Errorf("reference %q", ref)
				}
				return nil
			}
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeExtended", func() error {
			req := authReq(1234)
			req.ExtendedAuthorization = true
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeWithReturnURL", func() error {
			req := authReq(1234)
			req.ReturnURL = "https://shop.example/return?order=17"
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeRequestThreeDSExtended", func() error {
			req := authReq(1234)
			req.ReturnURL, req.RequestThreeDS, req.ExtendedAuthorization = "https://shop.example/return", true, true
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeCardWithReturnURL", func() error {
			req := cardAuthReq(1234, "4000000000003220")
			req.ReturnURL, req.RequestThreeDS = "https://shop.example/return", true
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeCard", func() error {
			before := cards.checked.Load()
			_, err := c.Authorize(ctx, cardAuthReq(1234, "4242424242424242"))
			if err == nil && cards.checked.Load() == before {
				err = fmt.Errorf("no confirmation carried the card")
			}
			return err
		}},
		{"AuthorizeCardWithoutCVCOrHolder", func() error {
			req := cardAuthReq(1234, "378282246310005")
			req.Card.CVC, req.Card.HolderName = "", ""
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeFlexible", func() error {
			req := authReq(1234)
			req.RequestIncrementalAuthorization, req.RequestMulticapture, req.RequestOvercapture = true, true, true
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"AuthorizeCardFlexibleExtended", func() error {
			req := cardAuthReq(1234, "4242424242424242")
			req.RequestMulticapture, req.ExtendedAuthorization = true, true
			_, err := c.Authorize(ctx, req)
			return err
		}},
		{"IncrementAuthorization", func() error {
			// stripe-mock answers this route with a fixture of its own id.
			_, err := c.IncrementAuthorization(ctx, providers.IncrementRequest{Key: fwdKey("increment"), Ref: ref, AmountMinor: 2000})
			return err
		}},
		{"CapturePartNotFinal", func() error {
			_, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: ref, AmountMinor: 500, NotFinal: true})
			return err
		}},
		{"CaptureOver", func() error {
			_, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: ref, AmountMinor: 1_000_000})
			return err
		}},
		{"ExtendExtended", func() error {
			_, err := c.ExtendHold(ctx, providers.ExtendRequest{Key: fwdKey("extend"), Ref: ref, ExtendedAuthorization: true})
			return err
		}},
		{"CaptureAll", func() error {
			_, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: ref})
			return err
		}},
		{"CapturePart", func() error {
			_, err := c.Capture(ctx, providers.CaptureRequest{Key: fwdKey("capture"), Ref: ref, AmountMinor: 500})
			return err
		}},
		{"Cancel", func() error {
			_, err := c.Cancel(ctx, providers.CancelRequest{Key: fwdKey("cancel"), Ref: ref})
			return err
		}},
		{"RefundPart", func() error {
			_, err := c.Refund(ctx, providers.RefundRequest{Key: fwdKey("refund"), Ref: ref, AmountMinor: 100})
			return err
		}},
		{"RefundRest", func() error {
			_, err := c.Refund(ctx, providers.RefundRequest{Key: fwdKey("refund"), Ref: ref})
			return err
		}},
		{"Lookup", func() error {
			h, err := c.Lookup(ctx, ref)
			if err == nil && h.Ref != ref {
				err = fmt.Errorf("looked up %q, got %q", ref, h.Ref)
			}
			return err
		}},
		{"Report", func() error {
			rows := 0
			now := time.Now()
			err := c.Report(ctx, providers.ReportRequest{From: now.Add(-24 * time.Hour), To: now},
				func(providers.ReportRow) error { rows++; return nil })
			if err == nil && rows == 0 {
				err = fmt.Errorf("no rows from stripe-mock's fixtures")
			}
			return err
		}},
		{"BalanceTransactions", func() error {
			var bts []providers.BalanceTransaction
			now := time.Now()
			err := c.BalanceTransactions(ctx, providers.ReportRequest{From: now.Add(-24 * time.Hour), To: now},
				func(bt providers.BalanceTransaction) error { bts = append(bts, bt); return nil })
			switch {
			case err != nil:
			case len(bts) == 0:
				err = fmt.Errorf("no balance transactions from stripe-mock's fixtures")
			case bts[0].ID == "" || bts[0].Currency == "" || bts[0].Type == "":
				err = fmt.Errorf("balance transaction %+v", bts[0])
			case !slices.ContainsFunc(rec.since(0), func(a recordedAnswer) bool {
				return strings.Contains(a.request, "/v1/balance_transactions?") && strings.Contains(a.request, "payout=po_")
			}):
				// The fixture payout is automatic: its transactions are
				// listed with the payout filter.
				err = fmt.Errorf("no list of a payout's transactions was sent")
			}
			return err
		}},
		{"PayoutItems", func() error {
			var bts []providers.BalanceTransaction
			const po = "po_1PgafyB7WZ01zgkW0CyCRzSj"
			err := c.PayoutItems(ctx, po, func(bt providers.BalanceTransaction) error { bts = append(bts, bt); return nil })
			switch {
			case err != nil:
			case len(bts) == 0:
				err = fmt.Errorf("no balance transactions from stripe-mock's fixtures")
			case bts[0].ID == "" || bts[0].Currency == "" || bts[0].PayoutID != po:
				err = fmt.Errorf("balance transaction %+v", bts[0])
			case !slices.ContainsFunc(rec.since(0), func(a recordedAnswer) bool {
				return strings.Contains(a.request, "/v1/balance_transactions?") && strings.Contains(a.request, "payout="+po) &&
					strings.Contains(a.request, "expand")
			}):
				err = fmt.Errorf("no list of the payout's transactions with their sources was sent")
			}
			return err
		}},
		{"Payouts", func() error {
			var pos []providers.Payout
			now := time.Now()
			err := c.Payouts(ctx, providers.ReportRequest{From: now.Add(-24 * time.Hour), To: now},
				func(po providers.Payout) error { pos = append(pos, po); return nil })
			switch {
			case err != nil:
			case len(pos) == 0:
				err = fmt.Errorf("no payouts from stripe-mock's fixtures")
			case pos[0].ID == "" || pos[0].Currency == "" || pos[0].Status == "":
				err = fmt.Errorf("payout %+v", pos[0])
			}
			return err
		}},
	} {
		before := rec.count()
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		for _, r := range rec.since(before) {
			if r.status/100 != 2 {
				t.Errorf("%s: %s answered %d: %s", tc.name, r.request, r.status, r.body)
			}
		}
		if rec.count() == before {
			t.Errorf("%s sent no request", tc.name)
		}
	}
}

// startStripeMock runs stripe-mock on loopback only (HTTP on a free port,
// HTTPS on a unix socket, so nothing listens on every interface) for the
// test and returns its base URL. A missing binary fails the test: CI
// installs it.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin := findStripeMock()
	if bin == "" {
		t.Fatalf("stripe-mock not found in PATH or $(go env GOPATH)/bin: run .ci/run, or "+
			"`go install github.com/stripe/stripe-mock@%s`", stripeMockVersion)
	}
	dir, err := os.MkdirTemp("", "stripemock") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-unix", filepath.Join(dir, "https.sock"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	listening := regexp.MustCompile(`Listening for HTTP at address: (127\.0\.0\.1:\d+)`)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			logMu.Lock()
			log.WriteString(s.Text() + "\n")
			logMu.Unlock()
			if m := listening.FindStringSubmatch(s.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(60 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("stripe-mock did not say where it listens within 60s; it printed:\n%s", log.String())
		return ""
	}
}

// findStripeMock looks for the binary in PATH, then in $(go env GOPATH)/bin.
func findStripeMock() string {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	var dirs []string
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.SplitList(strings.TrimSpace(string(out)))...)
	}
	dirs = append(dirs, filepath.SplitList(build.Default.GOPATH)...)
	for _, d := range dirs {
		p := filepath.Join(d, "bin", "stripe-mock")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// statusRecorder is a RoundTripper that notes every answer's status.
type statusRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []recordedAnswer
}

type recordedAnswer struct {
	request string
	status  int
	body    string
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	a := recordedAnswer{request: req.Method + " " + req.URL.RequestURI(), status: resp.StatusCode}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		a.body = string(b)
		resp.Body = io.NopCloser(strings.NewReader(a.body))
	}
	r.mu.Lock()
	r.seen = append(r.seen, a)
	r.mu.Unlock()
	return resp, nil
}

func (r *statusRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *statusRecorder) since(n int) []recordedAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedAnswer(nil), r.seen[n:]...)
}

// stripeMockCards lets stripe-mock check a confirmation that carries a card
// as payment_method_data. Stripe keeps raw card parameters out of its
// public OpenAPI spec, hence out of stripe-go's types and out of what
// stripe-mock accepts (payment_method_data[type]=card is "not in
// enumeration" there), while its API takes them from an account enabled
// for raw card data (card.go). The card hash of payment_method_data is the
// one POST /v1/payment_methods takes, which the spec does describe: the
// transport sends it there, for stripe-mock to check type, card[number],
// card[exp_month], card[exp_year], card[cvc] and billing_details[name],
// then sends the rest of the confirmation on, with payment_method=
// pm_card_visa in the card's place. A refusal of either is the answer.
type stripeMockCards struct {
	base    string
	next    http.RoundTripper
	checked atomic.Int32
}

func (s *stripeMockCards) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/confirm") || req.Body == nil {
		return s.next.RoundTrip(req)
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, err
	}
	card, rest := url.Values{}, url.Values{}
	for name, vs := range form {
		if inner, ok := strings.CutPrefix(name, "payment_method_data["); ok {
			// payment_method_data[card][number] is card[number].
			key, tail, _ := strings.Cut(inner, "]")
			card[key+tail] = vs
			continue
		}
		rest[name] = vs
	}
	if len(card) > 0 {
		pm, err := http.NewRequestWithContext(req.Context(), http.MethodPost, s.base+"/v1/payment_methods", strings.NewReader(card.Encode()))
		if err != nil {
			return nil, err
		}
		pm.Header = req.Header.Clone()
		pm.Header.Del("Idempotency-Key")
		resp, err := s.next.RoundTrip(pm)
		if err != nil || resp.StatusCode/100 != 2 {
			return resp, err
		}
		resp.Body.Close()
		s.checked.Add(1)
		rest.Set("payment_method", "pm_card_visa")
	}
	body := rest.Encode()
	out := req.Clone(req.Context())
	out.Body, out.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	out.GetBody = nil
	return s.next.RoundTrip(out)
}
