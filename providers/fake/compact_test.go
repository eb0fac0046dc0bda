package fake_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// write is one keyed request and its first answer.
type write struct {
	path, key string
	body      []byte
	first     rawResponse
}

// writer sends keyed requests over raw HTTP and remembers them with their
// answers, to replay them later.
type writer struct {
	t      *testing.T
	base   string
	writes []write
}

// post sends body to path under key (a fresh one when empty) and returns
// the answer, which must have status want.
func (w *writer) post(path, key string, body string, want int) rawResponse {
	w.t.Helper()
	if key == "" {
		key = newKey(w.t)
	}
	res := do(w.t, http.MethodPost, w.base+path, map[string]string{"Idempotency-Key": key}, []byte(body))
	if res.status != want {
		w.t.Fatalf("POST %s: %d %s, want %d", path, res.status, res.body, want)
	}
	w.writes = append(w.writes, write{path: path, key: key, body: []byte(body), first: res})
	return res
}

// hold creates and confirms a hold of body (confirm answers want) and
// returns its reference.
func (w *writer) hold(body string, want int) string {
	w.t.Helper()
	key := newKey(w.t)
	var h struct{ Ref string }
	if err := json.Unmarshal(w.post("/v1/holds", key, body, http.StatusOK).body, &h); err != nil {
		w.t.Fatal(err)
	}
	w.post("/v1/holds/"+h.Ref+"/confirm", key, "", want)
	return h.Ref
}

// readAll is every read answer of the fake about refs, by name: lookups,
// the report, the money listings and the operations log.
func readAll(t *testing.T, base string, refs []string, from, to time.Time) map[string]rawResponse {
	t.Helper()
	window := "?from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339))
	paths := []string{"/v1/report" + window, "/v1/balance_transactions" + window, "/v1/payouts" + window, "/_admin/operations"}
	for _, ref := range append(slices.Clone(refs), "fh_never_seen") {
		paths = append(paths, "/v1/holds/"+ref)
	}
	out := map[string]rawResponse{}
	for _, p := range paths {
		out[p] = do(t, http.MethodGet, base+p, nil, nil)
	}
	return out
}

// TestCompactionKeepsEveryAnswer packs holds of every kind and checks that
// the fake answers exactly as before, byte for byte: lookups, replays of
// every key, a key reused with other parameters, the report, the balance
// transactions, the payouts, the operations log; and that a write to a
// packed hold still works.
func TestCompactionKeepsEveryAnswer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)
	clk := testkit.NewClock(t0)
	// The loop never runs by itself here: Compact does, when asked.
	r, c := start(t, fake.Config{Clock: clk.Now, HoldLifetime: 3 * time.Hour, HoldRetention: time.Hour, CompactEvery: time.Hour})
	w := &writer{t: t, base: r.URL()}
	meta := `"metadata":{"payment_id":"pay_%s","tenant_id":"7"}`
	body := func(amount, extra string) string {
		return `{"amount_minor":` + amount + `,"currency":"EUR",` + strings.ReplaceAll(meta, "%s", amount) + extra + `}`
	}

	captured := w.hold(body("1000", ""), http.StatusOK)
	w.post("/v1/holds/"+captured+"/capture", "", "", http.StatusOK)
	clk.Add(time.Minute)
	refunded := w.hold(body("3000", `,"description":"partly refunded"`), http.StatusOK)
	w.post("/v1/holds/"+refunded+"/capture", "", `{"amount_minor":2000}`, http.StatusOK)
	captureKey := w.writes[len(w.writes)-1].key
	w.post("/v1/holds/"+refunded+"/refunds", "", `{"amount_minor":500}`, http.StatusOK)
	canceled := w.hold(body("700", ""), http.StatusOK)
	w.post("/v1/holds/"+canceled+"/cancel", "", "", http.StatusOK)
	w.post("/v1/holds/"+canceled+"/capture", "", "", http.StatusBadRequest) // state_conflict, stored
	declined := w.hold(body("400", `,"payment_method":"pm_card_chargeDeclined"`), http.StatusPaymentRequired)
	multi := w.hold(body("5000", `,"request_multicapture":true,"request_incremental_authorization":true`), http.StatusOK)
	w.post("/v1/holds/"+multi+"/increment", "", `{"amount_minor":6000}`, http.StatusOK)
	w.post("/v1/holds/"+multi+"/capture", "", `{"amount_minor":1000,"final_capture":false}`, http.StatusOK)
	w.post("/v1/holds/"+multi+"/capture", "", `{"amount_minor":2000}`, http.StatusOK)
	card := w.hold(body("1200", `,"card":{"number":"4242424242424242","exp_month":12,"exp_year":2040,"cvc":"123"}`), http.StatusOK)
	w.post("/v1/holds/"+card+"/capture", "", "", http.StatusOK)
	challenged := w.hold(body("800", `,"payment_method":"pm_card_threeDSecure2Required","return_url":"https://shop.example/back"`), http.StatusOK)
	if _, err := c.Authenticate(t.Context(), challenged, true); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	w.post("/v1/holds/"+challenged+"/capture", "", "", http.StatusOK)
	lapsed := w.hold(body("900", ""), http.StatusOK) // never captured: expires
	var created struct{ Ref string }
	_ = json.Unmarshal(w.post("/v1/holds", "", body("100", ""), http.StatusOK).body, &created) // never confirmed
	if _, err := c.Seed(t.Context(), slices.Values([]fake.SeedHold{{Ref: "fh_seeded_compact", PaymentID: "pay_seeded",
		Status: providers.StatusPartiallyRefunded, AmountMinor: 900, CapturedMinor: 900, RefundedMinor: 100, Currency: "EUR", CreatedAt: t0}})); err != nil {
		t.Fatalf("Seed: %v", err)
	}
	if _, err := c.OpenDispute(t.Context(), fake.Dispute{HoldRef: captured, AmountMinor: 300}); err != nil {
		t.Fatalf("OpenDispute: %v", err)
	}
	refs := []string{captured, refunded, canceled, declined, multi, card, challenged, lapsed, created.Ref, "fh_seeded_compact"}
	mismatchPath := "/v1/holds/" + refunded + "/capture"
	mismatch := func() rawResponse {
		return do(t, http.MethodPost, r.URL()+mismatchPath, map[string]string{"Idempotency-Key": captureKey}, []byte(`{"amount_minor":1}`))
	}

	// Past the retention and the lapse; three days on, so payouts are
	// made too.
	clk.Add(72 * time.Hour)
	from, to := t0.Add(-24*time.Hour), t0.Add(96*time.Hour)
	before := readAll(t, r.URL(), refs, from, to)
	mismatchBefore := mismatch()
	if mismatchBefore.status != http.StatusBadRequest {
		t.Fatalf("the key with another amount: %d %s", mismatchBefore.status, mismatchBefore.body)
	}

	if n := r.Server().Compact(); n != len(refs) {
		t.Fatalf("Compact packed %d holds, want %d", n, len(refs))
	}
	if n := r.Server().Compact(); n != 0 {
		t.Fatalf("a second Compact packed %d holds, want none", n)
	}

	after := readAll(t, r.URL(), refs, from, to)
	for p, want := range before {
		if got := after[p]; got.status != want.status || !bytes.Equal(got.body, want.body) {
			t.Errorf("GET %s packed:\n%d %s\nwant\n%d %s", p, got.status, got.body, want.status, want.body)
		}
	}
	for _, wr := range w.writes {
		got := do(t, http.MethodPost, r.URL()+wr.path, map[string]string{"Idempotency-Key": wr.key}, wr.body)
		if got.status != wr.first.status || !bytes.Equal(got.body, wr.first.body) || got.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("POST %s replayed packed: %d %s (replayed %q)\nwant the first answer %d %s",
				wr.path, got.status, got.body, got.header.Get("Idempotent-Replayed"), wr.first.status, wr.first.body)
		}
	}
	if got := mismatch(); got.status != mismatchBefore.status || !bytes.Equal(got.body, mismatchBefore.body) {
		t.Errorf("the key with another amount, packed: %d %s, want %d %s", got.status, got.body, mismatchBefore.status, mismatchBefore.body)
	}
	if ops := do(t, http.MethodGet, r.URL()+"/_admin/operations", nil, nil); !bytes.Equal(ops.body, before["/_admin/operations"].body) {
		t.Errorf("the replays executed something:\n%s\nwant\n%s", ops.body, before["/_admin/operations"].body)
	}

	// A write unpacks the hold: the rest of the captured hold is
	// refunded, once.
	rf := w.post("/v1/holds/"+refunded+"/refunds", "", "", http.StatusOK)
	if !strings.Contains(string(rf.body), `"amount_minor":1500`) {
		t.Errorf("refund of the rest of a packed hold: %s", rf.body)
	}
	if h, err := c.Lookup(t.Context(), refunded); err != nil || h.Status != providers.StatusRefunded || h.RefundedMinor != 2000 {
		t.Errorf("after the refund the hold reads %+v (%v), want refunded 2000", h, err)
	}
	clk.Add(2 * time.Hour)
	if n := r.Server().Compact(); n != 1 {
		t.Errorf("Compact after the refund packed %d holds, want the one unpacked", n)
	}
	if got := do(t, http.MethodPost, r.URL()+"/v1/holds/"+refunded+"/refunds", map[string]string{"Idempotency-Key": w.writes[len(w.writes)-1].key}, nil); !bytes.Equal(got.body, rf.body) {
		t.Errorf("the refund replayed packed again: %s, want %s", got.body, rf.body)
	}
}

// TestCompactionBoundsTheFootprint pays through the HTTP API as payorch
// does and checks what the fake keeps per payment once packed.
func TestCompactionBoundsTheFootprint(t *testing.T) {
	// Not parallel: the heap is measured.
	const payments = 1000
	// Measured with BenchmarkHoldFootprint: 4,040 bytes a payment live,
	// 1,290 packed (the balance transaction is about 400 of them).
	const maxPacked = 2000
	r, c := start(t, fake.Config{HoldRetention: time.Nanosecond, CompactEvery: time.Hour})
	// The connection and the codec are warmed by a first payment: what
	// they keep is not per payment.
	if _, err := payLikePayorch(t.Context(), c, -1); err != nil {
		t.Fatal(err)
	}
	r.Server().Compact()
	base := liveHeap()
	for i := range payments {
		if _, err := payLikePayorch(t.Context(), c, i); err != nil {
			t.Fatal(err)
		}
	}
	live := liveHeap()
	if n := r.Server().Compact(); n != payments {
		t.Fatalf("Compact packed %d holds, want %d", n, payments)
	}
	packed := liveHeap()
	perLive, perPacked := (int64(live)-int64(base))/payments, (int64(packed)-int64(base))/payments
	t.Logf("heap per payment: %d bytes live, %d packed", perLive, perPacked)
	if perPacked > maxPacked {
		t.Errorf("packed, the fake keeps %d bytes per payment, want at most %d (%d live)", perPacked, maxPacked, perLive)
	}
}

// TestCompactionUnderConcurrentRequests packs holds all the time while
// payments are made, replayed, looked up and refunded: every replay
// answers the first answer and every key executes once (and -race sees
// no race between compaction and requests).
func TestCompactionUnderConcurrentRequests(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{HoldRetention: time.Nanosecond, CompactEvery: time.Millisecond})
	const workers, each = 4, 25
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				for i := range each {
					req := authReq(t, int64(100+w*each+i))
					h, err := c.Authorize(t.Context(), req)
					if err != nil {
						return err
					}
					capKey := newKey(t)
					if _, err := c.Capture(t.Context(), providers.CaptureRequest{Key: capKey, Ref: h.Ref}); err != nil {
						return err
					}
					r.Server().Compact()
					if again, err := c.Authorize(t.Context(), req); err != nil || again != h {
						return fmt.Errorf("authorization replayed: %+v %v, want %+v", again, err, h)
					}
					if _, err := c.Refund(t.Context(), providers.RefundRequest{Key: newKey(t), Ref: h.Ref, AmountMinor: 1}); err != nil {
						return err
					}
					if got, err := c.Lookup(t.Context(), h.Ref); err != nil || got.RefundedMinor != 1 || got.CapturedMinor != h.AmountMinor {
						return fmt.Errorf("lookup: %+v %v", got, err)
					}
					if ops := operations(t, c, capKey); len(ops) != 1 {
						return fmt.Errorf("capture key executed %d times", len(ops))
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackedHoldsSurviveARestart: the state file holds packed holds in
// full, with their keys' answers and the hold each answered for, so after
// a restart they answer the same and are packed again.
func TestPackedHoldsSurviveARestart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)
	clk := testkit.NewClock(t0)
	cfg := fake.Config{Clock: clk.Now, StateFile: filepath.Join(t.TempDir(), "state.json"), HoldRetention: time.Hour, CompactEvery: time.Hour}
	r1, _ := start(t, cfg)
	w := &writer{t: t, base: r1.URL()}
	var refs []string
	for _, amount := range []string{"100", "200"} {
		ref := w.hold(`{"amount_minor":`+amount+`,"currency":"EUR"}`, http.StatusOK)
		w.post("/v1/holds/"+ref+"/capture", "", "", http.StatusOK)
		w.post("/v1/holds/"+ref+"/refunds", "", `{"amount_minor":10}`, http.StatusOK)
		refs = append(refs, ref)
	}
	clk.Add(2 * time.Hour)
	// The window leaves out the hold created below.
	from, to := t0.Add(-time.Hour), t0.Add(time.Hour)
	before := readAll(t, r1.URL(), refs, from, to)
	if n := r1.Server().Compact(); n != 2 {
		t.Fatalf("Compact packed %d, want 2", n)
	}
	// A write rewrites the state file with the holds packed.
	w.post("/v1/holds", "", `{"amount_minor":300,"currency":"EUR"}`, http.StatusOK)
	shutdown(t, r1)

	r2, _ := start(t, cfg)
	check := func(when string) {
		t.Helper()
		for p, want := range readAll(t, r2.URL(), refs, from, to) {
			if !bytes.Equal(want.body, before[p].body) {
				t.Errorf("GET %s %s:\n%s\nwant\n%s", p, when, want.body, before[p].body)
			}
		}
		for _, wr := range w.writes {
			got := do(t, http.MethodPost, r2.URL()+wr.path, map[string]string{"Idempotency-Key": wr.key}, wr.body)
			if got.status != wr.first.status || !bytes.Equal(got.body, wr.first.body) {
				t.Errorf("POST %s replayed %s: %d %s, want %d %s", wr.path, when, got.status, got.body, wr.first.status, wr.first.body)
			}
		}
	}
	check("after the restart")
	clk.Add(2 * time.Hour)
	if n := r2.Server().Compact(); n != 3 {
		t.Fatalf("Compact after the restart packed %d, want 3", n)
	}
	check("packed again after the restart")
}
