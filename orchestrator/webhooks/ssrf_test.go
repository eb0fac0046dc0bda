package webhooks

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// TestBlockedAddress: every special-purpose range is refused, with an
// address inside it, and the address just past it passes where that one
// is public; so do ordinary public addresses. Literal URLs at endpoint
// creation get the same answer, from the same table.
func TestBlockedAddress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rng, inside, outside string // outside "": its neighbour is not public
	}{
		{"0.0.0.0/8", "0.1.2.3", "1.0.0.1"},
		{"0.0.0.0/32", "0.0.0.0", ""},
		{"10.0.0.0/8", "10.1.2.3", "11.0.0.1"},
		{"100.64.0.0/10", "100.100.100.200", "100.128.0.1"},
		{"100.64.0.0/10 start", "100.64.0.1", "100.63.255.254"},
		{"127.0.0.0/8", "127.0.0.1", "128.0.0.1"},
		{"169.254.0.0/16", "169.254.169.254", "169.255.0.1"},
		{"172.16.0.0/12", "172.31.255.254", "172.32.0.1"},
		{"192.0.0.0/24", "192.0.0.9", "192.0.1.1"},
		{"192.0.0.0/29", "192.0.0.1", ""},
		{"192.0.0.8/32", "192.0.0.8", ""},
		{"192.0.0.170/31", "192.0.0.171", ""},
		{"192.0.2.0/24", "192.0.2.10", "192.0.3.1"},
		{"192.88.99.0/24", "192.88.99.1", "192.88.100.1"},
		{"192.168.0.0/16", "192.168.1.1", "192.169.0.1"},
		{"198.18.0.0/15", "198.19.255.254", "198.20.0.1"},
		{"198.18.0.0/15 start", "198.18.0.1", "198.17.255.254"},
		{"198.51.100.0/24", "198.51.100.7", "198.51.101.1"},
		{"203.0.113.0/24", "203.0.113.5", "203.0.114.1"},
		{"224.0.0.0/4", "239.255.255.250", ""},
		{"240.0.0.0/4", "240.0.0.1", "223.255.255.254"},
		{"255.255.255.255/32", "255.255.255.255", ""},
		{"::/128", "::", ""},
		{"::1/128", "::1", ""},
		{"::ffff:0.0.0.0/96 loopback", "::ffff:127.0.0.1", ""},
		{"::ffff:0.0.0.0/96 public", "::ffff:8.8.8.8", ""},
		{"64:ff9b::/96", "64:ff9b::a9fe:a9fe", ""},
		{"64:ff9b::/96 public", "64:ff9b::808:808", ""},
		{"64:ff9b:1::/48", "64:ff9b:1::a00:1", ""},
		{"100::/64", "100::1", ""},
		{"100:0:0:1::/64", "100:0:0:1::1", ""},
		{"2001::/23", "2001:1::1", "2001:200::1"},
		{"2001::/32 Teredo", "2001:0:4136:e378:8000:63bf:3fff:fdd2", ""},
		{"2001:2::/48", "2001:2::1", ""},
		{"2001:10::/28", "2001:10::1", ""},
		{"2001:20::/28", "2001:20::1", ""},
		{"2001:db8::/32", "2001:db8::1", "2001:db9::1"},
		{"2002::/16", "2002:a9fe:a9fe::1", "2003::1"},
		{"3fff::/20", "3fff::1", "3fff:1000::1"},
		{"5f00::/16", "5f00::1", ""},
		{"fc00::/7", "fd00::1", ""},
		{"fe80::/10", "fe80::1", ""},
		{"fe80::/10 zoned", "fe80::1%eth0", ""},
		{"fec0::/10", "fec0::1", ""},
		{"ff00::/8", "ff02::1", ""},
		{"outside 2000::/3", "4000::1", "2a00:1450:4001:81c::200e"},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.inside)
		if !blockedAddress(a) {
			t.Errorf("%s: %s passes", c.rng, a)
		}
		if !privateHost(a.String()) {
			t.Errorf("%s: endpoint creation takes %s", c.rng, a)
		}
		if c.outside != "" {
			if o := netip.MustParseAddr(c.outside); blockedAddress(o) || privateHost(o.String()) {
				t.Errorf("%s: %s, just outside, is refused (%s)", c.rng, o, addressRange(o))
			}
		}
	}
	for _, public := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.0",
		"198.17.255.255", "198.20.0.0", "192.0.1.0", "2606:4700:4700::1111", "2001:4860:4860::8888", "2a03:2880::1"} {
		if a := netip.MustParseAddr(public); blockedAddress(a) || privateHost(public) {
			t.Errorf("public %s refused (%s)", public, addressRange(a))
		}
	}
	// Every range of the table has a case.
	for _, r := range specialPurpose {
		if !blockedAddress(r.prefix.Addr()) {
			t.Errorf("%s (%s): its first address passes", r.prefix, r.name)
		}
		found := false
		for _, c := range cases {
			found = found || strings.HasPrefix(c.rng, r.prefix.String())
		}
		if !found {
			t.Errorf("%s (%s) has no case", r.prefix, r.name)
		}
	}
}

// TestWebhookClientRefusesSpecialPurpose: the delivery client refuses a
// special-purpose address at connect time, before any packet leaves.
func TestWebhookClientRefusesSpecialPurpose(t *testing.T) {
	t.Parallel()
	c := newWebhookClient(false, slog.New(slog.DiscardHandler))
	for _, target := range []string{"http://100.100.100.200/latest/meta-data/", "http://198.18.0.1/", "http://[64:ff9b::a9fe:a9fe]/",
		"http://192.0.0.170/", "http://[2002:a9fe:a9fe::1]/"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, target, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
		}
		var blocked *blockedAddressError
		if !errors.As(err, &blocked) {
			t.Errorf("%s: %v, want refused", target, err)
		}
	}
}
