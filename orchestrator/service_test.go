package orchestrator

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// NamedArgs binds by name, and refuses a name missing or left over, the
// first time a statement is seen as well as once it is cached.
func TestNamedArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const q = `SELECT @b::int, @a::text, @b::int -- @not_an_argument`
	for range 2 { // the second time from the cache
		sql, args, err := NamedArgs{"a": "x", "b": 2}.RewriteQuery(ctx, nil, q, nil)
		if err != nil || sql != `SELECT $1::int, $2::text, $1::int -- @not_an_argument` || !slices.Equal(args, []any{2, "x"}) {
			t.Fatalf("rewrite: %q %v %v", sql, args, err)
		}
		if _, _, err := (NamedArgs{"a": "x"}).RewriteQuery(ctx, nil, q, nil); err == nil || !strings.Contains(err.Error(), "b") {
			t.Fatalf("a missing argument: %v", err)
		}
		if _, _, err := (NamedArgs{"a": "x", "b": 2, "c": 3}).RewriteQuery(ctx, nil, q, nil); err == nil || !strings.Contains(err.Error(), "c") {
			t.Fatalf("an argument left over: %v", err)
		}
	}
	const fresh = `SELECT @x::int`
	if _, _, err := (NamedArgs{"y": 1}).RewriteQuery(ctx, nil, fresh, nil); err == nil {
		t.Fatal("a statement first seen with a name missing was rewritten")
	}
}
