package fake_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

func TestListenAndServeStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- fake.ListenAndServe(ctx, addr, fake.Config{Token: testToken}) }()

	c := fake.NewClient("http://"+addr, nil).WithToken(testToken)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Lookup(t.Context(), "fh_x")
		if providers.KindOf(err) == providers.KindRejected {
			break // the server answered
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered: %v", err)
		}
		select {
		case err := <-served:
			t.Fatalf("ListenAndServe returned early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ListenAndServe: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ListenAndServe did not return after its context was canceled")
	}
}

func TestShutdownWakesHungRequests(t *testing.T) {
	t.Parallel()
	r, err := fake.Start("", fake.Config{TimeoutHang: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Client(nil)
	h := authorize(t, c, 100)
	inject(t, c, fake.Fault{Operation: fake.OpLookup, Kind: fake.FaultTimeoutAfterExecute, Count: 1})
	looked := make(chan error, 1)
	go func() { _, err := c.Lookup(t.Context(), h.Ref); looked <- err }()
	// Wait until the lookup has used up the fault: it is hanging.
	testkit.WaitFor(t, 10*time.Second, "the lookup to use the fault up", func() (bool, error) {
		faults, err := c.Faults(t.Context())
		return err == nil && len(faults) == 0, err
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if elapsed := time.Since(begin); elapsed > 5*time.Second {
		t.Errorf("Shutdown took %s", elapsed)
	}
	select {
	case err := <-looked:
		if err == nil {
			t.Error("the hung lookup got an answer")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hung lookup never returned")
	}
}

func TestStartRefusesBadConfigAndBusyAddress(t *testing.T) {
	t.Parallel()
	if _, err := fake.Start("", fake.Config{HoldLifetime: -time.Second}); err == nil || !strings.Contains(err.Error(), "HoldLifetime") {
		t.Errorf("Start with a negative HoldLifetime: %v, want an error naming it", err)
	}
	r, _ := start(t, fake.Config{})
	if _, err := fake.Start(strings.TrimPrefix(r.URL(), "http://"), fake.Config{}); err == nil {
		t.Error("Start on a busy address succeeded")
	}
	if got := do(t, http.MethodGet, r.URL()+"/healthz", nil, nil); got.status != http.StatusOK {
		t.Fatalf("healthz: %d %s", got.status, got.body)
	}
}
