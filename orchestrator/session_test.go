package orchestrator_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
	"github.com/payorch/payorch/orchestrator"
)

func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	const ttl = 8 * time.Hour

	// signedIn returns a Service, its clock, and the principal of a
	// support key.
	signedIn := func(t *testing.T) (*orchestrator.Service, *testkit.Clock, orchestrator.Principal) {
		t.Helper()
		s, clk := newService(t)
		_, secret, err := s.CreateAPIKey(context.Background(), orchestrator.RoleSupport, 0, "desk")
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Authenticate(context.Background(), secret)
		if err != nil {
			t.Fatal(err)
		}
		return s, clk, p
	}

	t.Run("LastsItsLifetimeAndIsStoredHashed", func(t *testing.T) {
		t.Parallel()
		s, clk, p := signedIn(t)
		ctx := context.Background()
		token, created, err := s.CreateConsoleSession(ctx, p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if len(token) != 43 || len(created.CSRF) != 43 || created.CSRF == token {
			t.Fatalf("token %q and CSRF %q: want two distinct 256-bit base64url tokens", token, created.CSRF)
		}
		got, err := s.ConsoleSession(ctx, token)
		if err != nil {
			t.Fatal(err)
		}
		if got.Principal != p || got.CSRF != created.CSRF || !got.ExpiresAt.Equal(created.ExpiresAt) {
			t.Fatalf("looked up %+v, want %+v", got, created)
		}
		var stored int
		sum := sha256.Sum256([]byte(token))
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM console_sessions
			WHERE id_hash = $1 AND position($2 in row(console_sessions.*)::text) = 0`, sum[:], token).Scan(&stored); err != nil || stored != 1 {
			t.Fatalf("sessions stored by the token's SHA-256 and without the token: %d (%v), want 1", stored, err)
		}
		clk.Add(ttl - time.Second)
		if _, err := s.ConsoleSession(ctx, token); err != nil {
			t.Fatalf("a second before it expires: %v", err)
		}
		clk.Add(time.Second)
		_, err = s.ConsoleSession(ctx, token)
		wantCode(t, err, orchestrator.CodeUnauthorized)
	})

	t.Run("UnknownTokenIsUnauthorized", func(t *testing.T) {
		t.Parallel()
		s, _ := newService(t)
		_, err := s.ConsoleSession(context.Background(), "nope")
		wantCode(t, err, orchestrator.CodeUnauthorized)
	})

	t.Run("EndingItEndsOnlyIt", func(t *testing.T) {
		t.Parallel()
		s, _, p := signedIn(t)
		ctx := context.Background()
		token, _, err := s.CreateConsoleSession(ctx, p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		other, _, err := s.CreateConsoleSession(ctx, p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.EndConsoleSession(ctx, token); err != nil {
			t.Fatal(err)
		}
		_, err = s.ConsoleSession(ctx, token)
		wantCode(t, err, orchestrator.CodeUnauthorized)
		if _, err := s.ConsoleSession(ctx, other); err != nil {
			t.Fatalf("the other session: %v", err)
		}
		for _, tok := range []string{token, "never-issued"} {
			if err := s.EndConsoleSession(ctx, tok); err != nil {
				t.Fatalf("ending %q again or unknown: %v", tok, err)
			}
		}
	})

	t.Run("RevokingTheKeyEndsItsSessions", func(t *testing.T) {
		t.Parallel()
		s, _, p := signedIn(t)
		ctx := context.Background()
		token, _, err := s.CreateConsoleSession(ctx, p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeAPIKey(ctx, p.KeyID); err != nil {
			t.Fatal(err)
		}
		_, err = s.ConsoleSession(ctx, token)
		wantCode(t, err, orchestrator.CodeUnauthorized)
	})

	t.Run("ExpiredSessionsArePurgedOnSignIn", func(t *testing.T) {
		t.Parallel()
		s, clk, p := signedIn(t)
		ctx := context.Background()
		if _, _, err := s.CreateConsoleSession(ctx, p, ttl); err != nil {
			t.Fatal(err)
		}
		clk.Add(ttl + time.Second)
		token, _, err := s.CreateConsoleSession(ctx, p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		var left int
		sum := sha256.Sum256([]byte(token))
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE id_hash <> $1`, sum[:]).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%d sessions besides the new one (%v), want the expired one purged", left, err)
		}
	})
}
