package reconcile_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/reconcile"
)

// A webhook about an object we do not know is reported by the next run
// of its connector as missing_locally, though the provider's report does
// not list the object.
func TestUnknownWebhookObjectIsMissingLocally(t *testing.T) {
	t.Parallel()
	const secret = "whsec_reconcile_test"
	clk := testkit.NewClock(dayStart.Add(10 * time.Hour))
	fr, err := fake.Start("127.0.0.1:0", fake.Config{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	e := newEnvWith(t, clk, fr.Client(&http.Client{}).WithWebhookSecret(secret))
	known := e.pay(t, 1000, "EUR", "", "capture:1000")

	deliver := func(id, ref string) {
		t.Helper()
		body, _ := json.Marshal(fake.Event{ID: id, Type: fake.EventHoldCaptured, CreatedAt: e.clk.Now(),
			Data: fake.EventData{HoldRef: ref, ObjectID: ref, AmountMinor: 700, Currency: "EUR"}})
		h := http.Header{}
		h.Set(fake.SignatureHeader, providers.SignWebhook(secret, e.clk.Now(), body))
		res, err := e.svc.ReceiveWebhook(context.Background(), "fake", h, body)
		if err != nil {
			t.Fatal(err)
		}
		if want := "unknown_object"; ref == *known.ProviderRef {
			want = "ignored_stale"
			if res.Outcome != want {
				t.Fatalf("%s: %+v", id, res)
			}
		} else if res.Outcome != want {
			t.Fatalf("%s: %+v", id, res)
		}
	}
	deliver("fevt_ghost_1", "fh_ghost")
	deliver("fevt_ghost_2", "fh_ghost") // another event about it: one finding
	deliver("fevt_known", *known.ProviderRef)
	e.clk.Set(dayStart.Add(30 * time.Hour)) // received the next day: that day's run reports it
	deliver("fevt_later", "fh_later")

	run, ds := e.run(t)
	var ghost []reconcile.Discrepancy
	for _, d := range ds {
		if d.ProviderRef != nil && (*d.ProviderRef == "fh_ghost" || *d.ProviderRef == "fh_later") {
			ghost = append(ghost, d)
		}
	}
	if len(ghost) != 1 || ghost[0].Category != reconcile.MissingLocally || *ghost[0].ProviderRef != "fh_ghost" ||
		ghost[0].Detail["source"] != "provider_webhook" || ghost[0].Detail["provider_event_id"] != "fevt_ghost_1" {
		t.Fatalf("findings about unknown webhook objects: %+v (all: %s)", ghost, categories(ds))
	}
	if len(ds) != 1 {
		t.Fatalf("run %d found %s, want only the unknown object", run.ID, categories(ds))
	}
}
