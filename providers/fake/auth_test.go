package fake_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// TestEveryRouteNeedsTheToken: the fake moves (fake) money and arms faults
// on request, so nothing but its own clients may reach it. Every route,
// the admin API and the health check included, answers 401 to a request
// without the token, with a wrong one or in another scheme, and changes
// nothing.
func TestEveryRouteNeedsTheToken(t *testing.T) {
	t.Parallel()
	r, c := start(t, fake.Config{})
	// Granted increments, so that an increment could change it.
	h := flexHold(t, c, 5000, allFlex)
	inject(t, c, fake.Fault{Operation: fake.OpCapture, Kind: fake.FaultLatency, LatencyMS: 1, Count: 5})
	if err := c.Drift(t.Context(), fake.Drift{Kind: fake.DriftAmount, Ref: h.Ref, Field: fake.AmountAuthorized, AmountMinor: 4000}); err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC().Add(-time.Hour)
	window := providers.ReportRequest{From: day, To: day.Add(2 * time.Hour)}
	type state struct {
		Ops    []fake.Operation
		Faults []fake.Fault
		Hold   providers.Hold
		Report []providers.ReportRow
	}
	snapshot := func() state {
		t.Helper()
		var s state
		var err error
		if s.Ops, err = c.Operations(t.Context(), ""); err != nil {
			t.Fatal(err)
		}
		if s.Faults, err = c.Faults(t.Context()); err != nil {
			t.Fatal(err)
		}
		if s.Hold, err = c.Lookup(t.Context(), h.Ref); err != nil {
			t.Fatal(err)
		}
		if err := c.Report(t.Context(), window, func(row providers.ReportRow) error {
			s.Report = append(s.Report, row)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()

	hold := "/v1/holds/" + h.Ref
	routes := []struct {
		method, path, contentType, body string
	}{
		{"POST", "/v1/holds", "application/json", `{"amount_minor":100,"currency":"EUR"}`},
		{"POST", hold + "/confirm", "application/json", `{}`},
		{"POST", hold + "/capture", "application/json", `{}`},
		{"POST", hold + "/cancel", "application/json", `{}`},
		{"POST", hold + "/refunds", "application/json", `{}`},
		{"POST", hold + "/increment", "application/json", `{"amount_minor":6000}`},
		{"POST", hold + "/extend", "application/json", `{}`},
		{"GET", hold, "", ""},
		{"GET", "/v1/report?from=" + day.Format(time.RFC3339) + "&to=" + day.Add(2*time.Hour).Format(time.RFC3339), "", ""},
		{"GET", "/healthz", "", ""},
		{"GET", "/_admin/operations", "", ""},
		{"GET", "/_admin/faults", "", ""},
		{"POST", "/_admin/faults", "application/json", `{"operation":"authorize","fault":"error_before_execute"}`},
		{"DELETE", "/_admin/faults", "", ""},
		{"POST", "/_admin/report/drift", "application/json", `{"kind":"drop","ref":"` + h.Ref + `"}`},
		{"DELETE", "/_admin/report/drift", "", ""},
		{"POST", "/_admin/holds", "application/x-ndjson", `{"amount_minor":100,"currency":"EUR"}` + "\n"},
		{"POST", "/_admin/holds/" + h.Ref + "/authenticate", "application/json", `{"result":"complete"}`},
		{"GET", "/no/such/route", "", ""},
	}
	for _, auth := range []string{"", "Bearer", "Bearer wrong-token", "Bearer " + testToken + "x", "Basic " + testToken, testToken} {
		for _, rt := range routes {
			name := fmt.Sprintf("%s %s with Authorization %q", rt.method, rt.path, auth)
			hdr := map[string]string{"Authorization": auth, "Idempotency-Key": "no-token-" + rt.path}
			if rt.contentType != "" {
				hdr["Content-Type"] = rt.contentType
			}
			got := do(t, rt.method, r.URL()+rt.path, hdr, []byte(rt.body))
			if got.status != http.StatusUnauthorized || !strings.Contains(string(got.body), `"code":"unauthorized"`) ||
				!strings.HasPrefix(got.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: %d %s, want 401 unauthorized", name, got.status, got.body)
			}
		}
	}
	if after := snapshot(); !reflect.DeepEqual(after, before) {
		t.Fatalf("requests without the token changed the fake:\nbefore %+v\nafter  %+v", before, after)
	}

	// A client without the token is refused before anything ran: not
	// executed (retry once configured), never the payment's fault.
	_, err := fake.NewClient(r.URL(), nil).Capture(t.Context(), providers.CaptureRequest{Key: newKey(t), Ref: h.Ref})
	wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
	_, err = fake.NewClient(r.URL(), nil).WithToken("wrong").Lookup(t.Context(), h.Ref)
	wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
}

// TestStartGeneratesATokenPerServer: without Config.Token, each server
// gets a random token of its own, which its Running.Client sends.
func TestStartGeneratesATokenPerServer(t *testing.T) {
	t.Parallel()
	r1, err := fake.Start("", fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r1.Shutdown(context.Background()) })
	r2, err := fake.Start("", fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r2.Shutdown(context.Background()) })
	if len(r1.Token()) < 32 || r1.Token() == r2.Token() {
		t.Fatalf("tokens %q and %q: want two long random ones", r1.Token(), r2.Token())
	}
	if _, err := r1.Client(nil).Lookup(t.Context(), "fh_none"); providers.KindOf(err) != providers.KindRejected {
		t.Fatalf("Running.Client: %v, want the server's resource_missing answer", err)
	}
	_, err = fake.NewClient(r1.URL(), nil).WithToken(r2.Token()).Lookup(t.Context(), "fh_none")
	wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)
	if _, err := fake.Start("", fake.Config{Token: "two words"}); err == nil || !strings.Contains(err.Error(), "Token") {
		t.Fatalf("Start with a token holding white space: %v, want an error naming Token", err)
	}
}
