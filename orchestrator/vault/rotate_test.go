package vault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payorch/payorch/orchestrator"
)

// seed creates n methods through v, numbers varying, and returns them.
func seed(t *testing.T, v *Vault, tenant int64, n int) []PaymentMethod {
	t.Helper()
	pms := make([]PaymentMethod, n)
	for i := range pms {
		pms[i] = mustCreate(t, v, createInput(tenant, fmt.Sprintf("seed-%d", i), visa()))
	}
	return pms
}

// versions counts the data keys by key-encryption key version.
func versions(t *testing.T, f *fixture) map[int]int {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT kek_version, count(*) FROM payment_method_keys GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		got[v] = n
	}
	return got
}

func TestRotateWhileCardsAreRevealed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	const n = 120
	pms := append(seed(t, f.vault, f.tenant, n/2), seed(t, f.vault, f.other, n/2)...)
	var cards []string
	rows, _ := f.pool.Query(ctx, `SELECT card_ciphertext FROM payment_methods ORDER BY id`)
	for rows.Next() {
		var c []byte
		_ = rows.Scan(&c)
		cards = append(cards, string(c))
	}

	both := f.with(testKeys(t, 1, 2))
	stop := make(chan struct{})
	var reveals, failures atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				pm := pms[i%len(pms)]
				tenant := f.tenant
				if i%len(pms) >= n/2 {
					tenant = f.other
				}
				card, err := both.Reveal(ctx, tenant, pm.ID, orchestrator.RevealAuthorize)
				reveals.Add(1)
				if err != nil || card.Number != "4242424242424242" {
					failures.Add(1)
					t.Errorf("reveal during rotation: %v", err)
				}
			}
		})
	}
	var calls []int64
	err := both.Rotate(ctx, 7, func(done, remaining int64) { calls = append(calls, done, remaining) })
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if reveals.Load() == 0 || failures.Load() > 0 {
		t.Fatalf("%d reveals during rotation, %d failed", reveals.Load(), failures.Load())
	}
	if got := versions(t, f); got[2] != n || len(got) != 1 {
		t.Fatalf("keys by version after rotation: %v", got)
	}
	if len(calls) < 2 || calls[len(calls)-2] != n || calls[len(calls)-1] != 0 {
		t.Fatalf("progress (done, remaining)…: %v", calls)
	}
	// Every card decrypts with version 2 alone, and no ciphertext changed.
	only2 := f.with(testKeys(t, 2))
	for i, pm := range pms {
		tenant := f.tenant
		if i >= n/2 {
			tenant = f.other
		}
		if card, err := only2.Reveal(ctx, tenant, pm.ID, orchestrator.RevealAuthorize); err != nil || card.CVC != "123" {
			t.Fatalf("after rotation %s: %v", pm.ID, err)
		}
	}
	rows, _ = f.pool.Query(ctx, `SELECT card_ciphertext FROM payment_methods ORDER BY id`)
	for i := 0; rows.Next(); i++ {
		var c []byte
		_ = rows.Scan(&c)
		if string(c) != cards[i] {
			t.Fatal("rotation rewrote a card's ciphertext")
		}
	}

	called := false
	if err := only2.Rotate(ctx, 7, func(int64, int64) { called = true }); err != nil || called {
		t.Fatalf("a second rotation: %v, progress called: %v", err, called)
	}
}

func TestRotateResumesAfterAnInterruption(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	seed(t, f.vault, f.tenant, 40)
	both := f.with(testKeys(t, 1, 2))
	stopped, cancel := context.WithCancel(ctx)
	err := both.Rotate(stopped, 10, func(done, _ int64) {
		if done >= 20 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rotation: %v", err)
	}
	if got := versions(t, f); got[1] != 20 || got[2] != 20 {
		t.Fatalf("keys by version after the interruption: %v", got)
	}
	var first int64 = -1
	err = both.Rotate(ctx, 10, func(done, remaining int64) {
		if first < 0 {
			first = done + remaining
		}
	})
	if err != nil || first != 20 {
		t.Fatalf("resumed rotation: %v, saw %d to do", err, first)
	}
	if got := versions(t, f); got[2] != 40 || len(got) != 1 {
		t.Fatalf("keys by version after resuming: %v", got)
	}
}

func TestAVaultWithoutTheOldKeyCannotReadItsCards(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	pm := mustCreate(t, f.vault, createInput(f.tenant, "v1", visa()))
	only2 := f.with(testKeys(t, 2))
	_, err := only2.Reveal(ctx, f.tenant, pm.ID, orchestrator.RevealAuthorize)
	var missing *MissingKEKError
	if !errors.As(err, &missing) || missing.Version != 1 || !strings.Contains(err.Error(), "version 1 is not configured") {
		t.Fatalf("reveal without version 1: %v", err)
	}
	wantCode(t, err, orchestrator.CodeInternal, "")
	err = only2.Rotate(ctx, 0, nil)
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), pm.ID) {
		t.Fatalf("rotate without version 1: %v", err)
	}
}

func TestDecryptionsAreCountedByReason(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter(InstrumentationName)
	v := New(Config{Pool: f.pool, Keys: testKeys(t, 1), Clock: f.clock.Now, Meter: meter})
	pms := seed(t, v, f.tenant, 3)
	for _, pm := range pms {
		if _, err := v.Reveal(ctx, f.tenant, pm.ID, orchestrator.RevealAuthorize); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Summary(ctx, f.tenant, pms[0].ID); err != nil { // no decryption
		t.Fatal(err)
	}
	rotating := New(Config{Pool: f.pool, Keys: testKeys(t, 1, 2), Clock: f.clock.Now, Meter: meter})
	if err := rotating.Rotate(ctx, 2, nil); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "payorch.vault.decryptions" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				r, _ := dp.Attributes.Value("reason")
				got[r.AsString()] += dp.Value
			}
		}
	}
	if got["authorize"] != 3 || got["rotate"] != 3 || len(got) != 2 {
		t.Fatalf("decryptions by reason: %v", got)
	}
}

func TestConcurrentRotationsRewrapEachKeyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	const n = 60
	pms := seed(t, f.vault, f.tenant, n)
	both := f.with(testKeys(t, 1, 2))
	var done [2]int64
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { errs[i] = both.Rotate(ctx, 3, func(d, _ int64) { done[i] = d }) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || done[0]+done[1] != n {
		t.Fatalf("two rotations at once: %v, %v; re-wrapped %d + %d, want %d in all", errs[0], errs[1], done[0], done[1], n)
	}
	only2 := f.with(testKeys(t, 2))
	for _, pm := range pms {
		if _, err := only2.Reveal(ctx, f.tenant, pm.ID, orchestrator.RevealAuthorize); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRotatePicksUpKeysWrittenUnderAnOldVersionMeanwhile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	seed(t, f.vault, f.other, 10)
	both := f.with(testKeys(t, 1, 2))
	// An instance still configured with version 1 alone stores a method
	// while the rotation runs, in a tenant ordered before the cursor.
	var late PaymentMethod
	err := both.Rotate(ctx, 3, func(int64, int64) {
		if late.ID == "" {
			late = mustCreate(t, f.vault, createInput(f.tenant, "late", visa()))
		}
	})
	if err != nil || late.ID == "" {
		t.Fatal(err)
	}
	if got := versions(t, f); got[2] != 11 || len(got) != 1 {
		t.Fatalf("keys by version: %v, want the late one re-wrapped too", got)
	}
}

func TestRewrapLeavesAKeyChangedMeanwhileAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := context.Background()
	pms := seed(t, f.vault, f.tenant, 4)
	// A rotation to version 2 read the keys, then another, to version 3,
	// re-wrapped them all and a method was deleted, before it wrote.
	rows, _ := f.pool.Query(ctx, `SELECT tenant_id, payment_method_id, kek_version, wrapped_key FROM payment_method_keys`)
	stale, err := pgx.CollectRows(rows, pgx.RowToStructByName[wrappedKey])
	if err != nil {
		t.Fatal(err)
	}
	if err := f.with(testKeys(t, 1, 2, 3)).Rotate(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.vault.Delete(ctx, f.tenant, pms[0].ID); err != nil {
		t.Fatal(err)
	}
	n, err := f.with(testKeys(t, 1, 2)).rewrapBatch(ctx, stale)
	if err != nil || n != 0 {
		t.Fatalf("stale re-wrap stored %d (%v), want none", n, err)
	}
	if got := versions(t, f); got[3] != 3 || len(got) != 1 {
		t.Fatalf("keys by version: %v, want the 3 left on version 3", got)
	}
}
