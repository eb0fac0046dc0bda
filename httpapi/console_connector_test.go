package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// newConnectorsEnv is an env with a second connector, fake_b (a fake of
// its own, returned), whose breaker opens on its first failed call and
// stays open for an hour.
func newConnectorsEnv(t *testing.T) (*env, *fake.Client) {
	t.Helper()
	fr, err := fake.Start("127.0.0.1:0", fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fr.Shutdown(context.Background()) })
	fb := fr.Client(&http.Client{})
	e := newMigratedEnv(t, httpapi.Config{}, orchestrator.Config{
		Providers: map[string]providers.Provider{"fake_b": fb},
		Breaker:   orchestrator.BreakerConfig{MinCalls: 1, ErrorPercent: 50, Cooldown: time.Hour},
	})
	return e, fb
}

// failedOverPayment makes a payment that went to fake_b, which did not
// execute its call, and then to fake, which authorized it. Tenant routing
// is not wired yet, so no request can fail over by itself: the first
// attempt is a real call to fake_b (armed error_before_execute), the
// failover is written here in SQL as failOverSQL writes it (payment on
// attempt 2 at fake, attempt 2 started, an attempt_started event), and a
// retry of the request then authorizes attempt 2 at fake for real.
func failedOverPayment(t *testing.T, e *env, fb *fake.Client) payment {
	t.Helper()
	ctx := context.Background()
	const key = "console-failover-1"
	const body = `{"amount_minor":4200,"currency":"EUR","provider":"fake_b"}`
	if err := fb.InjectFault(ctx, fake.Fault{Operation: fake.OpAuthorize, Kind: fake.FaultErrorBeforeExecute, Count: 1}); err != nil {
		t.Fatal(err)
	}
	res, b := e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, body)
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first attempt at fake_b: %d %s", res.StatusCode, b)
	}
	id := orchestrator.PaymentID(e.tenant, key)
	tag, err := e.pool.Exec(ctx, `
		WITH moved AS (
			UPDATE payments SET provider = 'fake', attempt = 2, route = ARRAY['fake_b', 'fake'], updated_at = now()
			WHERE tenant_id = $1 AND id = $2 AND status = 'pending' AND attempt = 1
			RETURNING tenant_id, id
		), started AS (
			INSERT INTO payment_attempts (tenant_id, payment_id, attempt, connector, forwarded_key, dispatched, started_at)
			SELECT tenant_id, id, 2, 'fake', $3, 0, now() FROM moved
		)
		INSERT INTO payment_events (tenant_id, payment_id, type, forwarded_key, detail, created_at)
		SELECT tenant_id, id, 'attempt_started', $3, jsonb_build_object('attempt', 2, 'connector', 'fake',
			'previous_connector', 'fake_b', 'reason', 'provider_unavailable'), now()
		FROM moved`, e.tenant, id, orchestrator.AttemptKey(e.tenant, key, 2))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("fail over in SQL: %v (%d rows)", err, tag.RowsAffected())
	}
	res, b = e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], key, body)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("retry on attempt 2: %d %s", res.StatusCode, b)
	}
	p := decode[payment](t, b)
	if p.Status != "authorized" {
		t.Fatalf("after the failover: %+v", p)
	}
	return p
}

func TestConsoleConnectorsInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e, fb := newConnectorsEnv(t)
	consoleFixture(t, e)
	fo := failedOverPayment(t, e, fb)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	signIn := func(t *testing.T, role orchestrator.Role) {
		t.Helper()
		b.do(t, "sign in as "+string(role),
			chromedp.Navigate(e.url+"/console/signin"),
			chromedp.WaitVisible(css(`#api_key`)),
			chromedp.SendKeys(css(`#api_key`), e.keys[role]),
			chromedp.Click(css(`#signin button`)),
			chromedp.WaitVisible(css(`#signout`)),
		)
	}
	signOut := func(t *testing.T) {
		t.Helper()
		b.do(t, "sign out", chromedp.Click(css(`#signout`)), chromedp.WaitVisible(css(`#api_key`)))
	}

	for _, role := range []orchestrator.Role{orchestrator.RoleAdmin, orchestrator.RoleSupport} {
		t.Run("ConnectorsPageFor"+strings.ToUpper(string(role[:1]))+string(role[1:]), func(t *testing.T) {
			signIn(t, role)
			b.do(t, "connectors",
				chromedp.Click(css(`header nav a[href="/console/connectors"]`)),
				chromedp.WaitVisible(css(`#connectors`)),
			)
			b.screenshot(t, "connectors-"+string(role))
			rows := b.text(t, `#connectors tbody`)
			// fake: the fixture's payment and the failed-over one's second
			// attempt, both authorized; fake_b: one call that did not
			// execute, which opened its breaker.
			fakeRow := b.text(t, `#connectors tbody tr:nth-child(1)`)
			fakeBRow := b.text(t, `#connectors tbody tr:nth-child(2)`)
			mustContain(t, "fake's row", fakeRow, "fake", "enabled", "closed", "2", "100\u00a0%", "0\u00a0%", "ms")
			mustContain(t, "fake_b's row", fakeBRow, "fake_b", "open", "1", "100\u00a0%")
			if strings.Count(rows, "\n") < 1 || !strings.HasPrefix(fakeBRow, "fake_b") {
				t.Fatalf("connector rows:\n%s", rows)
			}
			// Four charts per connector, each an image with a name, and a
			// titled point for the hour with attempts (none yet for
			// auth_rate: no rule uses it).
			n := browserValue(t, b, chromedp.Evaluate[int](`document.querySelectorAll('#connector-fake svg.chart[role=img]').length`))
			if n != 4 {
				t.Fatalf("%d charts for fake, want 4", n)
			}
			mustContain(t, "fake's auth_rate cell", b.text(t, `#connectors tbody tr:nth-child(1) td.auth-rate`), "no score")
			label := browserValue(t, b, chromedp.Evaluate[string](
				`document.querySelector('#connector-fake svg.chart').getAttribute('aria-labelledby').split(' ').map(id => document.getElementById(id).textContent).join(' | ')`))
			mustContain(t, "rate chart's name", label, "fake: authorization rate over the last 24 hours", "from 0 to 100")
			points := browserValue(t, b, chromedp.Evaluate[[]string](
				`[...document.querySelectorAll('#connector-fake svg.chart circle title')].map(t => t.textContent)`))
			if len(points) != 4 { // rate, error share, p50, p95 of the current hour
				t.Fatalf("points of fake: %q", points)
			}
			mustContain(t, "rate point", points[0], "UTC: 100\u00a0% authorized (2 of 2 answered)")
			mustContain(t, "error point", points[1], "UTC: 0\u00a0% errors (0 of 2 attempts)")
			mustContain(t, "fake_b's breaker", b.text(t, `#connector-fake_b h2`), "breaker open")
			ticks := browserValue(t, b, chromedp.Evaluate[string](`document.querySelector('#connector-fake svg.chart .xaxis').textContent`))
			if !strings.Contains(ticks, ":00") {
				t.Fatalf("x axis labels: %q", ticks)
			}
			signOut(t)
		})
	}

	t.Run("AuthRateScoreAndShareOfTraffic", func(t *testing.T) {
		job := e.svc.AuthRatesJob()
		job.Start(context.Background())
		defer job.Stop()
		rules := `{"rules":[],"default":{"strategy":"auth_rate","connectors":[{"name":"fake"},{"name":"fake_b"}]}}`
		res, body := e.do(t, "PUT", fmt.Sprintf("/v1/tenants/%d/routing", e.tenant), e.keys[orchestrator.RoleAdmin],
			strings.NewReader(rules), map[string]string{"Content-Type": "application/json"})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("routing: %d %s", res.StatusCode, body)
		}
		for i := range 3 {
			e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], fmt.Sprint("auth-rate-", i),
				`{"amount_minor":1000,"currency":"EUR"}`)
		}
		signIn(t, orchestrator.RoleAdmin)
		// The refresher reads the scores within its 2 s once a decision
		// was made: reload until the page shows them.
		deadline := time.Now().Add(15 * time.Second)
		for {
			b.do(t, "connectors", chromedp.Navigate(e.url+"/console/connectors"), chromedp.WaitVisible(css(`#connectors`)))
			cell := b.text(t, `#connectors tbody tr:nth-child(1) td.auth-rate`)
			if strings.Contains(cell, "score") && !strings.Contains(cell, "no score") {
				mustContain(t, "fake's auth_rate cell", cell, "score 100\u00a0%", "(5 of 5)")
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fake's auth_rate cell never showed a score: %q", cell)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// One more payment, decided on the scores just read.
		e.post(t, "/v1/payments", e.keys[orchestrator.RoleMerchant], "auth-rate-3", `{"amount_minor":1000,"currency":"EUR"}`)
		b.do(t, "connectors", chromedp.Navigate(e.url+"/console/connectors"), chromedp.WaitVisible(css(`#connectors`)))
		b.screenshot(t, "connectors-auth-rate")
		label := browserValue(t, b, chromedp.Evaluate[string](
			`document.querySelector('#c0-learning').getAttribute('aria-labelledby').split(' ').map(id => document.getElementById(id).textContent).join(' | ')`))
		mustContain(t, "learning chart's name", label, "fake: auth_rate score and share of traffic")
		points := browserValue(t, b, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#c0-learning circle title')].map(t => t.textContent)`))
		// Four decisions this hour, each with fake and fake_b candidates:
		// the first three before the scores were read (no rate), the last
		// on fake at 100 %; all put fake first (fake_b without answers
		// draws lower, or its open breaker skips it).
		if len(points) != 2 {
			t.Fatalf("learning points of fake: %q", points)
		}
		mustContain(t, "score point", points[0], "mean score 100\u00a0% over 4 decisions")
		mustContain(t, "share point", points[1], "(4 of 4 decisions)")
		signOut(t)
	})

	t.Run("SupportSeesTheAttemptsOfAFailedOverPayment", func(t *testing.T) {
		signIn(t, orchestrator.RoleSupport)
		b.do(t, "payment",
			chromedp.Navigate(e.url+"/console/payments/"+fo.ID),
			chromedp.WaitVisible(css(`#attempts`)),
		)
		b.screenshot(t, "payment-attempts")
		rows := browserValue(t, b, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#attempts tbody tr')].map(r => r.innerText)`))
		if len(rows) != 2 {
			t.Fatalf("attempt rows %q, want 2", rows)
		}
		mustContain(t, "attempt 1", rows[0], "#1", "fake_b", "not_executed", "provider_unavailable")
		mustContain(t, "attempt 2", rows[1], "#2", "fake", "authorized", "ms")
		mustContain(t, "facts", b.text(t, `main .grid`), "no routing rules", "fake_b → fake", "attempt 2")
		started := b.text(t, `#timeline tr.ev-attempt_started`)
		mustContain(t, "attempt_started on the timeline", started, "attempt_started", "#2 on fake", "Failed over from fake_b after provider_unavailable")
		calls := browserValue(t, b, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#timeline tr.ev-provider_call')].map(r => r.innerText)`))
		// fake_b's call, then the retry's on fake (a lookup, then the
		// authorization).
		if len(calls) < 2 || !strings.Contains(calls[0], "#1 on fake_b") || !strings.Contains(calls[len(calls)-1], "#2 on fake") {
			t.Fatalf("provider calls on the timeline: %q", calls)
		}
		signOut(t)
	})

	t.Run("FinanceSeesOpenDiscrepanciesPerDay", func(t *testing.T) {
		signIn(t, orchestrator.RoleFinance)
		b.do(t, "runs",
			chromedp.Navigate(e.url+"/console/runs"),
			chromedp.WaitVisible(css(`#open-chart svg.chart`)),
		)
		b.screenshot(t, "runs-chart")
		bars := browserValue(t, b, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#open-chart svg.chart rect.bar title')].map(t => t.textContent)`))
		today := time.Now().UTC().Format(time.DateOnly)
		if len(bars) != 1 || bars[0] != today+": 1 open" {
			t.Fatalf("bars %q, want today's with 1 open", bars)
		}
		mustContain(t, "caption", b.text(t, `#open-chart figcaption`), "1 in all")
		name := browserValue(t, b, chromedp.Evaluate[string](`document.getElementById('open-discrepancies-title').textContent`))
		mustContain(t, "chart name", name, "Open discrepancies per business day", today)
		if links := b.text(t, `header nav`); strings.Contains(links, "Connectors") {
			t.Fatalf("finance's nav links to Connectors: %q", links)
		}
		signOut(t)
	})

	t.Run("MerchantAndFinanceMayNotSeeConnectors", func(t *testing.T) {
		for _, role := range []orchestrator.Role{orchestrator.RoleMerchant, orchestrator.RoleFinance} {
			cc := newConsoleClient(t, e.url)
			cc.signIn(e.keys[role])
			res, body := cc.get("/console/connectors")
			if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "error-page") || strings.Contains(body, "fake_b") {
				t.Fatalf("%s on connectors: %d\n%s", role, res.StatusCode, body)
			}
		}
		res, _ := newConsoleClient(t, e.url).get("/console/connectors")
		if res.Request.URL.Path != "/console/signin" {
			t.Fatalf("signed out, connectors went to %s", res.Request.URL)
		}
	})
}
