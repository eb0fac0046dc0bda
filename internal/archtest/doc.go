// Package archtest holds no code, only the tests that keep the repository's
// shape: payorch's layering (STYLE.md: "Imports point inward"), which
// package may import which, checked against `go list`; and that git tracks
// no build output (no executable, no file over 1 MiB outside an
// allow-list). Both run on every `go test ./...`.
package archtest
