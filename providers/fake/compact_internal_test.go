package fake

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/testkit"
)

// serve has s answer a request with token "t".
func serve(s *Server, method, path, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer t")
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w
}

// TestKeysArePackedWithTheirHoldAfterARestart: the state file says which
// hold each key answered for, so a restarted fake packs the keys too.
func TestKeysArePackedWithTheirHoldAfterARestart(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC))
	cfg := Config{Token: "t", Clock: clk.Now, StateFile: filepath.Join(t.TempDir(), "state.json"), HoldRetention: time.Hour, CompactEvery: time.Hour}
	s1 := NewServer(cfg)
	w := serve(s1, http.MethodPost, "/v1/holds", "k", `{"amount_minor":100,"currency":"EUR"}`)
	ref := string(w.Body.Bytes()[bytes.Index(w.Body.Bytes(), []byte(`"ref":"`))+7:][:27])
	serve(s1, http.MethodPost, "/v1/holds/"+ref+"/cancel", "k", "") // state_conflict, stored
	s1.Close()
	s2 := NewServer(cfg)
	defer s2.Close()
	clk.Add(2 * time.Hour)
	if n := s2.Compact(); n != 1 || len(s2.keys) != 0 {
		t.Fatalf("Compact after a restart packed %d holds and left %d keys, want 1 and none", n, len(s2.keys))
	}
}

// TestColdIndexTellsCollidingStringsApart packs holds with every hash the
// same, so each reference and scope collides with the others: lookups and
// replays still find their own, an unknown reference is still unknown,
// and an unpacked hold leaves the others findable.
func TestColdIndexTellsCollidingStringsApart(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC))
	s := NewServer(Config{Token: "t", Clock: clk.Now, HoldRetention: time.Hour, CompactEvery: time.Hour})
	defer s.Close()
	s.coldRefs.hash = func(string) uint64 { return 7 }
	s.coldKeys.hash = func(string) uint64 { return 7 }
	call := func(method, path, key, body string) *httptest.ResponseRecorder {
		return serve(s, method, path, key, body)
	}
	type first struct{ path, key, body string }
	var writes []first
	answers := map[first][]byte{}
	post := func(path, key, body string) []byte {
		w := call(http.MethodPost, path, key, body)
		if w.Code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, w.Code, w.Body)
		}
		f := first{path, key, body}
		writes, answers[f] = append(writes, f), w.Body.Bytes()
		return w.Body.Bytes()
	}
	var refs []string
	for i := range 3 {
		key := "key-" + string(rune('a'+i))
		b := post("/v1/holds", key, `{"amount_minor":100,"currency":"EUR"}`)
		ref := string(b[bytes.Index(b, []byte(`"ref":"`))+7:][:27])
		post("/v1/holds/"+ref+"/confirm", key, "")
		refs = append(refs, ref)
	}
	// Past the holds' lapse and the retention.
	clk.Add(DefaultHoldLifetime + 2*time.Hour)
	lookups := map[string][]byte{}
	for _, ref := range refs {
		lookups[ref] = call(http.MethodGet, "/v1/holds/"+ref, "", "").Body.Bytes()
	}
	if n := s.Compact(); n != 3 {
		t.Fatalf("Compact packed %d, want 3", n)
	}
	if len(s.coldRefs.exact) != 2 || len(s.coldKeys.exact) != 5 {
		t.Fatalf("%d references and %d scopes kept in full, want 2 and 5: the hashes did not collide", len(s.coldRefs.exact), len(s.coldKeys.exact))
	}
	check := func() {
		t.Helper()
		for ref, want := range lookups {
			if got := call(http.MethodGet, "/v1/holds/"+ref, "", "").Body.Bytes(); !bytes.Equal(got, want) {
				t.Errorf("lookup %s: %s, want %s", ref, got, want)
			}
		}
		if w := call(http.MethodGet, "/v1/holds/fh_000000000000000000000000", "", ""); w.Code != http.StatusNotFound {
			t.Errorf("an unknown hold: %d %s, want 404", w.Code, w.Body)
		}
		for _, f := range writes {
			if got := call(http.MethodPost, f.path, f.key, f.body); !bytes.Equal(got.Body.Bytes(), answers[f]) || got.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay of %s under %s: %s, want %s", f.path, f.key, got.Body, answers[f])
			}
		}
	}
	check()
	// Unpacking the first packed (the one each hash points at) leaves the
	// others found through exact.
	if h := s.holdLocked(refs[0]); h == nil || s.order[0].live != h {
		t.Fatalf("hold %s was not unpacked", refs[0])
	}
	check()
	clk.Add(2 * time.Hour)
	if n := s.Compact(); n != 1 {
		t.Fatalf("Compact packed %d, want the one unpacked", n)
	}
	check()
}
