package vault

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// KeySize is the size in bytes of every key of the vault: key-encryption
// keys, data keys (AES-256) and the fingerprint key.
const KeySize = 32

// fingerprintLen is the length of a card's fingerprint in bytes of the
// HMAC, before base64url: 128 bits, short enough to index and show, far
// too long to collide by chance.
const fingerprintLen = 16

// Keyring holds the vault's keys: the key-encryption keys (KEKs) by
// version, which wrap the payment methods' data keys, and the
// fingerprint key, which keys the HMACs of card numbers and of request
// bodies. They come from the configuration only; the database never holds
// them.
type Keyring struct {
	keks        map[int]cipher.AEAD
	newest      int
	fingerprint []byte
}

// ParseKeys reads the keys from the configuration's spelling: keks is
// "1:<base64>,2:<base64>" (standard base64 of 32 bytes each, versions
// positive and distinct; the highest wraps new data keys) and
// fingerprintKey the base64 of 32 bytes. Errors never quote a key.
func ParseKeys(keks, fingerprintKey string) (*Keyring, error) {
	k := &Keyring{keks: map[int]cipher.AEAD{}}
	for i, part := range strings.Split(keks, ",") {
		version, key, err := parseKEK(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("key-encryption key %d of the list: %w", i+1, err)
		}
		if _, dup := k.keks[version]; dup {
			return nil, fmt.Errorf("key-encryption key version %d appears twice", version)
		}
		aead, err := newAEAD(key)
		clear(key)
		if err != nil {
			return nil, err
		}
		k.keks[version] = aead
		k.newest = max(k.newest, version)
	}
	fp, err := decodeKey(fingerprintKey)
	if err != nil {
		return nil, fmt.Errorf("fingerprint key: %w", err)
	}
	k.fingerprint = fp
	return k, nil
}

// parseKEK reads one "version:base64" entry.
func parseKEK(s string) (int, []byte, error) {
	v, b64, ok := strings.Cut(s, ":")
	if !ok {
		return 0, nil, errors.New(`want "version:base64 of 32 bytes"`)
	}
	version, err := strconv.Atoi(v)
	if err != nil || version <= 0 || version > 1<<30 {
		return 0, nil, errors.New("the version must be a positive whole number")
	}
	key, err := decodeKey(b64)
	if err != nil {
		return 0, nil, fmt.Errorf("version %d: %w", version, err)
	}
	return version, key, nil
}

// decodeKey decodes a standard base64 key of KeySize bytes.
func decodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not standard base64")
	}
	if len(key) != KeySize {
		clear(key)
		return nil, fmt.Errorf("want %d bytes, got %d", KeySize, len(key))
	}
	return key, nil
}

// Versions lists the key-encryption key versions, oldest first.
func (k *Keyring) Versions() []int {
	vs := make([]int, 0, len(k.keks))
	for v := range k.keks {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// Newest is the version of the key-encryption key that wraps new data
// keys, and that Rotate re-wraps every data key under.
func (k *Keyring) Newest() int { return k.newest }

// Fingerprint is the card fingerprint of number for a tenant: an HMAC
// under the fingerprint key of the tenant and the number, base64url. The
// same card gives the same fingerprint within a tenant (to find
// duplicates) and unrelated ones across tenants, so that tenants cannot
// correlate their customers' cards.
func (k *Keyring) Fingerprint(tenantID int64, number string) string {
	m := hmac.New(sha256.New, k.fingerprint)
	m.Write([]byte("payorch-vault fingerprint\x00" + strconv.FormatInt(tenantID, 10) + "\x00"))
	m.Write([]byte(number))
	sum := m.Sum(nil)
	return base64.RawURLEncoding.EncodeToString(sum[:fingerprintLen])
}

// Blind is an HMAC under the fingerprint key, with a label of its own (so
// that no blinded value equals a fingerprint), of a sensitive value:
// request bodies holding card data are fingerprinted for idempotency from
// their blinded form, which shows whether two values are equal but not
// what they are.
func (k *Keyring) Blind(value string) string {
	m := hmac.New(sha256.New, k.fingerprint)
	m.Write([]byte("payorch-vault blind\x00"))
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newAEAD is AES-256-GCM under key.
func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("vault key: %w", err)
	}
	return cipher.NewGCM(block)
}
