package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// An admin sees each tenant's active routing version and its rules,
// read-only; no other role sees the page.
func TestConsoleRoutingInBrowser(t *testing.T) {
	t.Parallel()
	b := newTab(t)
	e := newMigratedEnv(t, httpapi.Config{})
	ctx := context.Background()
	other, _, _, err := e.svc.CreateTenant(ctx, "Globex")
	if err != nil {
		t.Fatal(err)
	}
	euro := orchestrator.RoutingRules{
		Rules: []orchestrator.RoutingRule{{Name: "euro-small", Match: orchestrator.RuleMatch{Currencies: []string{"EUR"},
			AmountMax: new(int64(100_000)), Metadata: map[string]string{"channel": "web"}},
			Connectors: orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyPriority, Connectors: []orchestrator.WeightedConnector{{Name: "fake"}}}}},
		Default: orchestrator.ConnectorChoice{Strategy: orchestrator.StrategyVolumeSplit, Connectors: []orchestrator.WeightedConnector{{Name: "fake", Weight: 40}}},
	}
	for _, r := range []orchestrator.RoutingRules{{Default: euro.Default}, euro} {
		if _, err := e.svc.SetRouting(ctx, e.tenant, r, "key_console_test"); err != nil {
			t.Fatal(err)
		}
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	t.Run("AdminSeesTheActiveVersionAndItsRules", func(t *testing.T) {
		b.do(t, "sign in",
			chromedp.Navigate(e.url+"/console/"),
			chromedp.WaitVisible(css(`#api_key`)),
			chromedp.SendKeys(css(`#api_key`), e.keys[orchestrator.RoleAdmin]),
			chromedp.Click(css(`#signin button`)),
			chromedp.WaitVisible(css(`#tenants`)),
		)
		b.screenshot(t, "routing-01-tenants")
		mustContain(t, "tenants", b.text(t, `#tenants`), "Acme", "Globex")
		mustContain(t, "nav", b.text(t, `header nav`), "Tenants")
		b.do(t, "open tenant",
			chromedp.Click(css(fmt.Sprintf(`#tenants a[href="/console/tenants/%d"]`, e.tenant))),
			chromedp.WaitVisible(css(`#rules`)),
		)
		b.screenshot(t, "routing-02-tenant")
		mustContain(t, "active version", b.text(t, `#routing-version`), "v2", "key_console_test")
		rules := b.text(t, `#rules`)
		mustContain(t, "rules", rules, "euro-small", "currency EUR", "amount at most 1,000.00\u00a0EUR", `metadata channel = "web"`,
			"priority", "default", "any payment no rule matched", "volume_split", "fake (100%)")
		if strings.Index(rules, "euro-small") > strings.Index(rules, "any payment no rule matched") {
			t.Fatalf("the default is listed before the rules:\n%s", rules)
		}
		mustContain(t, "versions", b.text(t, `#versions`), "v2", "v1")
		if n := browserValue(t, b, chromedp.Evaluate[int](`document.querySelectorAll("main form").length`)); n != 0 {
			t.Fatalf("the routing page has %d forms; it is read-only", n)
		}

		b.do(t, "a tenant without routing",
			chromedp.Navigate(fmt.Sprintf("%s/console/tenants/%d", e.url, other.ID)),
			chromedp.WaitVisible(css(`#rules`)),
		)
		b.screenshot(t, "routing-03-default")
		mustContain(t, "built-in routing", b.text(t, `main`), "v0", "built-in default", "fake", "No routing version stored")
	})

	t.Run("OtherRolesMayNotSeeIt", func(t *testing.T) {
		for _, role := range []orchestrator.Role{orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance} {
			cc := newConsoleClient(t, e.url)
			_, page := cc.signIn(e.keys[role])
			if strings.Contains(page, `href="/console/tenants"`) {
				t.Fatalf("the %s nav links to tenants", role)
			}
			for _, p := range []string{"/console/tenants", fmt.Sprintf("/console/tenants/%d", e.tenant)} {
				res, body := cc.get(p)
				if res.StatusCode != 403 || strings.Contains(body, "euro-small") {
					t.Fatalf("%s on %s: %d", role, p, res.StatusCode)
				}
			}
		}
		cc := newConsoleClient(t, e.url)
		cc.signIn(e.keys[orchestrator.RoleAdmin])
		for _, p := range []string{"/console/tenants/999999", "/console/tenants/abc"} {
			if res, body := cc.get(p); res.StatusCode != 404 || !strings.Contains(body, "error-page") {
				t.Fatalf("%s: %d", p, res.StatusCode)
			}
		}
	})
}
