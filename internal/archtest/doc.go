// Package archtest holds no code, only the test that keeps payorch's
// layering (STYLE.md: "Imports point inward"): which package may import
// which, checked against `go list` on every `go test ./...`.
package archtest
