package orchestrator

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A tenant's browser origins are the web origins (scheme://host[:port])
// whose pages may use the tenant's publishable keys: the HTTP API answers
// their cross-origin requests (CORS) and refuses a publishable key's
// request from any other origin, and the card form may only be embedded in,
// or send the shopper back to, one of them.

// MaxBrowserOrigins bounds a tenant's browser origins.
const MaxBrowserOrigins = 20

// ValidateBrowserOrigins checks origins and returns them in the form
// browsers send in the Origin header (scheme and host in lower case, no
// default port), without duplicates. An origin is https://host[:port];
// http:// only for a loopback host (localhost, 127.0.0.0/8, [::1]) and only
// when allowLoopbackHTTP (outside production). No path (not even "/"),
// query, fragment, user information or wildcard; hosts in ASCII (IDNs in
// their xn-- form, as browsers send them). At most MaxBrowserOrigins.
// Errors: validation_failed naming origins[i].
func ValidateBrowserOrigins(origins []string, allowLoopbackHTTP bool) ([]string, error) {
	if len(origins) > MaxBrowserOrigins {
		return nil, ParamError("origins", "at most %d origins", MaxBrowserOrigins)
	}
	out := make([]string, 0, len(origins))
	for i, o := range origins {
		param := "origins[" + strconv.Itoa(i) + "]"
		norm, reason := parseOrigin(o, allowLoopbackHTTP)
		if reason != "" {
			return nil, ParamError(param, "%s %s", param, reason)
		}
		if !slices.Contains(out, norm) {
			out = append(out, norm)
		}
	}
	return out, nil
}

// parseOrigin returns o in the form browsers send, or why it is not a
// browser origin a tenant may list.
func parseOrigin(o string, allowLoopbackHTTP bool) (string, string) {
	const form = "must be an origin: https://host or https://host:port, nothing after it"
	if len(o) > 300 {
		return "", "is longer than 300 characters"
	}
	u, err := url.Parse(o)
	if err != nil || u.Opaque != "" || u.Host == "" {
		return "", form
	}
	if u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(o, "#") {
		return "", form + " (no path, query, fragment or user)"
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || strings.ContainsAny(host, "*%") {
		return "", form + " (a host, no wildcard)"
	}
	for _, r := range host {
		if r > 0x7e {
			return "", "must spell its host in ASCII (an international domain name in its xn-- form)"
		}
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme == "https":
	case scheme == "http" && isLoopbackHost(host) && allowLoopbackHTTP:
	case scheme == "http" && isLoopbackHost(host):
		return "", "must be https: http is allowed only for a loopback host outside production"
	case scheme == "http":
		return "", "must be https (http only for a loopback host, outside production)"
	default:
		return "", form
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return "", "has no valid port"
		}
		if (scheme == "https" && n == 443) || (scheme == "http" && n == 80) {
			port = ""
		}
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, ""
}

// isLoopbackHost reports whether host (lower case, without brackets) is
// localhost or a loopback address.
func isLoopbackHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// OriginOfURL returns the origin of an absolute http(s) URL, in the form
// browsers send (ValidateBrowserOrigins'), or "" when raw is not one.
func OriginOfURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ToLower(u.Scheme) + "://" + host
}

// BrowserOrigins returns tenant tenantID's browser origins. Errors:
// not_found.
func (s *Service) BrowserOrigins(ctx context.Context, tenantID int64) ([]string, error) {
	var origins []string
	err := s.pool.QueryRow(ctx, `SELECT browser_origins FROM tenants WHERE id = $1`, tenantID).Scan(&origins)
	if isNoRows(err) {
		return nil, Errorf(CodeNotFound, "tenant %d does not exist", tenantID)
	}
	if err != nil {
		return nil, internalf("browser origins of tenant %d: %w", tenantID, err)
	}
	if origins == nil {
		origins = []string{}
	}
	return origins, nil
}

// SetBrowserOrigins replaces tenant tenantID's browser origins (an empty
// list: none) with origins, validated and normalised by
// ValidateBrowserOrigins, and returns what was stored. Errors:
// validation_failed, not_found.
func (s *Service) SetBrowserOrigins(ctx context.Context, tenantID int64, origins []string, allowLoopbackHTTP bool) ([]string, error) {
	norm, err := ValidateBrowserOrigins(origins, allowLoopbackHTTP)
	if err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, `UPDATE tenants SET browser_origins = $2 WHERE id = $1 RETURNING browser_origins`, tenantID, norm)
	stored, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[[]string])
	if isNoRows(err) {
		return nil, Errorf(CodeNotFound, "tenant %d does not exist", tenantID)
	}
	if err != nil {
		return nil, internalf("set browser origins of tenant %d: %w", tenantID, err)
	}
	if stored == nil {
		stored = []string{}
	}
	return stored, nil
}
