package httpapi_test

import (
	"strings"
	"testing"

	"github.com/payorch/payorch/internal/pgtest"
)

// poolerSuite names the test functions of the payments API's conformance
// (payments, captures, refunds, cancels, lists, idempotency, auth,
// validation, the OpenAPI contract, recovery, webhooks, routing and
// finance) that TestPaymentsAPIThroughPgbouncer runs again through a real
// PgBouncer in transaction pool mode.
var poolerSuite = []struct {
	name string
	test func(*testing.T)
}{
	{"AuthorizeExactlyOnce", TestAuthorizeExactlyOnce},
	{"IdempotencyKeyHeader", TestIdempotencyKeyHeader},
	{"RequestValidation", TestRequestValidation},
	{"PaymentLifecycle", TestPaymentLifecycle},
	{"TenantIsolation", TestTenantIsolation},
	{"ListPaymentsPaginates", TestListPaymentsPaginates},
	{"Auth", TestAuth},
	{"OpenAPIContract", TestOpenAPIContract},
	{"SettlingWriteStoresTheAnswer", TestSettlingWriteStoresTheAnswer},
	{"AfterKeyPurge", TestAfterKeyPurge},
	{"ResolverSettlesUnknownOutcomes", TestResolverSettlesUnknownOutcomes},
	{"HostileInputIsRefusedAndChangesNothing", TestHostileInputIsRefusedAndChangesNothing},
	{"WebhookEndpointsAPI", TestWebhookEndpointsAPI},
	{"RoutingAPI", TestRoutingAPI},
	{"FinanceAPI", TestFinanceAPI},
}

// poolerTest prefixes the names of the tests that run through PgBouncer.
const poolerTest = "TestPaymentsAPIThroughPgbouncer/"

// TestPaymentsAPIThroughPgbouncer runs the suite's cases with every
// database connection of the Service, the Reconciler and the test itself
// going through PgBouncer in transaction mode, in pgx's cache_describe mode (no
// server-side prepared statements), as PAYORCH_DATABASE_POOLER=transaction
// configures `serve`: nothing the API does may rely on session state
// between transactions.
func TestPaymentsAPIThroughPgbouncer(t *testing.T) {
	t.Parallel()
	for _, c := range poolerSuite {
		t.Run(c.name, c.test)
	}
}

// testDBURL is the URL of a new migrated database of t's own: direct, or
// through PgBouncer (pgx's cache_describe mode) when t runs under
// TestPaymentsAPIThroughPgbouncer.
func testDBURL(t testing.TB) string {
	t.Helper()
	u := pgtest.URL(t)
	if !strings.HasPrefix(t.Name(), poolerTest) {
		return u
	}
	return pgtest.ThroughPooler(t, u) + "&default_query_exec_mode=cache_describe"
}
