package sealing

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

const (
	// infoPrefix opens every seal's HPKE info string; the version in it
	// lets a later scheme refuse blobs of this one rather than misread them.
	infoPrefix = "macrack.io/guest-config/v1"
	// MaxPlaintext bounds what Seal seals: its seal, base64-encoded, stays
	// within the schema's 32768 characters of spec.guestConfig.sealed
	// (16 KiB seals to 21,912).
	MaxPlaintext = 16 << 10
	// keySize is an X25519 key's size, public or private, and the size of
	// the HPKE encapsulated key that opens every seal.
	keySize = 32
	// tagSize is AES-256-GCM's authentication tag.
	tagSize = 16
	// keyIDBytes is how much of the public key's SHA-256 names it.
	keyIDBytes = 8
)

// maxSealedChars bounds the base64 text Open decodes: the seal of the
// largest plaintext Seal accepts.
var maxSealedChars = base64.StdEncoding.EncodedLen(keySize + MaxPlaintext + tagSize)

// The ciphersuite, fixed: GuestKeyAlgorithm names exactly this one.
var (
	kem  = hpke.DHKEM(ecdh.X25519())
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES256GCM()
)

// Binding names the one instance, on one node, that a seal is for.
type Binding struct {
	Namespace, Name, NodeName string
}

// info is the HPKE info string of b: "macrack.io/guest-config/v1", then
// the namespace, the name and the node, each after a NUL. No part may be
// empty or hold a NUL, so that no two bindings share an info string.
func (b Binding) info() ([]byte, error) {
	for _, p := range []struct{ what, v string }{{"namespace", b.Namespace}, {"name", b.Name}, {"node name", b.NodeName}} {
		if p.v == "" {
			return nil, fmt.Errorf("%w: empty %s", ErrInvalidBinding, p.what)
		}
		if strings.IndexByte(p.v, 0) >= 0 {
			return nil, fmt.Errorf("%w: the %s holds a NUL", ErrInvalidBinding, p.what)
		}
	}
	return []byte(infoPrefix + "\x00" + b.Namespace + "\x00" + b.Name + "\x00" + b.NodeName), nil
}

// String names b for errors: namespace/name on node.
func (b Binding) String() string {
	return b.Namespace + "/" + b.Name + " on " + b.NodeName
}

// keyID is what names a public key: the first 8 bytes of its SHA-256, in
// hex, as MacNode status.reported.guestKey.keyID says.
func keyID(pub []byte) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:keyIDBytes])
}

// publicKey checks a published GuestKey and returns its HPKE public key.
func publicKey(key fleetv1alpha1.GuestKey) (hpke.PublicKey, error) {
	if key.Algorithm != fleetv1alpha1.GuestKeyAlgorithm {
		return nil, fmt.Errorf("%w: algorithm %q, want %q", ErrInvalidKey, key.Algorithm, fleetv1alpha1.GuestKeyAlgorithm)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(key.PublicKey)
	if err != nil || len(raw) != keySize {
		return nil, fmt.Errorf("%w: publicKey is not %d bytes of standard base64", ErrInvalidKey, keySize)
	}
	// The keyID is what a sealed blob names, and what the agent tells a
	// replaced key by: one that is not the key's own would make every seal
	// to it look sealed to another key.
	if id := keyID(raw); key.KeyID != id {
		return nil, fmt.Errorf("%w: keyID %q is not the key's own (%s)", ErrInvalidKey, key.KeyID, id)
	}
	pub, err := kem.NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return pub, nil
}

// Seal seals plaintext to key for the instance b names: only the holder of
// key's private half opens it, and only with the same Binding. It refuses
// a key that is not a valid GuestKey, an invalid Binding, and a plaintext
// over MaxPlaintext. Every call seals anew, with a fresh ephemeral key.
func Seal(key fleetv1alpha1.GuestKey, b Binding, plaintext []byte) (*computev1alpha1.SealedGuestConfig, error) {
	pub, err := publicKey(key)
	if err != nil {
		return nil, fmt.Errorf("sealing a guest config for %s: %w", b, err)
	}
	info, err := b.info()
	if err != nil {
		return nil, fmt.Errorf("sealing a guest config: %w", err)
	}
	if len(plaintext) > MaxPlaintext {
		return nil, fmt.Errorf("sealing a guest config for %s: %w: %d bytes, limit %d", b, ErrTooLarge, len(plaintext), MaxPlaintext)
	}
	sealed, err := hpke.Seal(pub, kdf, aead, info, plaintext)
	if err != nil {
		return nil, fmt.Errorf("sealing a guest config for %s: %w", b, err)
	}
	return &computev1alpha1.SealedGuestConfig{KeyID: key.KeyID, Sealed: base64.StdEncoding.EncodeToString(sealed)}, nil
}
