package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// deliveryError describes a failed attempt without an answer, in words
// that are safe to show the endpoint's owner.
func deliveryError(err error) string {
	var blocked *blockedAddressError
	switch {
	case errors.As(err, &blocked):
		return blocked.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s", WebhookTimeout)
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return "connection failed: " + netErr.Op
	}
	return "request failed"
}

// blockedAddressError refuses a connection to an address webhooks may not
// reach.
type blockedAddressError struct{ addr netip.Addr }

func (e *blockedAddressError) Error() string {
	return "refused to connect to " + e.addr.String() + ": private, loopback and link-local addresses are not allowed (PAYORCH_WEBHOOK_ALLOW_PRIVATE)"
}

// blockedAddress reports whether webhooks may not connect to a: loopback,
// private, link-local, unspecified, multicast or otherwise not global
// unicast.
func blockedAddress(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast()
}

// newWebhookClient is the HTTP client of deliveries: no proxy from the
// environment, no redirects followed (a 3xx is a failed attempt), and,
// unless allowPrivate, a dialer that refuses every address blockedAddress
// names, checked on the address actually dialled (after DNS), so a name
// resolving to a private address is refused too.
func newWebhookClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: WebhookTimeout}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if blockedAddress(ap.Addr()) {
				return &blockedAddressError{addr: ap.Addr()}
			}
			return nil
		}
	}
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DialContext: dialer.DialContext, MaxIdleConnsPerHost: 8,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: WebhookTimeout, ResponseHeaderTimeout: WebhookTimeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
