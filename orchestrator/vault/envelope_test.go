package vault

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKeysRefusesBadKeysWithoutQuotingThem(t *testing.T) {
	t.Parallel()
	secret := testKEK(1)
	for _, tc := range []struct{ keks, fp string }{
		{"", testFingerprintKey},
		{secret, testFingerprintKey},                         // no version
		{"0:" + secret, testFingerprintKey},                  // version 0
		{"1:" + secret + ",1:" + secret, testFingerprintKey}, // twice
		{"1:" + secret[:20], testFingerprintKey},             // short
		{"1:" + secret, ""},                                  // no fingerprint key
		{"1:" + secret, "not base64!"},
	} {
		_, err := ParseKeys(tc.keks, tc.fp)
		if err == nil {
			t.Errorf("ParseKeys(%q) accepted", tc.keks)
			continue
		}
		if strings.Contains(err.Error(), secret[:20]) {
			t.Errorf("error quotes the key: %v", err)
		}
	}
	k := testKeys(t, 2, 1, 3)
	if k.Newest() != 3 || len(k.Versions()) != 3 || k.Versions()[0] != 1 {
		t.Fatalf("versions %v, newest %d", k.Versions(), k.Newest())
	}
}

func TestFingerprintIsPerTenantAndBlindIsSeparate(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	a, b := k.Fingerprint(1, "4242424242424242"), k.Fingerprint(2, "4242424242424242")
	if a == b {
		t.Fatal("two tenants get the same fingerprint for one card")
	}
	if a != k.Fingerprint(1, "4242424242424242") || len(a) != 22 {
		t.Fatalf("fingerprint %q not stable or not 22 characters", a)
	}
	if a == k.Fingerprint(1, "4000000000000002") {
		t.Fatal("two cards, one fingerprint")
	}
	if k.Blind("4242424242424242") == a || strings.Contains(k.Blind("4242424242424242"), "4242") {
		t.Fatal("blind is the fingerprint, or shows the value")
	}
	other, _ := ParseKeys("1:"+testKEK(1), testKEK(9))
	if other.Fingerprint(1, "4242424242424242") == a {
		t.Fatal("fingerprint does not depend on the fingerprint key")
	}
}

func TestSealedCardIsBoundToItsRowAndField(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	const id, other = "vpm_00000000000000000000000000000001", "vpm_00000000000000000000000000000002"
	s, err := k.sealCard(7, id, "4242424242424242", "123", "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if o, err := k.openCard(7, id, s); err != nil || o.number != "4242424242424242" || o.cvc != "123" || o.holder != "Ada" {
		t.Fatalf("open: %v", err)
	}
	for name, tc := range map[string]struct {
		tenant int64
		id     string
		s      sealed
	}{
		"OtherTenant":       {8, id, s},
		"OtherID":           {7, other, s},
		"CVCInNumberColumn": {7, id, sealed{card: s.cvc, wrappedKey: s.wrappedKey, kekVersion: 1}},
		"NumberInCVCColumn": {7, id, sealed{card: s.card, cvc: s.card, wrappedKey: s.wrappedKey, kekVersion: 1}},
		"KeyAsCard":         {7, id, sealed{card: s.wrappedKey, wrappedKey: s.wrappedKey, kekVersion: 1}},
	} {
		if _, err := k.openCard(tc.tenant, tc.id, tc.s); !errors.Is(err, errTampered) {
			t.Errorf("%s: got %v, want errTampered", name, err)
		}
	}
	if _, err := testKeys(t, 2).openCard(7, id, s); !errors.As(err, new(*MissingKEKError)) {
		t.Fatalf("a keyring without version 1: %v", err)
	}
}
