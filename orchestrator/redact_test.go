package orchestrator_test

import (
	"testing"

	"github.com/payorch/payorch/orchestrator"
)

// TestRedactURL: staff see an endpoint's scheme and host (port included),
// never its path, query or anything after.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"https://hooks.example.com/t/tok_123?sig=abc": "https://hooks.example.com/…",
		"https://hooks.example.com:8443/in":           "https://hooks.example.com:8443/…",
		"https://hooks.example.com/?token=abc":        "https://hooks.example.com/…",
		"https://hooks.example.com?token=abc":         "https://hooks.example.com/…",
		"https://hooks.example.com/":                  "https://hooks.example.com/",
		"https://hooks.example.com":                   "https://hooks.example.com/",
		"http://[2001:db8::1]:9000/x":                 "http://[2001:db8::1]:9000/…",
		"https://u:p@hooks.example.com/x":             "https://hooks.example.com/…",
		"/relative/tok_123":                           "…",
		"https:opaque-tok_123":                        "…",
		"%zz":                                         "…",
	} {
		if got := orchestrator.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	for sc, want := range map[orchestrator.Scope]bool{{TenantID: 7}: true, {}: false, {Staff: true}: false} {
		if got := sc.FullEndpointURLs(); got != want {
			t.Errorf("%+v.FullEndpointURLs() = %v", sc, got)
		}
	}
}
