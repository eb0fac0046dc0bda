// Package vault is payorch's payment-method vault: cards tokenized once
// (POST /v1/payment_methods) and charged later through whichever
// connector runs an attempt.
//
// Numbers and CVCs are stored only encrypted: envelope encryption with
// AES-256-GCM, a fresh data key per payment method, wrapped by a
// versioned key-encryption key from the configuration (Keyring). The
// tenant, the method's id and the field are each ciphertext's associated
// data, so a ciphertext copied to another row or column does not decrypt.
// The data keys live in a table of their own (payment_method_keys):
// Delete removes a method's key and ciphertexts, and Rotate re-wraps the
// keys under the newest key-encryption key without decrypting any card.
// Every decryption of a card is counted (payorch.vault.decryptions, by
// reason).
package vault

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/payorch/payorch/orchestrator"
)

// InstrumentationName names the meter of this package.
const InstrumentationName = "github.com/payorch/payorch/orchestrator/vault"

// DefaultCVCTTL is how long a CVC is kept when no authorization used it:
// card rules allow keeping it only until the authorization it was taken
// for.
const DefaultCVCTTL = time.Hour

// Config configures a Vault.
type Config struct {
	// Pool is the connection pool on the primary.
	Pool *pgxpool.Pool
	// Keys are the key-encryption keys and the fingerprint key (ParseKeys).
	Keys *Keyring
	// Clock returns the current time; defaults to time.Now.
	Clock func() time.Time
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Meter takes the decryption counter; nil means no metrics.
	Meter metric.Meter
	// CVCTTL is how long after creation a CVC that no authorization used
	// is kept; 0 means DefaultCVCTTL.
	CVCTTL time.Duration
}

// Vault stores payment methods in PostgreSQL. It implements
// orchestrator.CardVault. Safe for concurrent use.
type Vault struct {
	pool        *pgxpool.Pool
	keys        *Keyring
	now         func() time.Time
	logger      *slog.Logger
	cvcTTL      time.Duration
	decryptions metric.Int64Counter
}

var _ orchestrator.CardVault = (*Vault)(nil)

// New returns a Vault over cfg.Pool, with cfg's defaults filled in.
func New(cfg Config) *Vault {
	v := &Vault{pool: cfg.Pool, keys: cfg.Keys, now: cfg.Clock, logger: cfg.Logger, cvcTTL: cfg.CVCTTL}
	if v.now == nil {
		v.now = time.Now
	}
	if v.logger == nil {
		v.logger = slog.New(slog.DiscardHandler)
	}
	if v.cvcTTL <= 0 {
		v.cvcTTL = DefaultCVCTTL
	}
	m := cfg.Meter
	if m == nil {
		m = metricnoop.NewMeterProvider().Meter(InstrumentationName)
	}
	c, err := m.Int64Counter("payorch.vault.decryptions", metric.WithUnit("{decryption}"),
		metric.WithDescription("Decryptions of vaulted cards (reason authorize) and unwraps of their data keys (reason rotate): an unexpected one shows here."))
	if err != nil {
		// Only an invalid instrument name fails, and this one is fixed.
		c, _ = metricnoop.NewMeterProvider().Meter(InstrumentationName).Int64Counter("payorch.vault.decryptions")
	}
	v.decryptions = c
	return v
}

// Keys is the vault's keyring.
func (v *Vault) Keys() *Keyring { return v.keys }

// Blind is Keyring.Blind: an HMAC of a sensitive value under the
// fingerprint key, for idempotency fingerprints of bodies with card data.
func (v *Vault) Blind(value string) string { return v.keys.Blind(value) }

// methodID is the deterministic id of the payment method a tenant creates
// under an idempotency key (as orchestrator.PaymentID): a retry, even
// after the key expired, names the same method.
func methodID(tenantID int64, key string) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(tenantID, 10) + ":" + key))
	return orchestrator.VaultPrefix + hex.EncodeToString(sum[:16])
}

// CardDetails is what anyone may see of a vaulted card.
type CardDetails struct {
	Brand       string `json:"brand" db:"brand"`
	Last4       string `json:"last4" db:"last4"`
	ExpMonth    int    `json:"exp_month" db:"exp_month"`
	ExpYear     int    `json:"exp_year" db:"exp_year"`
	Fingerprint string `json:"fingerprint" db:"fingerprint"`
	// Funding is credit, debit or prepaid when known (a provider told).
	Funding string `json:"funding,omitempty" db:"-"`
}

// PaymentMethod is a vaulted payment method as the API shows it: never
// its number or CVC.
type PaymentMethod struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Type           string            `json:"type"`
	Card           CardDetails       `json:"card"`
	BillingDetails *BillingDetails   `json:"billing_details"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"created_at"`
	DeletedAt      *time.Time        `json:"deleted_at,omitempty"`
}

// methodColumns are the columns every statement returning a payment
// method returns, read into a methodRow by name.
const methodColumns = `id, type, brand, last4, exp_month, exp_year, funding, fingerprint, billing_details, metadata,
	created_at, deleted_at, request_hash`

// methodRow is a payment_methods row as statements return it
// (methodColumns).
type methodRow struct {
	ID             string            `db:"id"`
	Type           string            `db:"type"`
	Brand          string            `db:"brand"`
	Last4          string            `db:"last4"`
	ExpMonth       int               `db:"exp_month"`
	ExpYear        int               `db:"exp_year"`
	Funding        *string           `db:"funding"`
	Fingerprint    string            `db:"fingerprint"`
	BillingDetails *BillingDetails   `db:"billing_details"`
	Metadata       map[string]string `db:"metadata"`
	CreatedAt      time.Time         `db:"created_at"`
	DeletedAt      *time.Time        `db:"deleted_at"`
	RequestHash    []byte            `db:"request_hash"`
}

// method is the PaymentMethod of a row: object name, metadata never nil,
// times in UTC.
func (r methodRow) method() PaymentMethod {
	pm := PaymentMethod{ID: r.ID, Object: "payment_method", Type: r.Type, BillingDetails: r.BillingDetails,
		Metadata: r.Metadata, CreatedAt: r.CreatedAt.UTC(),
		Card: CardDetails{Brand: r.Brand, Last4: r.Last4, ExpMonth: r.ExpMonth, ExpYear: r.ExpYear, Fingerprint: r.Fingerprint}}
	if r.Funding != nil {
		pm.Card.Funding = *r.Funding
	}
	if pm.Metadata == nil {
		pm.Metadata = map[string]string{}
	}
	if r.DeletedAt != nil {
		t := r.DeletedAt.UTC()
		pm.DeletedAt = &t
	}
	return pm
}

// notFound is the answer for a payment method that is not the tenant's,
// or (where a card is needed) was deleted.
func notFound(id string) error {
	return &orchestrator.Error{Code: orchestrator.CodeNotFound, Param: "payment_method",
		Message: "no payment method " + strconv.Quote(id)}
}

// readMethod reads payment method id of a tenant, deleted or not.
func (v *Vault) readMethod(ctx context.Context, tenantID int64, id string) (methodRow, error) {
	const q = `SELECT ` + methodColumns + ` FROM payment_methods WHERE tenant_id = @tenant_id AND id = @id`
	rows, _ := v.pool.Query(ctx, q, orchestrator.NamedArgs{"tenant_id": tenantID, "id": id})
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[methodRow])
	if errors.Is(err, pgx.ErrNoRows) {
		return methodRow{}, notFound(id)
	}
	if err != nil {
		return methodRow{}, orchestrator.Internalf("read payment method: %w", err)
	}
	return r, nil
}

// Get reads a tenant's payment method; a deleted one shows with its
// deleted_at. Errors: not_found.
func (v *Vault) Get(ctx context.Context, tenantID int64, id string) (PaymentMethod, error) {
	r, err := v.readMethod(ctx, tenantID, id)
	if err != nil {
		return PaymentMethod{}, err
	}
	return r.method(), nil
}
