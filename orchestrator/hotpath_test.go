package orchestrator

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/pgtest"
)

// updateHotPath rewrites hotPathScript instead of comparing it (go
// generate runs it).
var updateHotPath = flag.Bool("update-hot-path", false, "rewrite "+hotPathScript+" from the service's statements")

// hotPathScript is the pgbench script of one new authorization, run by
// BenchmarkServe (cmd/payorch/bench_test.go) as the floor the service is
// measured against.
const hotPathScript = "../testdata/bench/authorize_hot_path.sql"

// hotPath is the SQL one new authorization runs (POST /v1/payments under
// a new key, approved by the provider), statement by statement, each in a
// transaction of its own.
var hotPath = []struct{ what, sql string }{
	{"1. Claim the key, or read it if it exists (claimOrReadSQL in\n   Service.BeginIdempotent).", claimOrReadSQL},
	{"2. Create the pending payment, its first event and the key's recovery\n   point (createPaymentSQL in Service.Authorize).", createPaymentSQL},
	{"(the provider creates the hold: HTTP, no SQL)\n3. Save the provider's reference before confirming (saveReferenceSQL,\n   OnReference in Service.authorizeAtProvider).", saveReferenceSQL},
	{"(the provider confirms the hold: HTTP, no SQL)\n4. Settle and answer: the payment is authorized, the provider call and\n   the state change go into its history, and the key is completed with\n   its stored answer (a real 485-byte 201 body) and its lease released\n   (settleCompleteSQL in Service.settleAuthorize).", settleCompleteSQL},
}

// pgbenchKey is the idempotency key of one pgbench transaction: the run,
// the client and a random 63-bit number (pgbench variables).
const pgbenchKey = `('pgb-' || :run::text || '-' || :client_id::text || '-' || :r::text)`

// hotPathArgs are the pgbench expressions that stand for the statements'
// named arguments: pgbench variables (:tenant_id, :run, :client_id, :r),
// now(), md5() of the key for the values the service computes in Go
// (lease token, payment id, provider reference), and literals (the
// fingerprint of {"amount_minor":1000,"currency":"EUR"}, the stored
// answer). Each is put in parentheses where its @name was.
var hotPathArgs = map[string]string{
	"tenant_id":                 ":tenant_id",
	"scope":                     "''",
	"operation":                 "'POST /v1/payments'",
	"key":                       pgbenchKey,
	"request_hash":              `'\xdb9fea7465bfaa649337620b818c5906b131b12f4de6b6a971ec3b37a406d698'::bytea`,
	"field_hashes":              `'{"currency": "87ef325635aa32dd785d818665ee8fe1", "amount_minor": "40510175845988f13f6162ed8526f0b0"}'::jsonb`,
	"token":                     "md5" + pgbenchKey + "::uuid",
	"locked_until":              "now() + interval '60 seconds'",
	"now":                       "now()",
	"expires_at":                "now() + interval '24 hours'",
	"payment_id":                "'pay_' || md5" + pgbenchKey,
	"amount_minor":              "1000",
	"currency":                  "'EUR'",
	"provider":                  "'fake'",
	"payment_method":            "'pm_card_visa'",
	"description":               "''",
	"metadata":                  "'{}'::jsonb",
	"routing_version":           "NULL::integer",
	"route":                     "ARRAY['fake']",
	"forwarded_key":             "'po_' || md5" + pgbenchKey + " || md5('pay_' || md5" + pgbenchKey + ")",
	"routing":                   `'{"strategy": "priority", "chosen": "fake", "explored": false}'::jsonb`,
	"attempt":                   "1",
	"on_expiry":                 "'none'",
	"extended_authorization":    "false",
	"card":                      "NULL::jsonb",
	"return_url":                "NULL::text",
	"incremental_authorization": "NULL::text",
	"multicapture":              "NULL::text",
	"overcapture":               "NULL::text",
	"max_capturable_minor":      "NULL::bigint",
	"max_amount_minor":          "NULL::bigint",
	"next_action_url":           "NULL::text",
	"action_expires_at":         "NULL::timestamptz",
	"synchronous_commit":        "'off'",
	"attempt_outcome":           "'authorized'",
	"claim_tenant_id":           ":tenant_id",
	"claim_operation":           "'POST /v1/payments'",
	"claim_key":                 pgbenchKey,
	"claim_token":               "md5" + pgbenchKey + "::uuid",
	"provider_ref":              "'fh_' || substr(md5" + pgbenchKey + ", 1, 24)",
	"status":                    "'authorized'",
	"capture_before":            "now() + interval '7 days'",
	"failure_code":              "NULL",
	"detail":                    "'{}'::jsonb",
	"call_operation":            "'authorize'",
	"call_forwarded_key":        "'po_' || md5" + pgbenchKey + " || md5('pay_' || md5" + pgbenchKey + ")",
	"call_outcome":              "'ok'",
	"call_latency_ms":           "0.5",
	"call_detail":               `'{"attempt": 1, "provider": "fake"}'::jsonb`,
	"call_at":                   "now()",
	"response_status":           "201",
	"response_headers":          `('{"Location": "/v1/payments/' || 'pay_' || md5` + pgbenchKey + ` || '", "Content-Type": "application/json"}')::jsonb`,
	"response_body":             `'\x7b226964223a227061795f3766653362353337313365666366386636653163663833396266306463333064222c226f626a656374223a227061796d656e74222c2274656e616e745f6964223a312c22737461747573223a22617574686f72697a6564222c22616d6f756e745f6d696e6f72223a313030302c2263757272656e6379223a22455552222c2263617074757265645f6d696e6f72223a302c22726566756e6465645f6d696e6f72223a302c2270726f7669646572223a2266616b65222c2270726f76696465725f726566223a2266685f393066353431643539343539346164363038656534366263222c227061796d656e745f6d6574686f64223a22706d5f636172645f76697361222c226964656d706f74656e63795f6b6579223a22736372617463682d31222c226465736372697074696f6e223a22222c226d65746164617461223a7b7d2c226661696c7572655f636f6465223a6e756c6c2c22636170747572655f6265666f7265223a22323032362d31322d30395431323a31383a31332e3133353435335a222c22637265617465645f6174223a22323032362d31322d30325431323a31383a31332e3132323830365a222c22757064617465645f6174223a22323032362d31322d30325431323a31383a31332e3133363736385a227d0a'::bytea`,
}

const hotPathHeader = `-- pgbench script: the SQL one new authorize (POST /v1/payments with a new
-- Idempotency-Key, answered 201 by the fake provider) runs, statement for
-- statement, each one round trip and one transaction as in the service.
-- The API key is not read: payorch serve authenticates from its key cache
-- (orchestrator/keycache.go), so a request reads api_keys only when the
-- cache misses.
--
-- GENERATED from the service's statements by TestHotPathScript
-- (orchestrator/hotpath_test.go), which fails when this file is stale; do
-- not edit, run ` + "`go generate ./orchestrator/`" + ` instead. Each named argument
-- (@name) of a statement is replaced, in parentheses, by a pgbench
-- expression (hotPathArgs there): pgbench variables, now(), md5() of the
-- key for the values the service computes in Go (lease token, payment id,
-- provider reference), literals for the request's fingerprint and the
-- stored answer. The key is unique per transaction: run, client and a
-- random 63-bit number.
--
-- BenchmarkServe (cmd/payorch/bench_test.go) runs it as
--
--   pgbench --no-vacuum --protocol=prepared --client=16 --jobs=2 --time=15 \
--     --file=testdata/bench/authorize_hot_path.sql \
--     --define=tenant_id=1 --define=run=<n> \
--     --log --log-prefix=<dir>/tx 'postgres:///<db>?host=<socket dir>&user=postgres…'
--
-- against a migrated database holding that tenant.

\set r random(1, 9223372036854775806)
`

// renderHotPath writes the pgbench script of hotPath.
func renderHotPath() (string, error) {
	var b strings.Builder
	b.WriteString(hotPathHeader)
	for _, st := range hotPath {
		sql, err := pgbenchStatement(st.sql)
		if err != nil {
			return "", err
		}
		b.WriteString("\n")
		for _, line := range strings.Split(st.what, "\n") {
			b.WriteString("-- " + line + "\n")
		}
		b.WriteString(sql + ";\n")
	}
	return b.String(), nil
}

var ordinalRE = regexp.MustCompile(`\$([0-9]+)`)

// pgbenchStatement replaces the named arguments of sql by their pgbench
// expressions, finding them as pgx does (NamedArgs' own rewriting), and
// takes off the indentation of Go source.
func pgbenchStatement(sql string) (string, error) {
	args := pgx.NamedArgs{}
	for name, expr := range hotPathArgs {
		args[name] = "(" + expr + ")"
	}
	positional, values, err := args.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		return "", err
	}
	for i, v := range values {
		if v == nil {
			return "", fmt.Errorf("argument $%d of %q has no pgbench expression in hotPathArgs", i+1, firstLine(sql))
		}
	}
	out := ordinalRE.ReplaceAllStringFunc(positional, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		return values[n-1].(string)
	})
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		lines = append(lines, strings.TrimPrefix(line, "\t"))
	}
	return strings.Join(lines, "\n"), nil
}

func firstLine(sql string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	return line
}

// The pgbench script of the hot path is the service's own statements:
// generated from them, compared here, and run here the way pgbench runs
// it, so that it cannot drift from the service or stop running.
func TestHotPathScript(t *testing.T) {
	t.Parallel()
	want, err := renderHotPath()
	if err != nil {
		t.Fatal(err)
	}
	if *updateHotPath {
		if err := os.WriteFile(hotPathScript, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(hotPathScript)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run go generate ./orchestrator/ (it is generated from the service's statements)", hotPathScript)
	}

	// Run it once as pgbench would (variables substituted, statements in
	// turn), and check it did what a new authorization does.
	pool := pgtest.DB(t)
	ctx := context.Background()
	svc := NewService(Config{Pool: pool})
	tenant, _, _, err := svc.CreateTenant(ctx, "pgbench")
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer(":tenant_id", strconv.FormatInt(tenant.ID, 10), ":run", "7", ":client_id", "3", ":r", "42")
	script := strings.SplitN(want, `\set r random(1, 9223372036854775806)`, 2)[1]
	var statements int
	for _, st := range strings.Split(script, ";\n") {
		if strings.TrimSpace(stripComments(st)) == "" {
			continue
		}
		statements++
		if _, err := pool.Exec(ctx, vars.Replace(st), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("statement %d: %v\n%s", statements, err, st)
		}
	}
	if statements != len(hotPath) {
		t.Fatalf("%d statements run, want %d", statements, len(hotPath))
	}
	key := "pgb-7-3-42"
	sum := md5.Sum([]byte(key))
	p, err := svc.readPayment(ctx, tenant.ID, "pay_"+hex.EncodeToString(sum[:]))
	if err != nil || p.Status != StatusAuthorized || p.ProviderRef == nil || p.CaptureBefore == nil {
		t.Fatalf("payment after the script: %+v %v", p, err)
	}
	var status, point string
	var locked *time.Time
	err = pool.QueryRow(ctx, `SELECT status, recovery_point, locked_until FROM idempotency_keys
		WHERE tenant_id = $1 AND key = $2`, tenant.ID, key).Scan(&status, &point, &locked)
	if err != nil || status != "completed" || point != "finished" || locked != nil {
		t.Fatalf("key after the script: %s %s %v %v", status, point, locked, err)
	}
	var events []string
	rows, _ := pool.Query(ctx, `SELECT type || ' ' || coalesce(to_status, outcome) FROM payment_events
		WHERE tenant_id = $1 AND payment_id = $2 ORDER BY id`, tenant.ID, p.ID)
	if events, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if strings.Join(events, ", ") != "state_changed pending, provider_call ok, state_changed authorized" {
		t.Fatalf("history after the script: %v", events)
	}
}

func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
