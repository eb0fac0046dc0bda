package vault

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testKEK is the key-encryption key of a version in the tests: a fixed
// 32 bytes per version.
func testKEK(version int) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(fmt.Sprintf("k%d", version%10), 16)))
}

// testFingerprintKey is the tests' fingerprint key.
var testFingerprintKey = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("f", 32)))

// testKeys is a keyring with the key-encryption keys of versions.
func testKeys(t testing.TB, versions ...int) *Keyring {
	t.Helper()
	parts := make([]string, len(versions))
	for i, v := range versions {
		parts[i] = fmt.Sprintf("%d:%s", v, testKEK(v))
	}
	k, err := ParseKeys(strings.Join(parts, ","), testFingerprintKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fixture is a vault over a database of its own, with two tenants.
type fixture struct {
	pool   *pgxpool.Pool
	clock  *testClock
	vault  *Vault
	tenant int64
	other  int64
}

func newFixture(t testing.TB, versions ...int) *fixture {
	t.Helper()
	if len(versions) == 0 {
		versions = []int{1}
	}
	f := &fixture{pool: pgtest.DB(t), clock: &testClock{t: time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)}}
	ctx := context.Background()
	for _, tid := range []*int64{&f.tenant, &f.other} {
		name := fmt.Sprintf("tenant-%p", tid)
		if err := f.pool.QueryRow(ctx, "INSERT INTO tenants (name) VALUES ($1) RETURNING id", name).Scan(tid); err != nil {
			t.Fatal(err)
		}
	}
	f.vault = f.with(testKeys(t, versions...))
	return f
}

// with is another vault on the same database and clock, with keys.
func (f *fixture) with(keys *Keyring) *Vault {
	return New(Config{Pool: f.pool, Keys: keys, Clock: f.clock.Now})
}

// visa is a card of Stripe's test numbers, as a client may send it.
func visa() CardInput {
	return CardInput{Number: "4242 4242 4242 4242", ExpMonth: 12, ExpYear: 2034, CVC: "123", HolderName: "Ada Lovelace"}
}

func createInput(tenant int64, key string, card CardInput) CreateInput {
	return CreateInput{TenantID: tenant, Key: key, RequestHash: []byte("hash-" + key), Card: card}
}

func mustCreate(t testing.TB, v *Vault, in CreateInput) PaymentMethod {
	t.Helper()
	pm, err := v.Create(context.Background(), in)
	if err != nil {
		t.Fatalf("create %s: %v", in.Key, err)
	}
	return pm
}

// wantCode fails t unless err is an *orchestrator.Error of code (and
// param, when given).
func wantCode(t testing.TB, err error, code orchestrator.Code, param string) {
	t.Helper()
	var e *orchestrator.Error
	if !errors.As(err, &e) || e.Code != code || (param != "" && e.Param != param) {
		t.Fatalf("got error %v, want %s on %q", err, code, param)
	}
}
