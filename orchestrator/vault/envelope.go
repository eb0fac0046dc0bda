package vault

import (
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// What a ciphertext of a payment method holds: the card (number and
// holder name), its CVC, or its data key (wrapped by a key-encryption
// key). The purpose is part of the associated data, so a ciphertext moved
// to another column does not decrypt either.
const (
	purposeNumber = "number"
	purposeCVC    = "cvc"
	purposeKey    = "key"
)

// errTampered is why a ciphertext did not decrypt: it was altered, moved
// to another row or column, or sealed under another key. Nothing more can
// be told, and nothing of the value is in it.
var errTampered = errors.New("vault: ciphertext does not decrypt (altered, moved, or under another key)")

// MissingKEKError says a data key is wrapped by a key-encryption key
// version the configuration no longer (or not yet) has.
type MissingKEKError struct{ Version int }

func (e *MissingKEKError) Error() string {
	return fmt.Sprintf("vault: key-encryption key version %d is not configured (PAYORCH_VAULT_KEYS)", e.Version)
}

// associatedData binds a ciphertext to its tenant, payment method and
// purpose. Ids are of a fixed alphabet and purposes fixed words, so the
// NUL-separated concatenation is unambiguous.
func associatedData(purpose string, tenantID int64, id string) []byte {
	return []byte("payorch-vault/1\x00" + purpose + "\x00" + strconv.FormatInt(tenantID, 10) + "\x00" + id)
}

// seal encrypts plaintext under aead with a fresh random nonce, which
// starts the result. Random 96-bit nonces are safe far beyond the
// vault's volumes under one key (NIST's bound is 2^32 messages per key;
// a data key seals two, a key-encryption key one per payment method).
func seal(aead cipher.AEAD, plaintext, ad []byte) []byte {
	n := aead.NonceSize()
	out := make([]byte, n, n+len(plaintext)+aead.Overhead())
	_, _ = rand.Read(out) // crypto/rand.Read never fails (it panics if the system cannot give randomness)
	return aead.Seal(out, out[:n], plaintext, ad)
}

// open decrypts what seal made; errTampered if it fails.
func open(aead cipher.AEAD, ciphertext, ad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(ciphertext) < n+aead.Overhead() {
		return nil, errTampered
	}
	plain, err := aead.Open(nil, ciphertext[:n], ciphertext[n:], ad)
	if err != nil {
		return nil, errTampered
	}
	return plain, nil
}

// sealed is a card as stored: its ciphertexts and its data key, wrapped
// by the key-encryption key of version kekVersion.
type sealed struct {
	card, cvc  []byte // cvc is nil when there is none
	wrappedKey []byte
	kekVersion int
}

// sealCard encrypts a card (number digits only) for payment method id of
// a tenant under a fresh data key, and wraps that key by the newest
// key-encryption key. The data key and the plaintexts are zeroed after use.
func (k *Keyring) sealCard(tenantID int64, id, number, cvc, holder string) (sealed, error) {
	dek := make([]byte, KeySize)
	defer clear(dek)
	_, _ = rand.Read(dek)
	aead, err := newAEAD(dek)
	if err != nil {
		return sealed{}, err
	}
	plain := make([]byte, 0, len(number)+1+len(holder))
	plain = append(append(append(plain, number...), 0), holder...)
	defer clear(plain)
	s := sealed{card: seal(aead, plain, associatedData(purposeNumber, tenantID, id)), kekVersion: k.newest}
	if cvc != "" {
		c := []byte(cvc)
		s.cvc = seal(aead, c, associatedData(purposeCVC, tenantID, id))
		clear(c)
	}
	s.wrappedKey = seal(k.keks[k.newest], dek, associatedData(purposeKey, tenantID, id))
	return s, nil
}

// unwrap returns the data key of payment method id, wrapped under
// version. The caller zeroes it.
func (k *Keyring) unwrap(tenantID int64, id string, version int, wrapped []byte) ([]byte, error) {
	kek, ok := k.keks[version]
	if !ok {
		return nil, &MissingKEKError{Version: version}
	}
	return open(kek, wrapped, associatedData(purposeKey, tenantID, id))
}

// rewrap re-wraps a data key under the newest key-encryption key without
// decrypting anything it protects.
func (k *Keyring) rewrap(tenantID int64, id string, version int, wrapped []byte) ([]byte, error) {
	dek, err := k.unwrap(tenantID, id, version, wrapped)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	return seal(k.keks[k.newest], dek, associatedData(purposeKey, tenantID, id)), nil
}

// openedCard is a card decrypted: number (digits), holder name, and the
// CVC ("" when there was none to open).
type openedCard struct {
	number, holder, cvc string
}

// openCard decrypts a stored card of payment method id. cvc may be nil
// (erased, expired: then it is not even looked at).
func (k *Keyring) openCard(tenantID int64, id string, s sealed) (openedCard, error) {
	dek, err := k.unwrap(tenantID, id, s.kekVersion, s.wrappedKey)
	if err != nil {
		return openedCard{}, err
	}
	aead, err := newAEAD(dek)
	clear(dek)
	if err != nil {
		return openedCard{}, err
	}
	plain, err := open(aead, s.card, associatedData(purposeNumber, tenantID, id))
	if err != nil {
		return openedCard{}, err
	}
	defer clear(plain)
	number, holder, ok := strings.Cut(string(plain), "\x00")
	if !ok {
		return openedCard{}, errTampered
	}
	c := openedCard{number: number, holder: holder}
	if s.cvc != nil {
		cvc, err := open(aead, s.cvc, associatedData(purposeCVC, tenantID, id))
		if err != nil {
			return openedCard{}, err
		}
		c.cvc = string(cvc)
		clear(cvc)
	}
	return c, nil
}
