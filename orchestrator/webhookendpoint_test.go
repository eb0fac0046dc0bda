package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// webhookInput is a valid endpoint for every event.
func webhookInput(types ...string) webhooks.WebhookEndpointInput {
	if len(types) == 0 {
		types = []string{"*"}
	}
	return webhooks.WebhookEndpointInput{URL: "https://example.com/hooks", EventTypes: types, Description: "test"}
}

// endpoint creates an endpoint for e's tenant.
func (e *moneyEnv) endpoint(t *testing.T, types ...string) webhooks.WebhookEndpoint {
	t.Helper()
	ep, err := e.hooks.CreateWebhookEndpoint(context.Background(), e.tenant, webhookInput(types...), "key_test")
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// deliveryRows lists payment id's deliveries as "event type -> endpoint status".
func (e *moneyEnv) deliveryRows(t *testing.T, paymentID string) []string {
	t.Helper()
	ds, err := e.hooks.PaymentDeliveries(context.Background(), orchestrator.Scope{TenantID: e.tenant}, paymentID)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, ev := range e.allEvents(t, paymentID) {
		types[ev.ID] = ev.Type
	}
	var out []string
	for _, d := range ds {
		out = append(out, types[d.EventID]+" "+d.EndpointID+" "+d.Status)
	}
	return out
}

func TestWebhookEndpointValidation(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t, 0)
	private := newConnectorWorld(t, 0, nil, "fake").withHooks(allowPrivate)
	long := "https://example.com/" + strings.Repeat("a", 2048)
	types := func(ts ...string) []string { return ts }
	many := make([]string, 21)
	for i := range many {
		many[i] = "*"
	}
	for name, c := range map[string]struct {
		in           webhooks.WebhookEndpointInput
		allowPrivate bool
		staff        bool   // a staff endpoint (tenant 0), not tenant 1's
		param        string // "" when valid
	}{
		"Valid":                       {in: webhookInput()},
		"ValidTypes":                  {in: webhookInput("payment.captured", "payment.refunded", "webhook_endpoint.disabled")},
		"ValidPort":                   {in: webhooks.WebhookEndpointInput{URL: "https://hooks.example.com:8443/a?b=c", EventTypes: types("*")}},
		"MissingURL":                  {in: webhooks.WebhookEndpointInput{EventTypes: types("*")}, param: "url"},
		"RelativeURL":                 {in: webhooks.WebhookEndpointInput{URL: "/hooks", EventTypes: types("*")}, param: "url"},
		"FTP":                         {in: webhooks.WebhookEndpointInput{URL: "ftp://example.com/", EventTypes: types("*")}, param: "url"},
		"HTTPRefused":                 {in: webhooks.WebhookEndpointInput{URL: "http://example.com/", EventTypes: types("*")}, param: "url"},
		"HTTPAllowed":                 {in: webhooks.WebhookEndpointInput{URL: "http://example.com/", EventTypes: types("*")}, allowPrivate: true},
		"NoHost":                      {in: webhooks.WebhookEndpointInput{URL: "https:///hooks", EventTypes: types("*")}, param: "url"},
		"Opaque":                      {in: webhooks.WebhookEndpointInput{URL: "https:example.com", EventTypes: types("*")}, param: "url"},
		"UserInfo":                    {in: webhooks.WebhookEndpointInput{URL: "https://u:p@example.com/", EventTypes: types("*")}, param: "url"},
		"Fragment":                    {in: webhooks.WebhookEndpointInput{URL: "https://example.com/#x", EventTypes: types("*")}, param: "url"},
		"EmptyFragment":               {in: webhooks.WebhookEndpointInput{URL: "https://example.com/#", EventTypes: types("*")}, param: "url"},
		"TooLong":                     {in: webhooks.WebhookEndpointInput{URL: long, EventTypes: types("*")}, param: "url"},
		"Localhost":                   {in: webhooks.WebhookEndpointInput{URL: "https://localhost:8443/", EventTypes: types("*")}, param: "url"},
		"SubLocalhost":                {in: webhooks.WebhookEndpointInput{URL: "https://a.LOCALHOST./", EventTypes: types("*")}, param: "url"},
		"Loopback":                    {in: webhooks.WebhookEndpointInput{URL: "https://127.0.0.1/", EventTypes: types("*")}, param: "url"},
		"Private10":                   {in: webhooks.WebhookEndpointInput{URL: "https://10.1.2.3/", EventTypes: types("*")}, param: "url"},
		"Private192":                  {in: webhooks.WebhookEndpointInput{URL: "https://192.168.0.1/", EventTypes: types("*")}, param: "url"},
		"LinkLocalMetadata":           {in: webhooks.WebhookEndpointInput{URL: "https://169.254.169.254/", EventTypes: types("*")}, param: "url"},
		"Unspecified":                 {in: webhooks.WebhookEndpointInput{URL: "https://0.0.0.0/", EventTypes: types("*")}, param: "url"},
		"IPv6Loopback":                {in: webhooks.WebhookEndpointInput{URL: "https://[::1]:8443/", EventTypes: types("*")}, param: "url"},
		"IPv6Mapped":                  {in: webhooks.WebhookEndpointInput{URL: "https://[::ffff:127.0.0.1]/", EventTypes: types("*")}, param: "url"},
		"IPv6ULA":                     {in: webhooks.WebhookEndpointInput{URL: "https://[fd00::1]/", EventTypes: types("*")}, param: "url"},
		"SharedAddressSpace":          {in: webhooks.WebhookEndpointInput{URL: "https://100.100.100.200/", EventTypes: types("*")}, param: "url"},
		"NAT64Metadata":               {in: webhooks.WebhookEndpointInput{URL: "https://[64:ff9b::a9fe:a9fe]/", EventTypes: types("*")}, param: "url"},
		"LoopbackAllowed":             {in: webhooks.WebhookEndpointInput{URL: "http://127.0.0.1:9000/", EventTypes: types("*")}, allowPrivate: true},
		"PublicAddress":               {in: webhooks.WebhookEndpointInput{URL: "https://93.184.216.34/", EventTypes: types("*")}},
		"NoTypes":                     {in: webhooks.WebhookEndpointInput{URL: "https://example.com/"}, param: "event_types"},
		"TooManyTypes":                {in: webhooks.WebhookEndpointInput{URL: "https://example.com/", EventTypes: many}, param: "event_types"},
		"UnknownType":                 {in: webhookInput("payment.captured", "payment.exploded"), param: "event_types[1]"},
		"RepeatedType":                {in: webhookInput("payment.captured", "payment.captured"), param: "event_types[1]"},
		"DescriptionTooLong":          {in: webhooks.WebhookEndpointInput{URL: "https://example.com/", EventTypes: types("*"), Description: strings.Repeat("é", 201)}, param: "description"},
		"DescriptionAtTheLimit":       {in: webhooks.WebhookEndpointInput{URL: "https://example.com/", EventTypes: types("*"), Description: strings.Repeat("é", 200)}},
		"DescriptionNUL":              {in: webhooks.WebhookEndpointInput{URL: "https://example.com/", EventTypes: types("*"), Description: "a\x00b"}, param: "description"},
		"MerchantWantsReconciliation": {in: webhookInput("payment.captured", "reconciliation.run.completed"), param: "event_types[1]"},
		"MerchantWantsRunFailures":    {in: webhookInput("reconciliation.run.failed"), param: "event_types[0]"},
		"StaffAll":                    {in: webhookInput(), staff: true},
		"StaffReconciliation": {in: webhookInput("reconciliation.run.completed", "reconciliation.run.failed", "webhook_endpoint.disabled"),
			staff: true},
		"StaffWantsPayments": {in: webhookInput("reconciliation.run.completed", "payment.captured"), staff: true, param: "event_types[1]"},
		"StaffURLChecked":    {in: webhooks.WebhookEndpointInput{URL: "https://10.0.0.1/", EventTypes: types("*")}, staff: true, param: "url"},
	} {
		t.Run(name, func(t *testing.T) {
			svc := w.hooks
			if c.allowPrivate {
				svc = private.hooks
			}
			owner := int64(1)
			if c.staff {
				owner = 0
			}
			err := svc.ValidateWebhookEndpoint(owner, c.in)
			if c.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantRefusal(t, err, orchestrator.CodeValidationFailed, c.param)
			// Create refuses it the same way, and writes nothing.
			_, err = svc.CreateWebhookEndpoint(context.Background(), owner, c.in, "key_test")
			wantRefusal(t, err, orchestrator.CodeValidationFailed, c.param)
		})
	}
}

func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	shared := newMoneyWorld(t, 0)
	ctx := context.Background()

	t.Run("TheSecretIsShownOnlyByCreateAndRotate", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		sc := orchestrator.Scope{TenantID: e.tenant}
		ep := e.endpoint(t)
		if !strings.HasPrefix(ep.Secret, "whsec_") || len(ep.Secret) != len("whsec_")+43 {
			t.Fatalf("secret %q", ep.Secret)
		}
		if ep.Object != "webhook_endpoint" || !ep.Enabled || ep.TenantID == nil || *ep.TenantID != e.tenant || !webhooks.ValidWebhookEndpointID(ep.ID) {
			t.Fatalf("created %+v", ep)
		}
		list, err := e.hooks.ListWebhookEndpoints(ctx, sc)
		if err != nil || len(list) != 1 || list[0].ID != ep.ID {
			t.Fatalf("list: %+v %v", list, err)
		}
		got, err := e.hooks.GetWebhookEndpoint(ctx, sc, ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, read := range []webhooks.WebhookEndpoint{list[0], got} {
			b, _ := json.Marshal(read)
			if read.Secret != "" || strings.Contains(string(b), "secret") || strings.Contains(string(b), ep.Secret) {
				t.Fatalf("a read shows the secret: %s", b)
			}
		}
		want := ep
		want.Secret = ""
		sameJSON(t, "read endpoint", got, want)
		// Another tenant sees nothing of it.
		other := orchestrator.Scope{TenantID: e.tenant + 1000}
		if _, err := e.hooks.GetWebhookEndpoint(ctx, other, ep.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("another tenant's read: %v", err)
		}
		for name, do := range map[string]func() error{
			"rotate": func() error { _, err := e.hooks.RotateWebhookSecret(ctx, other, ep.ID); return err },
			"update": func() error { _, err := e.hooks.UpdateWebhookEndpoint(ctx, other, ep.ID, false); return err },
			"delete": func() error { _, err := e.hooks.DeleteWebhookEndpoint(ctx, other, ep.ID); return err },
		} {
			if err := do(); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
				t.Fatalf("another tenant's %s: %v", name, err)
			}
		}
		if l, _ := e.hooks.ListWebhookEndpoints(ctx, other); len(l) != 0 {
			t.Fatalf("another tenant lists %+v", l)
		}
	})

	t.Run("DisableAndEnable", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		sc := orchestrator.Scope{TenantID: e.tenant}
		ep := e.endpoint(t)
		if _, err := e.svc.Pool().Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() WHERE id = $1`, ep.ID); err != nil {
			t.Fatal(err)
		}
		off, err := e.hooks.UpdateWebhookEndpoint(ctx, sc, ep.ID, false)
		if err != nil || off.Enabled || off.DisabledReason == nil || *off.DisabledReason != webhooks.DisabledByOwner || off.Secret != "" {
			t.Fatalf("disabled: %+v %v", off, err)
		}
		// A disabled endpoint gets no deliveries.
		p := e.authorized(t, "wh-disabled", 1000)
		if rows := e.deliveryRows(t, p.ID); len(rows) != 0 {
			t.Fatalf("a disabled endpoint got deliveries: %q", rows)
		}
		on, err := e.hooks.UpdateWebhookEndpoint(ctx, sc, ep.ID, true)
		if err != nil || !on.Enabled || on.DisabledReason != nil || on.FailingSince != nil {
			t.Fatalf("enabled: %+v %v", on, err)
		}
	})

	t.Run("AtMost20PerTenant", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		var last webhooks.WebhookEndpoint
		for range webhooks.MaxWebhookEndpoints {
			last = e.endpoint(t)
		}
		_, err := e.hooks.CreateWebhookEndpoint(ctx, e.tenant, webhookInput(), "key_test")
		wantRefusal(t, err, orchestrator.CodeConflict, "")
		if _, err := e.hooks.DeleteWebhookEndpoint(ctx, orchestrator.Scope{TenantID: e.tenant}, last.ID); err != nil {
			t.Fatal(err)
		}
		e.endpoint(t) // a deleted one does not count
	})

	t.Run("AnEndpointGetsOnlyTheTypesItWants", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		all := e.endpoint(t)
		captures := e.endpoint(t, "payment.captured")
		p := e.authorized(t, "wh-types", 1000)
		if a := e.capture(t, p.ID, "wh-types-c", `{}`); a.err != nil {
			t.Fatal(a.err)
		}
		want := []string{
			"payment.pending " + all.ID + " pending",
			"payment.authorized " + all.ID + " pending",
			"payment.captured " + all.ID + " pending",
			"capture.succeeded " + all.ID + " pending",
			"payment.captured " + captures.ID + " pending",
		}
		got := e.deliveryRows(t, p.ID)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("deliveries:\n got  %q\n want %q", got, want)
		}
	})

	t.Run("DeleteStopsDeliveries", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		sc := orchestrator.Scope{TenantID: e.tenant}
		ep := e.endpoint(t)
		before := e.authorized(t, "wh-del-1", 1000)
		if n := len(e.deliveryRows(t, before.ID)); n != 2 {
			t.Fatalf("%d deliveries before the delete, want 2", n)
		}
		del, err := e.hooks.DeleteWebhookEndpoint(ctx, sc, ep.ID)
		if err != nil || !del.Deleted || del.Enabled || del.Secret != "" {
			t.Fatalf("delete: %+v %v", del, err)
		}
		// Its pending deliveries are given up.
		for _, r := range e.deliveryRows(t, before.ID) {
			if !strings.HasSuffix(r, " failed") {
				t.Fatalf("after the delete: %q", r)
			}
		}
		after := e.authorized(t, "wh-del-2", 1000)
		if n := e.count(t, `SELECT count(*) FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id WHERE ev.payment_id = $1`, after.ID); n != 0 {
			t.Fatalf("%d deliveries to a deleted endpoint", n)
		}
		if _, err := e.hooks.GetWebhookEndpoint(ctx, sc, ep.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("get after delete: %v", err)
		}
		if _, err := e.hooks.DeleteWebhookEndpoint(ctx, sc, ep.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("second delete: %v", err)
		}
		if l, _ := e.hooks.ListWebhookEndpoints(ctx, sc); len(l) != 0 {
			t.Fatalf("listed after delete: %+v", l)
		}
	})

	t.Run("DeliveriesShowTheirAttempts", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		sc := orchestrator.Scope{TenantID: e.tenant}
		ep := e.endpoint(t, "payment.authorized")
		p := e.authorized(t, "wh-tries", 1000)
		evs := e.events(t, p.ID)
		authorized := evs[len(evs)-1]
		if _, err := e.svc.Pool().Exec(ctx, `
			INSERT INTO webhook_delivery_attempts (event_id, endpoint_id, attempt, started_at, latency_ms, status_code, error, response_excerpt)
			VALUES ($1, $2, 1, $3, 12.5, 500, NULL, 'oops'), ($1, $2, 2, $3, 3, NULL, 'connection refused', NULL)`,
			authorized.ID, ep.ID, moneyStart); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Pool().Exec(ctx, `UPDATE webhook_deliveries SET attempts = 2 WHERE event_id = $1`, authorized.ID); err != nil {
			t.Fatal(err)
		}
		ds, err := e.hooks.EventDeliveries(ctx, sc, authorized.ID)
		if err != nil || len(ds) != 1 {
			t.Fatalf("deliveries %+v %v", ds, err)
		}
		d := ds[0]
		if d.EndpointID != ep.ID || d.EndpointURL != ep.URL || d.Status != "pending" || d.Attempts != 2 || d.NextAttemptAt == nil || len(d.Tries) != 2 {
			t.Fatalf("delivery %+v", d)
		}
		if tr := d.Tries[0]; tr.Attempt != 1 || !tr.StartedAt.Equal(moneyStart) || tr.LatencyMS != 12.5 || *tr.StatusCode != 500 || *tr.ResponseExcerpt != "oops" || tr.Error != nil {
			t.Fatalf("first try %+v", tr)
		}
		if tr := d.Tries[1]; tr.StatusCode != nil || *tr.Error != "connection refused" || d.LastStatusCode() != nil {
			t.Fatalf("second try %+v", tr)
		}
		// The first event went to no endpoint; another tenant sees none.
		if ds, err := e.hooks.EventDeliveries(ctx, sc, evs[0].ID); err != nil || len(ds) != 0 {
			t.Fatalf("first event: %+v %v", ds, err)
		}
		if _, err := e.hooks.EventDeliveries(ctx, orchestrator.Scope{TenantID: e.tenant + 1000}, authorized.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("another tenant: %v", err)
		}
	})

	t.Run("RedeliverResetsToPending", func(t *testing.T) {
		t.Parallel()
		e := shared.newTenant(t)
		sc := orchestrator.Scope{TenantID: e.tenant}
		old := e.endpoint(t)
		p := e.authorized(t, "wh-redeliver", 1000)
		evs := e.events(t, p.ID)
		ev := evs[len(evs)-1] // payment.authorized
		if _, err := e.svc.Pool().Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered', attempts = 3,
			delivered_at = now(), next_attempt_at = now() - interval '1 hour' WHERE event_id = $1`, ev.ID); err != nil {
			t.Fatal(err)
		}
		// Created after the event: one that wants it, one that does not,
		// one deleted.
		later := e.endpoint(t, "payment.authorized")
		_ = e.endpoint(t, "payment.captured")
		gone := e.endpoint(t)
		if _, err := e.hooks.DeleteWebhookEndpoint(ctx, sc, gone.ID); err != nil {
			t.Fatal(err)
		}
		ds, err := e.hooks.RedeliverEvent(ctx, sc, ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range ds {
			if d.Status != "pending" || d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(moneyStart) || d.DeliveredAt != nil {
				t.Fatalf("delivery %+v", d)
			}
			got = append(got, d.EndpointID+" "+string(rune('0'+d.Attempts)))
		}
		want := []string{old.ID + " 3", later.ID + " 0"}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("redelivered %q, want %q", got, want)
		}
		if _, err := e.hooks.RedeliverEvent(ctx, orchestrator.Scope{TenantID: e.tenant + 1000}, ev.ID); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
			t.Fatalf("another tenant's redeliver: %v", err)
		}
	})
}

// TestWebhookSecretRotation: the previous secret keeps signing for 24
// hours after a rotation, on the Service's clock.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t, 0)
	ctx := context.Background()
	sc := orchestrator.Scope{TenantID: e.tenant}
	ep := e.endpoint(t)
	e.clk.Add(time.Hour)
	rotated, err := e.hooks.RotateWebhookSecret(ctx, sc, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == "" || rotated.Secret == ep.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") {
		t.Fatalf("rotated secret %q (was %q)", rotated.Secret, ep.Secret)
	}
	var secret, previous string
	var until time.Time
	if err := e.svc.Pool().QueryRow(ctx, `SELECT secret, previous_secret, previous_secret_until FROM webhook_endpoints WHERE id = $1`,
		ep.ID).Scan(&secret, &previous, &until); err != nil {
		t.Fatal(err)
	}
	if secret != rotated.Secret || previous != ep.Secret || !until.Equal(moneyStart.Add(time.Hour+24*time.Hour)) {
		t.Fatalf("stored secret %q previous %q until %s", secret, previous, until)
	}
	if got, _ := e.hooks.GetWebhookEndpoint(ctx, sc, ep.ID); got.Secret != "" {
		t.Fatal("a read after rotation shows the secret")
	}
}

// Staff endpoints (finance's, tenant_id NULL) are seen and changed by
// staff only, never by a merchant or support, and receive no payment's
// events, even with "*".
func TestWebhookStaffEndpoints(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t, 0) // staff endpoints are the database's: a world of its own
	e := w.newTenant(t)
	ctx := context.Background()
	staff, merchant, support := orchestrator.Scope{Staff: true}, orchestrator.Scope{TenantID: e.tenant}, orchestrator.Scope{}
	mine := e.endpoint(t)
	runs, err := e.hooks.CreateWebhookEndpoint(ctx, 0, webhookInput("reconciliation.run.completed"), "key_finance")
	if err != nil {
		t.Fatal(err)
	}
	if runs.TenantID != nil || runs.Secret == "" {
		t.Fatalf("staff endpoint %+v", runs)
	}
	all, err := e.hooks.CreateWebhookEndpoint(ctx, 0, webhookInput(), "key_finance")
	if err != nil {
		t.Fatal(err)
	}

	ids := func(sc orchestrator.Scope) []string {
		t.Helper()
		eps, err := e.hooks.ListWebhookEndpoints(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ep := range eps {
			out = append(out, ep.ID)
		}
		return out
	}
	if got, want := ids(staff), []string{runs.ID, all.ID}; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("staff list %q", got)
	}
	if got := ids(merchant); !slices.Equal(got, []string{mine.ID}) {
		t.Fatalf("merchant list %q", got)
	}
	if got := ids(support); len(got) != 0 {
		t.Fatalf("support lists %q", got)
	}
	for _, c := range []struct {
		who string
		sc  orchestrator.Scope
		id  string
	}{{"merchant", merchant, runs.ID}, {"support", support, runs.ID}, {"staff", staff, mine.ID}} {
		for name, do := range map[string]func() error{
			"get":    func() error { _, err := e.hooks.GetWebhookEndpoint(ctx, c.sc, c.id); return err },
			"rotate": func() error { _, err := e.hooks.RotateWebhookSecret(ctx, c.sc, c.id); return err },
			"update": func() error { _, err := e.hooks.UpdateWebhookEndpoint(ctx, c.sc, c.id, false); return err },
			"delete": func() error { _, err := e.hooks.DeleteWebhookEndpoint(ctx, c.sc, c.id); return err },
		} {
			if err := do(); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
				t.Fatalf("%s %s of another's endpoint: %v", c.who, name, err)
			}
		}
	}
	if off, err := e.hooks.UpdateWebhookEndpoint(ctx, staff, runs.ID, false); err != nil || off.Enabled {
		t.Fatalf("staff disables its endpoint: %+v %v", off, err)
	}
	if rot, err := e.hooks.RotateWebhookSecret(ctx, staff, runs.ID); err != nil || rot.Secret == "" || rot.Secret == runs.Secret {
		t.Fatalf("staff rotates its endpoint: %+v %v", rot, err)
	}

	// A payment's events go to the tenant's endpoint only.
	p := e.authorized(t, "wh-staff", 1000)
	want := []string{"payment.pending " + mine.ID + " pending", "payment.authorized " + mine.ID + " pending"}
	if got := e.deliveryRows(t, p.ID); !slices.Equal(got, want) {
		t.Fatalf("deliveries:\n got  %q\n want %q", got, want)
	}

	// Staff have 20 endpoints too, whatever the tenants have.
	for range webhooks.MaxWebhookEndpoints - 2 {
		if _, err := e.hooks.CreateWebhookEndpoint(ctx, 0, webhookInput(), "key_finance"); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.hooks.CreateWebhookEndpoint(ctx, 0, webhookInput(), "key_finance")
	wantRefusal(t, err, orchestrator.CodeConflict, "")
	e.endpoint(t) // the tenant's count is its own
	if _, err := e.hooks.DeleteWebhookEndpoint(ctx, staff, all.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.hooks.CreateWebhookEndpoint(ctx, 0, webhookInput(), "key_finance"); err != nil {
		t.Fatal(err)
	}
}
