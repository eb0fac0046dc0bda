package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/providers/stripe"
)

// startProviders returns the configured providers by name and a function
// that stops whatever was started for them. Outside production that
// includes the fake: the standalone one at cfg.FakeURL (with
// cfg.FakeToken), or one embedded on loopback, keeping its state in
// cfg.FakeState when that is set, whose token (cfg.FakeToken, or one
// generated for this start) only this process's client knows. Their HTTP
// requests carry the trace context of the call they belong to.
func startProviders(cfg config, logger *slog.Logger, tel *telemetry) (map[string]providers.Provider, func(context.Context), error) {
	hc := &http.Client{Transport: tel.transport(&http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	})}
	stop := func(context.Context) {}
	provs := map[string]providers.Provider{}
	if cfg.Environment != envProduction {
		url, token := cfg.FakeURL, cfg.FakeToken
		if url == "" {
			r, err := fake.Start("127.0.0.1:0", fake.Config{Logger: logger.With("component", "fakeprovider"),
				StateFile: cfg.FakeState, Token: token})
			if err != nil {
				return nil, nil, err
			}
			tokenFrom := "generated for this start"
			if token != "" {
				tokenFrom = "PAYORCH_FAKE_TOKEN"
			}
			url, token = r.URL(), r.Token()
			logger.Info("embedded fake provider", "url", url, "state_file", cfg.FakeState, "token", tokenFrom)
			stop = func(ctx context.Context) { _ = r.Shutdown(ctx) }
		}
		provs["fake"] = fake.NewClient(url, hc).WithToken(token)
	}
	if cfg.StripeSecretKey != "" {
		sc, err := stripe.New(stripe.Config{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase, Timeout: cfg.StripeTimeout,
			HTTPClient: &http.Client{Transport: hc.Transport, Timeout: cfg.StripeTimeout}})
		if err != nil {
			stop(context.Background())
			return nil, nil, err
		}
		provs["stripe"] = sc
	}
	return provs, stop, nil
}
