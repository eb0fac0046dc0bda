package orchestrator

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tenant is a merchant account: payments, keys and provider settings belong
// to exactly one tenant.
type Tenant struct {
	ID        int64     `json:"id" db:"id"`
	Name      string    `json:"name" db:"name"`
	CreatedAt time.Time `json:"created_at" db:"created_at"`
}

// CreateTenant creates a tenant and its first merchant key in one
// transaction and returns the key, shown this once. Errors:
// validation_failed, conflict (a tenant of that name exists).
func (s *Service) CreateTenant(ctx context.Context, name string) (Tenant, APIKey, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Tenant{}, APIKey{}, "", ParamError("name", "name must be 1 to 200 characters")
	}
	var (
		t      Tenant
		k      APIKey
		secret string
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		const q = `INSERT INTO tenants (name, created_at) VALUES ($1, $2) RETURNING id, name, created_at`
		rows, _ := tx.Query(ctx, q, name, s.now())
		var err error
		t, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Tenant])
		if err != nil {
			if code, con := constraintOf(err); code == pgUniqueViolation && con == "tenants_name_key" {
				return &Error{Code: CodeConflict, Param: "name", Message: "a tenant named " + strconv.Quote(name) + " exists"}
			}
			return internalf("create tenant: %w", err)
		}
		k, secret, err = s.createAPIKey(ctx, tx, RoleMerchant, t.ID, "first key of "+name)
		return err
	})
	s.keyCreated(k.ID)
	if err != nil {
		return Tenant{}, APIKey{}, "", err
	}
	return t, k, secret, nil
}

// ListTenants lists every tenant, oldest first.
func (s *Service) ListTenants(ctx context.Context) ([]Tenant, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, name, created_at FROM tenants ORDER BY id`)
	ts, err := pgx.CollectRows(rows, pgx.RowToStructByName[Tenant])
	if err != nil {
		return nil, internalf("list tenants: %w", err)
	}
	return ts, nil
}

// TenantByName returns the tenant called name. Errors: not_found.
func (s *Service) TenantByName(ctx context.Context, name string) (Tenant, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, name, created_at FROM tenants WHERE name = $1`, name)
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Tenant])
	if isNoRows(err) {
		return Tenant{}, Errorf(CodeNotFound, "no tenant named %s", strconv.Quote(name))
	}
	if err != nil {
		return Tenant{}, internalf("tenant by name: %w", err)
	}
	return t, nil
}

// TenantByID returns the tenant id. Errors: not_found.
func (s *Service) TenantByID(ctx context.Context, id int64) (Tenant, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, name, created_at FROM tenants WHERE id = $1`, id)
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Tenant])
	if isNoRows(err) {
		return Tenant{}, Errorf(CodeNotFound, "tenant %d does not exist", id)
	}
	if err != nil {
		return Tenant{}, internalf("tenant %d: %w", id, err)
	}
	return t, nil
}
