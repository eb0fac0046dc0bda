package webhooks

// The webhooks' address filter: deliveries are sent from inside the
// operator's network to URLs merchants choose, so unless
// PAYORCH_WEBHOOK_ALLOW_PRIVATE (development) they may reach only public
// addresses, checked on the address actually dialled, after DNS.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// deliveryError describes a failed attempt without an answer, in words
// that are safe to show the endpoint's owner: never an address, nor the
// host's name resolution.
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
// reach. Its text names neither the address nor its range: it becomes the
// attempt's error, which the endpoint's owner reads, and the address a
// host name resolved to is the operator's network, not the merchant's
// business (the log has it: newWebhookClient).
type blockedAddressError struct{ addr netip.Addr }

func (e *blockedAddressError) Error() string {
	return "refused: not a public address (PAYORCH_WEBHOOK_ALLOW_PRIVATE allows private addresses)"
}

// specialPurpose is every range webhooks may not reach, with the name
// IANA's registries give it: the IPv4 and IPv6 Special-Purpose Address
// Registries' ranges that are not globally reachable, and multicast and
// the deprecated site-local range besides. A few are refused whole though
// they hold globally reachable entries, since no webhook receiver lives
// there: the IETF Protocol Assignments blocks (192.0.0.0/24 and 2001::/23,
// with anycast, AMT and AS112 addresses, and ORCHIDv2) and the NAT64
// prefix 64:ff9b::/96. The translation prefixes (NAT64, 6to4, Teredo,
// IPv4-mapped) carry an IPv4 address in them, 64:ff9b::a9fe:a9fe being
// 169.254.169.254; refusing the whole prefix spares checking what they
// carry. A range inside another is listed too, for its name.
var specialPurpose = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "This network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "Private-Use"},
	{netip.MustParsePrefix("100.64.0.0/10"), "Shared Address Space"},
	{netip.MustParsePrefix("127.0.0.0/8"), "Loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "Link Local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "Private-Use"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF Protocol Assignments"},
	{netip.MustParsePrefix("192.0.0.0/29"), "IPv4 Service Continuity Prefix"},
	{netip.MustParsePrefix("192.0.0.8/32"), "IPv4 dummy address"},
	{netip.MustParsePrefix("192.0.0.170/31"), "NAT64/DNS64 Discovery"},
	{netip.MustParsePrefix("192.0.2.0/24"), "Documentation (TEST-NET-1)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "Deprecated (6to4 Relay Anycast)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "Private-Use"},
	{netip.MustParsePrefix("198.18.0.0/15"), "Benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "Documentation (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "Documentation (TEST-NET-3)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "Multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "Reserved"},
	{netip.MustParsePrefix("255.255.255.255/32"), "Limited Broadcast"},

	{netip.MustParsePrefix("::/128"), "Unspecified Address"},
	{netip.MustParsePrefix("::1/128"), "Loopback Address"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped Address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "IPv4-IPv6 Translat."},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "IPv4-IPv6 Translat. (local use)"},
	{netip.MustParsePrefix("100::/64"), "Discard-Only Address Block"},
	{netip.MustParsePrefix("100:0:0:1::/64"), "Dummy IPv6 Prefix"},
	{netip.MustParsePrefix("2001::/23"), "IETF Protocol Assignments"},
	{netip.MustParsePrefix("2001::/32"), "TEREDO"},
	{netip.MustParsePrefix("2001:2::/48"), "Benchmarking"},
	{netip.MustParsePrefix("2001:10::/28"), "Deprecated (previously ORCHID)"},
	{netip.MustParsePrefix("2001:20::/28"), "ORCHIDv2"},
	{netip.MustParsePrefix("2001:db8::/32"), "Documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("3fff::/20"), "Documentation"},
	{netip.MustParsePrefix("5f00::/16"), "Segment Routing (SRv6) SIDs"},
	{netip.MustParsePrefix("fc00::/7"), "Unique-Local"},
	{netip.MustParsePrefix("fe80::/10"), "Link-Local Unicast"},
	{netip.MustParsePrefix("fec0::/10"), "Site-Local (deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "Multicast"},
}

// ipv6GlobalUnicast is the only IPv6 space IANA has allocated for global
// unicast; an IPv6 address outside it reaches nothing public.
var ipv6GlobalUnicast = netip.MustParsePrefix("2000::/3")

// addressRange names the range that makes a not public ("" if it is
// public): the most specific entry of specialPurpose holding it, or, for
// IPv6, the space outside 2000::/3. A zone is ignored (fe80::1%eth0 is
// link-local); an invalid address is refused.
func addressRange(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid address"
	}
	a = a.WithZone("")
	name, bits := "", -1
	for _, r := range specialPurpose {
		if r.prefix.Contains(a) && r.prefix.Bits() > bits {
			name, bits = r.name, r.prefix.Bits()
		}
	}
	if name == "" && a.Is6() && !ipv6GlobalUnicast.Contains(a) {
		name = "outside IPv6 global unicast (2000::/3)"
	}
	return name
}

// blockedAddress reports whether webhooks may not connect to a: an
// address of a special-purpose range (specialPurpose), or IPv6 outside
// global unicast. Endpoint URLs naming an address literally are checked
// with it too, so what creation accepts the worker can reach.
func blockedAddress(a netip.Addr) bool { return addressRange(a) != "" }

// newWebhookClient is the HTTP client of deliveries: no proxy from the
// environment, no redirects followed (a 3xx is a failed attempt), and,
// unless allowPrivate, a dialer that refuses every address blockedAddress
// names, checked on the address actually dialled (after DNS), so a name
// resolving to a private address is refused too. A refusal is logged at
// info, with the address and its range, for operators; the attempt's
// error says only that the address is not public.
func newWebhookClient(allowPrivate bool, logger *slog.Logger) *http.Client {
	dialer := &net.Dialer{Timeout: WebhookTimeout}
	if !allowPrivate {
		dialer.ControlContext = func(ctx context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if rng := addressRange(ap.Addr()); rng != "" {
				logger.InfoContext(ctx, "webhook delivery refused: not a public address", "address", ap.Addr().String(),
					"range", rng)
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
