package fake

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
)

// typeAuthentication is the error type of a request without the token.
const typeAuthentication = "authentication_error"

// codeUnauthorized is the error code of a request without the token.
const codeUnauthorized = "unauthorized"

// NewToken returns a random bearer token (256 bits, hex) for a fake
// provider and its clients.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (Go ≥ 1.24 panics instead)
	return hex.EncodeToString(b[:])
}

// authorized reports whether r carries "Authorization: Bearer <token>".
// The comparison is of SHA-256 digests in constant time, so neither the
// token's bytes nor its length show in the answer's timing.
func (s *Server) authorized(r *http.Request) bool {
	scheme, presented, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(presented)))
	return subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1
}

// unauthorized answers a request without the token: 401, nothing done.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="payorch fake provider"`)
	writeError(w, &apiError{status: http.StatusUnauthorized, wireError: wireError{
		Type: typeAuthentication, Code: codeUnauthorized,
		Message: "this fake provider requires Authorization: Bearer <token> (the token it was started with)",
	}})
}
