package fake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// shutdown stops r now (the cleanup start registered stops it again,
// harmlessly).
func shutdown(t *testing.T, r *fake.Running) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// lookupRaw is the raw answer of GET /v1/holds/{ref}.
func lookupRaw(t *testing.T, r *fake.Running, ref string) rawResponse {
	t.Helper()
	return do(t, http.MethodGet, r.URL()+"/v1/holds/"+ref, nil, nil)
}

func TestStateFileKeepsEverythingAcrossARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "fake-provider.json")
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clk := testkit.NewClock(t0)
	cfg := fake.Config{Clock: clk.Now, StateFile: file}
	ctx := t.Context()
	r1, c1 := start(t, cfg)

	// One hold stays authorized; another is captured in part, then
	// refunded in part; one is canceled; one declined; one seeded.
	keptReq := authReq(t, 1000)
	kept, err := c1.Authorize(ctx, keptReq)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	clk.Add(time.Minute)
	partial := authorize(t, c1, 3000)
	captureKey := newKey(t)
	capturePath := "/v1/holds/" + partial.Ref + "/capture"
	firstCapture := do(t, http.MethodPost, r1.URL()+capturePath, map[string]string{"Idempotency-Key": captureKey}, []byte(`{"amount_minor":2000}`))
	if firstCapture.status != http.StatusOK {
		t.Fatalf("capture: %d %s", firstCapture.status, firstCapture.body)
	}
	clk.Add(time.Minute)
	if _, err := c1.Refund(ctx, providers.RefundRequest{Key: newKey(t), Ref: partial.Ref, AmountMinor: 500}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	canceled := authorize(t, c1, 700)
	if _, err := c1.Cancel(ctx, providers.CancelRequest{Key: newKey(t), Ref: canceled.Ref}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	// A refusal is executed and stored too.
	refusedKey := newKey(t)
	_, err = c1.Capture(ctx, providers.CaptureRequest{Key: refusedKey, Ref: canceled.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	declinedReq := authReq(t, 400)
	declinedReq.PaymentMethod = "pm_card_chargeDeclined"
	declined, err := c1.Authorize(ctx, declinedReq)
	wantKind(t, err, providers.KindDeclined, providers.CodeCardDeclined)
	if n, err := c1.Seed(ctx, slices.Values([]fake.SeedHold{{Ref: "fh_seeded_state", PaymentID: "pay_seeded", AmountMinor: 900, Currency: "EUR"}})); err != nil || n != 1 {
		t.Fatalf("Seed: %d %v", n, err)
	}
	if err := c1.Drift(ctx, fake.Drift{Kind: fake.DriftAmount, Ref: partial.Ref, Field: fake.AmountCaptured, AmountMinor: 1999}); err != nil {
		t.Fatalf("Drift: %v", err)
	}
	if err := c1.Drift(ctx, fake.Drift{Kind: fake.DriftAdd, Row: &fake.Row{PaymentID: "pay_ghost", AmountMinor: 42, Currency: "EUR"}}); err != nil {
		t.Fatalf("Drift add: %v", err)
	}
	// Faults are test configuration: not kept.
	inject(t, c1, fake.Fault{Operation: fake.OpRefund, Kind: fake.FaultErrorBeforeExecute, IdempotencyKey: "never-sent"})

	refs := []string{kept.Ref, partial.Ref, canceled.Ref, declined.Ref, "fh_seeded_state"}
	lookups := map[string][]byte{}
	for _, ref := range refs {
		res := lookupRaw(t, r1, ref)
		if res.status != http.StatusOK {
			t.Fatalf("lookup %s: %d %s", ref, res.status, res.body)
		}
		lookups[ref] = res.body
	}
	opsBefore := operations(t, c1, "")
	from, to := t0.Add(-time.Hour), t0.Add(time.Hour)
	reportBefore := report(t, c1, from, to)
	if len(opsBefore) != 8 || len(reportBefore) != 6 {
		t.Fatalf("before the restart: %d operations, %d report rows; want 8 and 6", len(opsBefore), len(reportBefore))
	}

	shutdown(t, r1)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "fake-provider.json" {
		t.Fatalf("the state folder holds %v (%v), want only the state file", entries, err)
	}

	clk.Add(time.Minute)
	r2, c2 := start(t, cfg)
	for _, ref := range refs {
		if res := lookupRaw(t, r2, ref); res.status != http.StatusOK || !bytes.Equal(res.body, lookups[ref]) {
			t.Errorf("lookup %s after the restart:\n%d %s\nwant\n%s", ref, res.status, res.body, lookups[ref])
		}
	}
	if got := operations(t, c2, ""); !reflect.DeepEqual(got, opsBefore) {
		t.Errorf("operations after the restart:\n%+v\nwant\n%+v", got, opsBefore)
	}
	if got := report(t, c2, from, to); !reflect.DeepEqual(got, reportBefore) {
		t.Errorf("report after the restart:\n%+v\nwant\n%+v", got, reportBefore)
	}
	if faults, err := c2.Faults(ctx); err != nil || len(faults) != 0 {
		t.Errorf("faults after the restart: %+v (%v), want none", faults, err)
	}

	// Completed keys replay their first answer, byte for byte, executing
	// nothing; with other parameters they are still refused.
	replay := do(t, http.MethodPost, r2.URL()+capturePath, map[string]string{"Idempotency-Key": captureKey}, []byte(`{"amount_minor":2000}`))
	if replay.status != firstCapture.status || !bytes.Equal(replay.body, firstCapture.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("capture replayed after the restart: %d %s (replayed %q), want the first answer %d %s",
			replay.status, replay.body, replay.header.Get("Idempotent-Replayed"), firstCapture.status, firstCapture.body)
	}
	if again, err := c2.Authorize(ctx, keptReq); err != nil || again != kept {
		t.Errorf("authorization replayed after the restart: %+v %v, want %+v", again, err, kept)
	}
	_, err = c2.Capture(ctx, providers.CaptureRequest{Key: refusedKey, Ref: canceled.Ref})
	wantKind(t, err, providers.KindRejected, providers.CodeStateConflict)
	mismatch := do(t, http.MethodPost, r2.URL()+capturePath, map[string]string{"Idempotency-Key": captureKey}, []byte(`{"amount_minor":100}`))
	if mismatch.status != http.StatusBadRequest || !strings.Contains(string(mismatch.body), providers.CodeIdempotencyMismatch) {
		t.Errorf("the capture key with another amount after the restart: %d %s, want %s", mismatch.status, mismatch.body, providers.CodeIdempotencyMismatch)
	}
	if got := operations(t, c2, ""); len(got) != len(opsBefore) {
		t.Fatalf("replays after the restart executed something: %d operations, want %d", len(got), len(opsBefore))
	}

	// The hold still authorized can be captured; the log goes on.
	capturedKept, err := c2.Capture(ctx, providers.CaptureRequest{Key: newKey(t), Ref: kept.Ref})
	if err != nil || capturedKept.Status != providers.StatusCaptured || capturedKept.CapturedMinor != 1000 {
		t.Fatalf("capture after the restart: %+v %v", capturedKept, err)
	}
	ops := operations(t, c2, "")
	if last := ops[len(ops)-1]; len(ops) != len(opsBefore)+1 || last.Seq != int64(len(ops)) || last.Operation != fake.OpCapture || last.Ref != kept.Ref {
		t.Fatalf("log after the new capture: %+v", ops)
	}

	// And that is kept too.
	shutdown(t, r2)
	r3, c3 := start(t, cfg)
	if h, err := c3.Lookup(ctx, kept.Ref); err != nil || h.Status != providers.StatusCaptured {
		t.Errorf("after a second restart the hold reads %+v (%v), want captured", h, err)
	}
	if got := operations(t, c3, ""); !reflect.DeepEqual(got, ops) {
		t.Errorf("operations after a second restart:\n%+v\nwant\n%+v", got, ops)
	}
	// Clearing the drifts is kept as well.
	if err := c3.ClearDrift(ctx); err != nil {
		t.Fatal(err)
	}
	shutdown(t, r3)
	_, c4 := start(t, cfg)
	if rows := report(t, c4, from, to); len(rows) != 5 {
		t.Errorf("report after clearing the drifts and restarting: %+v, want the 5 real holds", rows)
	}
}

func TestStateFileUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "state.json")
	r1, c1 := start(t, fake.Config{StateFile: file})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		holds []providers.Hold
	)
	for range 8 {
		wg.Go(func() {
			for range 5 {
				h, err := c1.Authorize(t.Context(), authReq(t, 100))
				if err != nil {
					t.Errorf("Authorize: %v", err)
					return
				}
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	shutdown(t, r1)
	var doc struct {
		Version int               `json:"version"`
		Holds   []json.RawMessage `json:"holds"`
	}
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &doc) != nil || doc.Version != 1 || len(doc.Holds) != 40 {
		t.Fatalf("state file: version %d, %d holds (%v), want version 1 and 40 holds", doc.Version, len(doc.Holds), err)
	}
	_, c2 := start(t, fake.Config{StateFile: file})
	if ops := operations(t, c2, ""); len(ops) != 40 {
		t.Errorf("%d operations after the restart, want 40", len(ops))
	}
	for _, h := range holds {
		if got, err := c2.Lookup(t.Context(), h.Ref); err != nil || got != h {
			t.Errorf("lookup %s after the restart: %+v %v, want %+v", h.Ref, got, err, h)
		}
	}
}

func TestStateFileThatIsNotAStateFailsStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	r, c := start(t, fake.Config{StateFile: good})
	authorize(t, c, 100)
	shutdown(t, r)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"Truncated":             b[:len(b)/2],
		"Empty":                 {},
		"NotJSON":               []byte("hello\n"),
		"OtherVersion":          bytes.Replace(b, []byte(`"version":1`), []byte(`"version":99`), 1),
		"UnknownField":          []byte(`{"version":1,"holds":[],"mystery":true}`),
		"TrailingData":          append(slices.Clone(b), b...),
		"BadSeq":                bytes.Replace(b, []byte(`"seq":1`), []byte(`"seq":5`), 1),
		"ChallengeWithoutAPage": bytes.Replace(b, []byte(`"status":"authorized"`), []byte(`"status":"requires_action"`), 1),
	} {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := fake.Start("", fake.Config{StateFile: path})
		if err == nil {
			shutdown(t, r)
			t.Errorf("%s: Start succeeded on a corrupt state file", name)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Start: %v, want an error naming the file", name, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, content) {
			t.Errorf("%s: the failed Start changed the file", name)
		}
	}

	// A folder that does not exist: Start fails, rather than every write.
	if r, err := fake.Start("", fake.Config{StateFile: filepath.Join(dir, "no", "such", "state.json")}); err == nil {
		shutdown(t, r)
		t.Error("Start succeeded with a state file in a missing folder")
	}

	// A missing file in an existing folder: an empty state, written at once.
	fresh := filepath.Join(dir, "fresh.json")
	_, c = start(t, fake.Config{StateFile: fresh})
	_, err = c.Lookup(t.Context(), "fh_unknown")
	wantKind(t, err, providers.KindRejected, providers.CodeNotFound)
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the missing state file was not created: %v", err)
	}
}
