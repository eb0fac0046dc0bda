package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// TestWebhooksSurviveACrashBeforeTheSend: an instance commits payments
// (and so their events and deliveries) and dies by SIGKILL before it sends
// anything (its delivery worker is off); another instance, started after,
// delivers every event, signed.
func TestWebhooksSurviveACrashBeforeTheSend(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pgtest.URL(t))
	received := signedReceiver(t, w, "we_crash", "whsec_crash", nil)

	first := startServe(t, w.env(map[string]string{"PAYORCH_WEBHOOK_INTERVAL": "0"}))
	for _, key := range []string{"wh-1", "wh-2", "wh-3"} {
		if a := authorize(first.base, w.key, key, `{"amount_minor":500,"currency":"EUR"}`); a.status != 201 {
			t.Fatalf("authorize %s: %d %s", key, a.status, a.body)
		}
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.cmd.Process.Wait()
	events := w.count(t, `SELECT count(*) FROM events`)
	if sent := len(received()); events != 6 || sent != 0 {
		t.Fatalf("before the restart: %d events, %d delivered", events, sent)
	}

	startServe(t, w.env(map[string]string{"PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true", "PAYORCH_WEBHOOK_INTERVAL": "100ms"}))
	// Received, and recorded as delivered (the worker records an attempt
	// after the receiver answered).
	testkit.WaitFor(t, 30*time.Second, "every event delivered after the restart", func() (bool, error) {
		n, recorded := len(received()), w.count(t, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`)
		return n == events && recorded == events, fmt.Errorf("%d of %d received, %d recorded", n, events, recorded)
	})
}

// TestWebhooksSurviveACrashMidSend: an instance's delivery worker has
// recorded some deliveries (the receiver answered its first 5 requests at
// once) and is sending others (the receiver holds them open; no
// transaction is open meanwhile, their deliveries are leased) when the
// instance dies by SIGKILL. What it recorded stays recorded and is not
// sent again; the deliveries in flight become due when their leases end,
// and another instance, started after, sends them and every other event
// and records each one delivered: the events in flight at the crash
// arrive twice (at least once, as the contract says; the event id is the
// receiver's dedupe key), and none is lost.
func TestWebhooksSurviveACrashMidSend(t *testing.T) {
	t.Parallel()
	const answeredAtOnce = 5
	w := newWorld(t, pgtest.URL(t))
	hold := make(chan struct{}) // closed: answer at once
	inFlight := make(chan struct{}, 64)
	var served atomic.Int32
	received := signedReceiver(t, w, "we_midsend", "whsec_midsend", func() {
		if served.Add(1) <= answeredAtOnce {
			return
		}
		select {
		case inFlight <- struct{}{}:
		default:
		}
		<-hold
	})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // runs before the receiver closes
	env := w.env(map[string]string{"PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true", "PAYORCH_WEBHOOK_INTERVAL": "50ms"})
	first := startServe(t, env)
	for i := range 10 {
		if a := authorize(first.base, w.key, fmt.Sprint("mid-", i), `{"amount_minor":500,"currency":"EUR"}`); a.status != 201 {
			t.Fatalf("authorize mid-%d: %d %s", i, a.status, a.body)
		}
	}
	select {
	case <-inFlight:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery was held in flight")
	}
	testkit.WaitFor(t, 30*time.Second, "the deliveries answered at once recorded", testkit.Until(func() bool {
		return w.count(t, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`) >= answeredAtOnce
	}))
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.cmd.Process.Wait()
	events := w.count(t, `SELECT count(*) FROM events`)
	atCrash := received()
	before := len(atCrash)
	// Recorded: the answered ones, each attempt in its own short
	// transaction; the held ones were in flight, not recorded.
	recorded := w.count(t, `SELECT count(*) FROM webhook_delivery_attempts`)
	if events != 20 || before <= answeredAtOnce || recorded != answeredAtOnce ||
		w.count(t, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`) != answeredAtOnce {
		t.Fatalf("at the crash: %d events, %d received, %d attempts recorded", events, before, recorded)
	}

	release()
	startServe(t, env)
	testkit.WaitFor(t, 60*time.Second, "every event delivered after the restart", func() (bool, error) {
		n, recorded := len(received()), w.count(t, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`)
		return n == events && recorded == events, fmt.Errorf("%d of %d received, %d recorded", n, events, recorded)
	})
	twice := 0
	for id, n := range received() {
		switch {
		case n == 2 && atCrash[id] == 1:
			twice++
		case n != 1:
			t.Fatalf("event %s received %d times (%d at the crash)", id, n, atCrash[id])
		}
	}
	if twice != before-answeredAtOnce {
		t.Fatalf("%d events received twice, want the %d in flight at the crash", twice, before-answeredAtOnce)
	}
	// One attempt recorded per event: those in flight at the crash were
	// lost with the instance, and their delivery's next is attempt 1.
	if n := w.count(t, `SELECT count(*) FROM webhook_delivery_attempts`); n != events {
		t.Fatalf("%d attempts recorded for %d events", n, events)
	}
}

// signedReceiver is a webhook endpoint of w's tenant (id, secret) on
// loopback that counts the events it receives with a valid signature, by
// event id, calling then (when set) after counting each; received reads
// the counts.
func signedReceiver(t *testing.T, w *world, id, secret string, then func()) (received func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if webhooksig.Verify(r.Header.Get(webhooksig.Header), body, secret, 0, time.Now()) != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got[r.Header.Get(webhooksig.EventIDHeader)]++
		mu.Unlock()
		if then != nil {
			then()
		}
	}))
	t.Cleanup(rcv.Close)
	if _, err := w.pool.Exec(context.Background(), `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_by, created_at, updated_at)
		VALUES ($4, $1, $2, '{*}', $3, 'test', now(), now())`, w.tenant, rcv.URL, secret, id); err != nil {
		t.Fatal(err)
	}
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(got)
	}
}
