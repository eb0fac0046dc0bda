package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/internal/pgtest"
	"github.com/payorch/payorch/internal/testkit"
)

func TestPublicURLTLSAndMetricsListenConfig(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"https://pay.example.com", "http://127.0.0.1:8080/", "HTTPS://pay.example.com:8443/"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_PUBLIC_URL": good})); err != nil {
			t.Errorf("PAYORCH_PUBLIC_URL=%q: %v", good, err)
		}
	}
	for _, bad := range []string{"pay.example.com", "ftp://pay.example.com", "https://", "/console", "https://u:p@pay.example.com",
		"https://pay.example.com/?a=1", "https://pay.example.com/#top", "https:pay.example.com"} {
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_PUBLIC_URL": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_PUBLIC_URL") {
			t.Errorf("PAYORCH_PUBLIC_URL=%q: err %v", bad, err)
		}
	}

	for _, one := range []map[string]string{{"PAYORCH_TLS_CERT": "cert.pem"}, {"PAYORCH_TLS_KEY": "key.pem"}} {
		if _, err := loadConfig(envOf(one)); err == nil || !strings.Contains(err.Error(), "PAYORCH_TLS_CERT, PAYORCH_TLS_KEY") {
			t.Errorf("%v: err %v", one, err)
		}
	}
	if cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_TLS_CERT": "cert.pem", "PAYORCH_TLS_KEY": "key.pem"})); err != nil ||
		cfg.TLSCert != "cert.pem" || cfg.TLSKey != "key.pem" {
		t.Errorf("both TLS files: %+v %v", cfg, err)
	}

	for _, good := range []string{"127.0.0.1:9090", ":9090", "[::1]:9090"} {
		if cfg, err := loadConfig(envOf(map[string]string{"PAYORCH_METRICS_LISTEN": good})); err != nil || cfg.MetricsListen != good {
			t.Errorf("PAYORCH_METRICS_LISTEN=%q: %q %v", good, cfg.MetricsListen, err)
		}
	}
	for _, bad := range []string{"9090", "127.0.0.1", "127.0.0.1:", "127.0.0.1:8080"} { // the last is the API's default
		if _, err := loadConfig(envOf(map[string]string{"PAYORCH_METRICS_LISTEN": bad})); err == nil ||
			!strings.Contains(err.Error(), "PAYORCH_METRICS_LISTEN") {
			t.Errorf("PAYORCH_METRICS_LISTEN=%q: err %v", bad, err)
		}
	}
}

func TestInsecureConsoleCookies(t *testing.T) {
	t.Parallel()
	prod := map[string]string{"PAYORCH_ENVIRONMENT": "production", "PAYORCH_DEFAULT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_123"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"PlainHTTP", prod, true},
		{"HTTPPublicURL", withEnv(prod, "PAYORCH_PUBLIC_URL", "http://pay.example.com"), true},
		{"HTTPSPublicURL", withEnv(prod, "PAYORCH_PUBLIC_URL", "HTTPS://pay.example.com"), false},
		{"TLS", withEnv(prod, "PAYORCH_TLS_CERT", "cert.pem", "PAYORCH_TLS_KEY", "key.pem"), false},
		{"TrustedProxy", withEnv(prod, "PAYORCH_TRUSTED_PROXIES", "10.0.0.7"), false},
		{"Development", withEnv(prod, "PAYORCH_ENVIRONMENT", "development"), false},
		{"Test", withEnv(prod, "PAYORCH_ENVIRONMENT", "test"), false},
	} {
		cfg, err := loadConfig(envOf(tc.env))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := cfg.insecureConsoleCookies(); got != tc.want {
			t.Errorf("%s: insecure %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestServeWarnsOfInsecureCookiesInProduction runs `payorch serve` as a
// production deployment would be started by mistake, on plain HTTP with
// nothing to make the console's cookies Secure, and once with an https
// public URL.
func TestServeWarnsOfInsecureCookiesInProduction(t *testing.T) {
	t.Parallel()
	prod := map[string]string{"DATABASE_URL": pgtest.URL(t), "PAYORCH_ENVIRONMENT": "production",
		"PAYORCH_DEFAULT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_123", "STRIPE_API_BASE": "http://127.0.0.1:9",
		"PAYORCH_RECONCILE_SCHEDULE": "off"}
	warned := func(logs string) bool {
		for line := range strings.Lines(logs) {
			if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "console cookies will not be Secure") {
				return true
			}
		}
		return false
	}
	if s := startServe(t, prod); !warned(s.logs.String()) {
		t.Fatalf("no warning of insecure cookies at start:\n%s", tail(s.logs.String(), 4000))
	}
	if s := startServe(t, withEnv(prod, "PAYORCH_PUBLIC_URL", "https://pay.example.com")); warned(s.logs.String()) {
		t.Fatalf("warned of insecure cookies with an https public URL:\n%s", tail(s.logs.String(), 4000))
	}
}

// writeSelfSignedCert writes a certificate for 127.0.0.1 and its key as
// PEM files and returns their paths and a pool that trusts it.
func writeSelfSignedCert(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, roots := testkit.SelfSignedCert(t)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, roots
}

// getBody GETs u with c and returns the status and body.
func getBody(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

func TestServeOverTLSWithMetricsOnTheirOwnAddress(t *testing.T) {
	t.Parallel()
	certFile, keyFile, roots := writeSelfSignedCert(t)
	api := "127.0.0.1:" + strconv.Itoa(freePort(t))
	metrics := "127.0.0.1:" + strconv.Itoa(freePort(t))
	env := map[string]string{
		"DATABASE_URL":               pgtest.URL(t),
		"PAYORCH_LOG_LEVEL":          "error",
		"PAYORCH_ENVIRONMENT":        "test",
		"PAYORCH_RESOLVER_INTERVAL":  "0",
		"PAYORCH_KEY_SWEEP_INTERVAL": "0",
		"PAYORCH_RECONCILE_SCHEDULE": "off",
		"PAYORCH_TLS_CERT":           certFile,
		"PAYORCH_TLS_KEY":            keyFile,
		"PAYORCH_METRICS_LISTEN":     metrics,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"serve", "--listen", api}, io.Discard, envOf(env)) }()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	base := "https://" + api
	deadline := time.After(time.Minute)
	for ready := false; !ready; {
		if res, err := client.Get(base + "/readyz"); err == nil {
			res.Body.Close()
			ready = res.StatusCode == http.StatusOK
		}
		select {
		case err := <-errc:
			t.Fatalf("serve exited early: %v", err)
		case <-deadline:
			t.Fatal("serve did not become ready over https")
		case <-time.After(25 * time.Millisecond):
		}
	}

	// The API and the console are served over TLS, and the console's
	// cookies are Secure.
	res, err := client.Get(base + "/console/signin")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.TLS == nil || res.StatusCode != http.StatusOK {
		t.Fatalf("console over https: %d, TLS %v", res.StatusCode, res.TLS != nil)
	}
	var signin *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Name == "payorch_signin" {
			signin = ck
		}
	}
	if signin == nil || !signin.Secure {
		t.Fatalf("console cookie over native TLS: %+v, want Secure", signin)
	}

	// /metrics is on its own address only.
	if st, _ := getBody(t, client, base+"/metrics"); st != http.StatusNotFound {
		t.Fatalf("/metrics on the API's address: %d, want 404", st)
	}
	st, body := getBody(t, http.DefaultClient, "http://"+metrics+"/metrics")
	if st != http.StatusOK || !strings.Contains(body, `payorch_http_requests_total{`) || !strings.Contains(body, `route="/readyz"`) {
		t.Fatalf("/metrics on PAYORCH_METRICS_LISTEN: %d\n%s", st, body)
	}
	for _, p := range []string{"/readyz", "/v1/me", "/console/signin", "/debug/pprof/"} {
		if st, _ := getBody(t, http.DefaultClient, "http://"+metrics+p); st != http.StatusNotFound {
			t.Errorf("%s on the metrics address: %d, want 404", p, st)
		}
	}

	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	// The metrics server stopped with serve.
	if c, err := net.Dial("tcp", metrics); err == nil {
		c.Close()
		t.Fatal("the metrics address still accepts connections after serve stopped")
	}
}

func TestServeRefusesToStartWithoutItsCertificateOrMetricsAddress(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	certFile, keyFile, _ := writeSelfSignedCert(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name, want string
		env        map[string]string
	}{
		{"MissingCertificate", "PAYORCH_TLS_CERT", map[string]string{"PAYORCH_TLS_CERT": certFile + ".missing", "PAYORCH_TLS_KEY": keyFile}},
		{"KeyOfAnotherCertificate", "PAYORCH_TLS_CERT", map[string]string{"PAYORCH_TLS_CERT": certFile, "PAYORCH_TLS_KEY": certFile}},
		{"MetricsAddressInUse", "PAYORCH_METRICS_LISTEN", map[string]string{"PAYORCH_METRICS_LISTEN": busy.Addr().String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := "127.0.0.1:" + strconv.Itoa(freePort(t))
			env := map[string]string{"DATABASE_URL": dbURL, "PAYORCH_LOG_LEVEL": "error", "PAYORCH_ENVIRONMENT": "test", "PAYORCH_RESOLVER_INTERVAL": "0",
				"PAYORCH_KEY_SWEEP_INTERVAL": "0", "PAYORCH_RECONCILE_SCHEDULE": "off"}
			for k, v := range tc.env {
				env[k] = v
			}
			// Bounded, in case it starts after all.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := run(ctx, []string{"serve", "--listen", api}, io.Discard, envOf(env))
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve: %v, want an error naming %s at start-up", err, tc.want)
			}
		})
	}
}
