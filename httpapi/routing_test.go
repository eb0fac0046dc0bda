package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/orchestrator"
)

// routingVersion is a RoutingVersion as the API answers it.
type routingVersion struct {
	TenantID  int64           `json:"tenant_id"`
	Version   int             `json:"version"`
	Rules     json.RawMessage `json:"rules"`
	CreatedBy string          `json:"created_by"`
	CreatedAt string          `json:"created_at"`
}

type routingVersionList struct {
	Data    []routingVersion `json:"data"`
	HasMore bool             `json:"has_more"`
}

func TestRoutingAPI(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{})
	admin := e.keys[orchestrator.RoleAdmin]
	path := fmt.Sprintf("/v1/tenants/%d/routing", e.tenant)
	jsonHdr := map[string]string{"Content-Type": "application/json"}
	put := func(t *testing.T, key, body string) ([]byte, int) {
		t.Helper()
		res, b := e.do(t, "PUT", path, key, strings.NewReader(body), jsonHdr)
		return b, res.StatusCode
	}
	const euro = `{"rules":[{"name":"euro","match":{"currencies":["EUR"],"amount_max":100000},` +
		`"connectors":{"strategy":"priority","connectors":[{"name":"fake"}]}}],` +
		`"default":{"strategy":"priority","connectors":[{"name":"fake"}]}}`
	const split = `{"rules":[],"default":{"strategy":"volume_split","connectors":[{"name":"fake","weight":100}]}}`
	res, b := e.do(t, "GET", "/v1/me", admin, nil, nil)
	adminID := decode[struct {
		ID string `json:"api_key_id"`
	}](t, b).ID
	if res.StatusCode != 200 || adminID == "" {
		t.Fatalf("me: %d %s", res.StatusCode, b)
	}

	t.Run("AdminReadsTheBuiltInDefaultThenEachVersion", func(t *testing.T) {
		res, b := e.do(t, "GET", path, admin, nil, nil)
		if want := fmt.Sprintf(`{"tenant_id":%d,"version":0,"rules":{"rules":[],"default":{"strategy":"priority","connectors":[{"name":"fake"}]}}}`, e.tenant); res.StatusCode != 200 || strings.TrimSpace(string(b)) != want {
			t.Fatalf("before any PUT: %d %s", res.StatusCode, b)
		}
		b, status := put(t, admin, euro)
		v1 := decode[routingVersion](t, b)
		if status != 200 || v1.Version != 1 || v1.TenantID != e.tenant || v1.CreatedBy != adminID || v1.CreatedAt == "" {
			t.Fatalf("first PUT: %d %s", status, b)
		}
		sameRules(t, v1.Rules, euro)
		b, status = put(t, admin, split)
		if v2 := decode[routingVersion](t, b); status != 200 || v2.Version != 2 {
			t.Fatalf("second PUT: %d %s", status, b)
		}
		res, b = e.do(t, "GET", path, admin, nil, nil)
		if got := decode[routingVersion](t, b); res.StatusCode != 200 || got.Version != 2 {
			t.Fatalf("GET after two PUTs: %d %s", res.StatusCode, b)
		} else {
			sameRules(t, got.Rules, split)
		}
		res, b = e.do(t, "GET", path+"/versions", admin, nil, nil)
		l := decode[routingVersionList](t, b)
		if res.StatusCode != 200 || len(l.Data) != 2 || l.Data[0].Version != 2 || l.Data[1].Version != 1 || l.HasMore {
			t.Fatalf("versions: %d %s", res.StatusCode, b)
		}
		sameRules(t, l.Data[1].Rules, euro)
		res, b = e.do(t, "GET", path+"/versions?limit=1", admin, nil, nil)
		if l := decode[routingVersionList](t, b); res.StatusCode != 200 || len(l.Data) != 1 || l.Data[0].Version != 2 || !l.HasMore {
			t.Fatalf("first page: %d %s", res.StatusCode, b)
		}
		res, b = e.do(t, "GET", path+"/versions?limit=1&starting_after=2", admin, nil, nil)
		if l := decode[routingVersionList](t, b); res.StatusCode != 200 || len(l.Data) != 1 || l.Data[0].Version != 1 || l.HasMore {
			t.Fatalf("second page: %d %s", res.StatusCode, b)
		}
		// The same rules again (a retried PUT) store nothing.
		if b, status := put(t, admin, split); status != 200 || decode[routingVersion](t, b).Version != 2 {
			t.Fatalf("repeated PUT: %d %s", status, b)
		}
	})

	t.Run("OnlyAdminsMayReadOrChangeRouting", func(t *testing.T) {
		for _, role := range []orchestrator.Role{orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance} {
			key := e.keys[role]
			for _, p := range []string{path, path + "/versions"} {
				res, b := e.do(t, "GET", p, key, nil, nil)
				wantProblem(t, res, b, 403, "forbidden")
			}
			res, b := e.do(t, "PUT", path, key, strings.NewReader(euro), jsonHdr)
			wantProblem(t, res, b, 403, "forbidden")
		}
		res, b := e.do(t, "GET", path, "", nil, nil)
		wantProblem(t, res, b, 401, "unauthorized")
	})

	t.Run("BadRulesAreRefusedNamingTheField", func(t *testing.T) {
		prio := `{"strategy":"priority","connectors":[{"name":"fake"}]}`
		for _, tc := range []struct {
			name, body, param, detail string
		}{
			{"BadCurrency", `{"rules":[{"name":"r","match":{"currencies":["EUR","eur"]},"connectors":` + prio + `}],"default":` + prio + `}`,
				"rules[0].match.currencies[1]", "ISO 4217"},
			{"UnknownConnector", `{"default":{"strategy":"priority","connectors":[{"name":"fake"},{"name":"fake_z"}]}}`,
				"default.connectors[1].name", `connector "fake_z" is not configured`},
			{"AmountRangeBackwards", `{"rules":[{"name":"r","match":{"amount_min":500,"amount_max":100},"connectors":` + prio + `}],"default":` + prio + `}`,
				"rules[0].match.amount_max", "amount_min"},
			{"WeightOnPriority", `{"default":{"strategy":"priority","connectors":[{"name":"fake","weight":50}]}}`,
				"default.connectors[0].weight", ""},
			{"UnknownNestedField", `{"default":{"strategy":"priority","connectors":[{"name":"fake","colour":"red"}]}}`,
				"default.connectors[0].colour", "unknown field"},
			{"UnknownTopLevelField", `{"default":` + prio + `,"colour":"red"}`, "colour", "unknown field"},
			{"WrongType", `{"default":{"strategy":"volume_split","connectors":[{"name":"fake","weight":"all"}]}}`,
				"default.connectors[0].weight", ""},
			{"EmptyBody", ``, "default.strategy", ""},
			{"NotAnObject", `[]`, "", "JSON object"},
			{"DuplicateMember", `{"default":` + prio + `,"default":` + prio + `}`, "default", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b, status := put(t, admin, tc.body)
				if status != 400 {
					t.Fatalf("status %d: %s", status, b)
				}
				p := decode[httpapi.Problem](t, b)
				if p.Code != "validation_failed" || p.Param != tc.param || !strings.Contains(p.Detail, tc.detail) {
					t.Fatalf("problem %s, want param %q saying %q", b, tc.param, tc.detail)
				}
			})
		}
		res, b := e.do(t, "PUT", path, admin, strings.NewReader(split), map[string]string{"Content-Type": "text/plain"})
		wantProblem(t, res, b, 415, "unsupported_media_type")
		res, b = e.do(t, "PUT", path, admin, strings.NewReader(split+strings.Repeat(" ", httpapi.MaxBodyBytes)), jsonHdr)
		wantProblem(t, res, b, 413, "body_too_large")
		for _, q := range []string{"limit=0", "limit=101", "starting_after=0", "starting_after=x"} {
			res, b = e.do(t, "GET", path+"/versions?"+q, admin, nil, nil)
			wantProblem(t, res, b, 400, "validation_failed")
		}
		if n := e.count(t, `SELECT count(*) FROM routing_versions`); n != 2 {
			t.Fatalf("%d versions stored, want the 2 accepted", n)
		}
	})

	t.Run("UnknownTenantIsNotFound", func(t *testing.T) {
		for _, p := range []string{"/v1/tenants/999999/routing", "/v1/tenants/999999/routing/versions", "/v1/tenants/abc/routing", "/v1/tenants/0/routing"} {
			res, b := e.do(t, "GET", p, admin, nil, nil)
			wantProblem(t, res, b, 404, "not_found")
		}
		res, b := e.do(t, "PUT", "/v1/tenants/999999/routing", admin, strings.NewReader(split), jsonHdr)
		wantProblem(t, res, b, 404, "not_found")
	})
}

// sameRules fails unless the rules got (as answered) are want's JSON, up
// to key order and spacing.
func sameRules(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("rules:\n got  %s\n want %s", ja, jb)
	}
}

// TestConnectorsAPIShowsScoresNextToBreakers: after payments routed by
// auth_rate, GET /v1/connectors shows each connector's breaker and its
// score, read by the instance's refresher; before any auth_rate decision
// it shows no scores.
func TestConnectorsAPIShowsScoresNextToBreakers(t *testing.T) {
	t.Parallel()
	e := newMigratedEnv(t, httpapi.Config{}, orchestrator.Config{
		AuthRate: orchestrator.AuthRateConfig{Refresh: 20 * time.Millisecond}})
	job := e.svc.AuthRatesJob()
	job.Start(context.Background())
	t.Cleanup(job.Stop)
	support := e.keys[orchestrator.RoleSupport]
	type list struct {
		Data []struct {
			Name     string `json:"name"`
			Breaker  string `json:"breaker"`
			AuthRate struct {
				Authorized, Answered int
				RateBP               *int `json:"rate_bp"`
			} `json:"auth_rate"`
		} `json:"data"`
		ScoresAt *time.Time `json:"scores_at"`
	}
	res, b := e.do(t, "GET", "/v1/connectors", support, nil, nil)
	if l := decode[list](t, b); res.StatusCode != 200 || l.ScoresAt != nil || len(l.Data) != 1 ||
		l.Data[0].Name != "fake" || l.Data[0].Breaker != "closed" || l.Data[0].AuthRate.RateBP != nil {
		t.Fatalf("before any auth_rate decision: %d %s", res.StatusCode, b)
	}
	rules := `{"rules":[],"default":{"strategy":"auth_rate","connectors":[{"name":"fake"}],"auth_rate":{"exploration_percent":0}}}`
	res, b = e.do(t, "PUT", fmt.Sprintf("/v1/tenants/%d/routing", e.tenant), e.keys[orchestrator.RoleAdmin],
		strings.NewReader(rules), map[string]string{"Content-Type": "application/json"})
	if res.StatusCode != 200 {
		t.Fatalf("routing: %d %s", res.StatusCode, b)
	}
	merchant := e.keys[orchestrator.RoleMerchant]
	for i, pm := range []string{"pm_card_visa", "pm_card_visa", "pm_card_visa", "pm_card_chargeDeclined"} {
		e.post(t, "/v1/payments", merchant, fmt.Sprint("conn-", i), `{"amount_minor":1000,"currency":"EUR","payment_method":"`+pm+`"}`)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, b = e.do(t, "GET", "/v1/connectors", support, nil, nil)
		l := decode[list](t, b)
		if res.StatusCode == 200 && l.ScoresAt != nil && l.Data[0].AuthRate.Answered == 4 {
			if a := l.Data[0].AuthRate; a.Authorized != 3 || a.RateBP == nil || *a.RateBP != 7500 {
				t.Fatalf("scores of fake after 3 authorized and 1 declined: %s", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scores never showed the four payments: %d %s", res.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, b = e.do(t, "GET", "/v1/connectors", merchant, nil, nil)
	wantProblem(t, res, b, 403, "forbidden")
}
