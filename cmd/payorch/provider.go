package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
	"github.com/payorch/payorch/providers/stripe"
)

// startProviders returns the active connectors' providers by name (see
// config.activeConnectors) and a function that stops whatever was started
// for them. A fake connector is the standalone fake at its URL (with its
// token), or one embedded on loopback, keeping its state in its state
// file when that is set, whose token (its own, or one generated for this
// start) only this process's client knows. Their HTTP requests carry the
// trace context of the call they belong to.
//
// Each verifies its webhooks with its webhook secret. An embedded fake,
// when cfg.webhookBase is set (the process serves the API), sends its
// webhooks to cfg.webhookBase/webhooks/<name>, signed with the
// connector's webhook secret or, unset, one generated for this start.
func startProviders(cfg config, logger *slog.Logger, tel *telemetry) (map[string]providers.Provider, func(context.Context), error) {
	hc := &http.Client{Transport: tel.transport(&http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	})}
	var embedded []*fake.Running
	stop := func(ctx context.Context) {
		for _, r := range embedded {
			_ = r.Shutdown(ctx)
		}
	}
	provs := map[string]providers.Provider{}
	for _, cc := range cfg.activeConnectors() {
		switch cc.Adapter {
		case adapterFake:
			url, token, hookSecret := cc.URL, cc.Token, cc.WebhookSecret
			if url == "" {
				fcfg := fake.Config{Logger: logger.With("component", "fakeprovider", "connector", cc.Name), StateFile: cc.State, Token: token}
				if cfg.webhookBase != "" {
					if hookSecret == "" {
						hookSecret = fake.NewToken()
					}
					fcfg.WebhookURL, fcfg.WebhookSecret = cfg.webhookBase+"/webhooks/"+cc.Name, hookSecret
				}
				r, err := fake.Start("127.0.0.1:0", fcfg)
				if err != nil {
					stop(context.Background())
					return nil, nil, fmt.Errorf("connector %s: embedded fake provider: %w", cc.Name, err)
				}
				embedded = append(embedded, r)
				tokenFrom := "generated for this start"
				if token != "" {
					tokenFrom = cc.varOf(settingToken)
				}
				url, token = r.URL(), r.Token()
				logger.Info("embedded fake provider", "connector", cc.Name, "url", url, "state_file", cc.State, "token", tokenFrom,
					"webhooks_to", fcfg.WebhookURL)
			}
			provs[cc.Name] = fake.NewClient(url, hc).WithToken(token).WithWebhookSecret(hookSecret)
		case adapterStripe:
			sc, err := stripe.New(stripe.Config{SecretKey: cc.SecretKey, APIBase: cc.APIBase, Timeout: cc.Timeout,
				HTTPClient: &http.Client{Transport: hc.Transport, Timeout: cc.Timeout}, WebhookSecret: cc.WebhookSecret})
			if err != nil {
				stop(context.Background())
				return nil, nil, fmt.Errorf("connector %s: %w", cc.Name, err)
			}
			provs[cc.Name] = sc
		}
	}
	return provs, stop, nil
}

// selfURL is the base URL at which this process's own listener l is
// reached from this machine: an unspecified address (0.0.0.0, ::) is
// reached on loopback. Embedded fakes send their webhooks there.
func selfURL(l net.Addr) string {
	host, port, err := net.SplitHostPort(l.String())
	if err != nil {
		return "http://" + l.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
