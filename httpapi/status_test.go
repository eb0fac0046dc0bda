package httpapi_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/payorch/payorch/httpapi"
	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/orchestrator"
)

// The payment states are one list, orchestrator.Statuses: the database's
// CHECK constraint, the OpenAPI document's enum and the console's badges
// name exactly those states.
func TestPaymentStatusesAgree(t *testing.T) {
	t.Parallel()
	var want []string
	for _, st := range orchestrator.Statuses {
		want = append(want, string(st))
	}
	sorted := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

	var def string
	err := pgtest.DB(t).QueryRow(context.Background(),
		`SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'payments_status_check'`).Scan(&def)
	if err != nil {
		t.Fatal(err)
	}
	var check []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'::text`).FindAllStringSubmatch(def, -1) {
		check = append(check, m[1])
	}
	if !slices.Equal(sorted(check), sorted(want)) {
		t.Errorf("payments_status_check allows %v, orchestrator.Statuses is %v (%s)", check, want, def)
	}

	schema := loadOpenAPI(t).Components.Schemas["PaymentStatus"]
	if schema == nil || schema.Value == nil {
		t.Fatal("openapi.yaml has no PaymentStatus schema")
	}
	var enum []string
	for _, v := range schema.Value.Enum {
		s, _ := v.(string)
		enum = append(enum, s)
	}
	if !slices.Equal(enum, want) {
		t.Errorf("openapi.yaml PaymentStatus enum is %v, orchestrator.Statuses is %v", enum, want)
	}

	var badges []string
	for st := range httpapi.PaymentBadges {
		badges = append(badges, string(st))
	}
	if !slices.Equal(sorted(badges), sorted(want)) {
		t.Errorf("the console has badges for %v, orchestrator.Statuses is %v", badges, want)
	}
}
