package orchestrator

import (
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// RoutingVersion is one version of a tenant's routing rules (table
// routing_versions, append-only): each change is a new version, one more
// than the last, and the active rules are the highest version. Version 0
// is the built-in routing of a tenant that has stored none (every payment
// to the default connector); it has no author and no date.
type RoutingVersion struct {
	TenantID  int64        `json:"tenant_id"`
	Version   int          `json:"version"`
	Rules     RoutingRules `json:"rules"`
	CreatedBy string       `json:"created_by,omitempty"`
	CreatedAt time.Time    `json:"created_at,omitzero"`
}

// routingRow is a tenant joined with one of its routing versions, or with
// none (NULL columns).
type routingRow struct {
	TenantID  int64      `db:"tenant_id"`
	Version   *int32     `db:"version"`
	Rules     []byte     `db:"rules"`
	CreatedBy *string    `db:"created_by"`
	CreatedAt *time.Time `db:"created_at"`
}

// version returns the row's version; ok is false when it has none.
func (r routingRow) version() (v RoutingVersion, ok bool, err error) {
	if r.Version == nil {
		return RoutingVersion{}, false, nil
	}
	v = RoutingVersion{TenantID: r.TenantID, Version: int(*r.Version), CreatedBy: *r.CreatedBy, CreatedAt: *r.CreatedAt}
	if err := json.Unmarshal(r.Rules, &v.Rules); err != nil {
		return RoutingVersion{}, false, internalf("routing version %d of tenant %d: %w", v.Version, v.TenantID, err)
	}
	if v.Rules.Rules == nil {
		v.Rules.Rules = []RoutingRule{}
	}
	return v, true, nil
}

// activeRoutingSQL reads a tenant and its highest routing version; no row
// when there is no such tenant, NULL version columns when it has none.
const activeRoutingSQL = `
	SELECT t.id AS tenant_id, v.version, v.rules, v.created_by, v.created_at
	FROM tenants t
	LEFT JOIN LATERAL (
		SELECT version, rules, created_by, created_at FROM routing_versions
		WHERE tenant_id = t.id
		ORDER BY version DESC
		LIMIT 1
	) v ON true
	WHERE t.id = @tenant_id`

// Routing returns the tenant's active routing: its highest version, or
// version 0, the built-in default (every payment to the default
// connector), when it has stored none. It reads the database; the
// authorization path uses routingFor. Errors: not_found (no such
// tenant), internal.
func (s *Service) Routing(ctx context.Context, tenantID int64) (RoutingVersion, error) {
	rows, _ := s.pool.Query(ctx, activeRoutingSQL, NamedArgs{"tenant_id": tenantID})
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[routingRow])
	if isNoRows(err) {
		return RoutingVersion{}, Errorf(CodeNotFound, "tenant %d does not exist", tenantID)
	}
	if err != nil {
		return RoutingVersion{}, internalf("routing of tenant %d: %w", tenantID, err)
	}
	v, ok, err := row.version()
	if err != nil || ok {
		return v, err
	}
	return RoutingVersion{TenantID: tenantID, Rules: s.defaultRouting()}, nil
}

// RoutingVersionFilter pages through a tenant's routing versions.
type RoutingVersionFilter struct {
	// Limit is 1 to 100; 0 means 10.
	Limit int
	// StartingAfter, when positive, lists the versions below it.
	StartingAfter int
}

// routingVersionsSQL reads a tenant and a page of its routing versions,
// newest first; no row when there is no such tenant, one row of NULL
// version columns when the page is empty.
const routingVersionsSQL = `
	SELECT t.id AS tenant_id, v.version, v.rules, v.created_by, v.created_at
	FROM tenants t
	LEFT JOIN LATERAL (
		SELECT version, rules, created_by, created_at FROM routing_versions
		WHERE tenant_id = t.id AND (@starting_after::integer = 0 OR version < @starting_after::integer)
		ORDER BY version DESC
		LIMIT @limit
	) v ON true
	WHERE t.id = @tenant_id
	ORDER BY v.version DESC`

// RoutingVersions lists the tenant's stored routing versions, newest
// first, a page at a time; more reports whether older ones follow. The
// built-in version 0 is not listed. Errors: validation_failed (limit),
// not_found (no such tenant), internal.
func (s *Service) RoutingVersions(ctx context.Context, tenantID int64, f RoutingVersionFilter) (vs []RoutingVersion, more bool, err error) {
	if f.Limit == 0 {
		f.Limit = 10
	}
	if f.Limit < 1 || f.Limit > 100 {
		return nil, false, ParamError("limit", "limit must be 1 to 100")
	}
	if f.StartingAfter < 0 {
		return nil, false, ParamError("starting_after", "starting_after must be a version")
	}
	rows, _ := s.pool.Query(ctx, routingVersionsSQL, NamedArgs{
		"tenant_id": tenantID, "starting_after": f.StartingAfter, "limit": f.Limit + 1})
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByName[routingRow])
	if err != nil {
		return nil, false, internalf("routing versions of tenant %d: %w", tenantID, err)
	}
	if len(rs) == 0 {
		return nil, false, Errorf(CodeNotFound, "tenant %d does not exist", tenantID)
	}
	vs = make([]RoutingVersion, 0, len(rs))
	for _, r := range rs {
		v, ok, err := r.version()
		if err != nil {
			return nil, false, err
		}
		if ok {
			vs = append(vs, v)
		}
	}
	if len(vs) > f.Limit {
		return vs[:f.Limit], true, nil
	}
	return vs, false, nil
}

// setRoutingSQL stores rules as the tenant's next version, one more than
// its highest, unless they are the active rules already: then it stores
// nothing and returns the active version. Two of them at once may compute
// the same number; the second then fails on routing_versions_pkey.
const setRoutingSQL = `
	WITH active AS (
		SELECT tenant_id, version, rules, created_by, created_at FROM routing_versions
		WHERE tenant_id = @tenant_id
		ORDER BY version DESC
		LIMIT 1
	), added AS (
		INSERT INTO routing_versions (tenant_id, version, rules, created_by, created_at)
		SELECT @tenant_id, coalesce((SELECT version FROM active), 0) + 1, @rules::jsonb, @created_by, @now
		WHERE NOT EXISTS (SELECT FROM active WHERE rules = @rules::jsonb)
		RETURNING tenant_id, version, rules, created_by, created_at
	)
	SELECT tenant_id, version, rules, created_by, created_at FROM added
	UNION ALL
	SELECT tenant_id, version, rules, created_by, created_at FROM active WHERE rules = @rules::jsonb`

// setRoutingTries bounds how often SetRouting computes the next version
// again after a concurrent change took the number.
const setRoutingTries = 5

// SetRouting validates rules and stores them as the tenant's next routing
// version, which becomes active at once on every instance (the routing
// cache of each hears of it by NOTIFY payorch_routing). Rules equal to the
// active ones store nothing: the active version is returned, so a
// repeated PUT is idempotent. Concurrent changes each get their own
// version (the one stored last is active). createdBy says who made the
// change (an API key id). Errors: validation_failed naming the field
// (e.g. rules[2].match.currencies[0]; an unknown or disabled connector is
// one), not_found (no such tenant), conflict (changed concurrently again
// and again), internal.
func (s *Service) SetRouting(ctx context.Context, tenantID int64, rules RoutingRules, createdBy string) (RoutingVersion, error) {
	if err := rules.Validate(s.routableConnector); err != nil {
		return RoutingVersion{}, err
	}
	if createdBy == "" || !ValidText(createdBy) || utf8.RuneCountInString(createdBy) > 200 {
		return RoutingVersion{}, ParamError("created_by", "created_by must be 1 to 200 characters")
	}
	if rules.Rules == nil {
		rules.Rules = []RoutingRule{}
	}
	doc, err := json.Marshal(rules)
	if err != nil {
		return RoutingVersion{}, internalf("encode routing rules: %w", err)
	}
	for try := 1; ; try++ {
		rows, _ := s.pool.Query(ctx, setRoutingSQL, NamedArgs{
			"tenant_id": tenantID, "rules": doc, "created_by": createdBy, "now": s.now()})
		row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[routingRow])
		code, constraint := constraintOf(err)
		switch {
		case err == nil:
			s.routes.invalidate(tenantID, false) // here at once; elsewhere by NOTIFY
			v, _, err := row.version()
			return v, err
		case code == pgForeignKeyViolation && constraint == "routing_versions_tenant_id_fkey":
			return RoutingVersion{}, Errorf(CodeNotFound, "tenant %d does not exist", tenantID)
		case code == pgUniqueViolation && constraint == "routing_versions_pkey" && try < setRoutingTries:
			continue // another change took the number: count again
		case code == pgUniqueViolation && constraint == "routing_versions_pkey":
			return RoutingVersion{}, Errorf(CodeConflict, "the routing of tenant %d is being changed concurrently; try again", tenantID)
		}
		return RoutingVersion{}, internalf("set routing of tenant %d: %w", tenantID, err)
	}
}

// routingFor returns the tenant's active routing for an authorization:
// from this instance's routing cache when it holds it, else from the
// database (Routing), then cached. The cache is on only while the
// listener of StartKeyCache runs, and a new version anywhere evicts the
// tenant's entry (NOTIFY payorch_routing), so the routing returned is the
// active one as of the notification's delivery. The result is shared:
// callers must not modify it. Errors: as Routing.
func (s *Service) routingFor(ctx context.Context, tenantID int64) (RoutingVersion, error) {
	if v, ok := s.routes.lookup(tenantID); ok {
		return v, nil
	}
	gen := s.routes.generation()
	v, err := s.Routing(ctx, tenantID)
	if err != nil {
		return RoutingVersion{}, err
	}
	s.routes.put(gen, tenantID, v)
	return v, nil
}
