package sealing

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Key is a chassis' guest key: the private half, which opens what was
// sealed to the public half it publishes. It prints as its key id only.
type Key struct {
	priv hpke.PrivateKey
	pub  fleetv1alpha1.GuestKey
}

// GenerateKey makes a new key in memory, for tests and tools; an agent
// keeps its own with LoadOrCreate.
func GenerateKey() (*Key, error) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a guest key: %w", err)
	}
	return newKey(priv.Bytes())
}

// newKey is the Key whose X25519 private key is raw.
func newKey(raw []byte) (*Key, error) {
	if len(raw) != keySize {
		return nil, fmt.Errorf("%w: a private key of %d bytes, want %d", ErrKeyFile, len(raw), keySize)
	}
	priv, err := kem.NewPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	pub := priv.PublicKey().Bytes()
	return &Key{priv: priv, pub: fleetv1alpha1.GuestKey{
		Algorithm: fleetv1alpha1.GuestKeyAlgorithm,
		PublicKey: base64.StdEncoding.EncodeToString(pub),
		KeyID:     keyID(pub),
	}}, nil
}

// Public is the key's public half as a MacNode publishes it.
func (k *Key) Public() fleetv1alpha1.GuestKey { return k.pub }

// ID is the key's id, what a sealed config names.
func (k *Key) ID() string { return k.pub.KeyID }

// Open opens a config sealed to this key for the instance b names, and
// returns the plaintext; the caller should clear it once it is handed on.
// A config sealed to another key wraps ErrWrongKey; one that names this
// key but does not open wraps ErrUnreadable. Neither error quotes the
// sealed text.
func (k *Key) Open(c computev1alpha1.SealedGuestConfig, b Binding) ([]byte, error) {
	if c.KeyID != k.pub.KeyID {
		return nil, fmt.Errorf("opening the guest config of %s: %w: it names key %q, this chassis' key is %s", b, ErrWrongKey, c.KeyID, k.pub.KeyID)
	}
	info, err := b.info()
	if err != nil {
		return nil, fmt.Errorf("opening a guest config: %w", err)
	}
	// Bounded before decoding: a hostile blob costs no more than the
	// largest honest one.
	if len(c.Sealed) > maxSealedChars {
		return nil, fmt.Errorf("opening the guest config of %s: %w: %d characters, limit %d", b, ErrUnreadable, len(c.Sealed), maxSealedChars)
	}
	// Strict, and no line breaks (which the decoder would skip): one blob
	// has one spelling.
	sealed, err := base64.StdEncoding.Strict().DecodeString(c.Sealed)
	if err != nil || strings.ContainsAny(c.Sealed, "\r\n") {
		return nil, fmt.Errorf("opening the guest config of %s: %w: not standard base64", b, ErrUnreadable)
	}
	if len(sealed) < keySize+tagSize {
		return nil, fmt.Errorf("opening the guest config of %s: %w: %d bytes is too short for a seal", b, ErrUnreadable, len(sealed))
	}
	plain, err := hpke.Open(k.priv, kdf, aead, info, sealed)
	if err != nil {
		// One answer for every cause: which one it was (another instance,
		// node or key, or tampering) is exactly what authentication hides.
		return nil, fmt.Errorf("opening the guest config of %s: %w: it fails authentication (sealed for another instance, node or key, or altered)", b, ErrUnreadable)
	}
	return plain, nil
}

// String names the key by its id, never its private half.
func (k *Key) String() string {
	if k == nil {
		return "<nil>"
	}
	return "guest key " + k.pub.KeyID
}

// GoString is the key's id too, so that %#v prints no private key either.
func (k *Key) GoString() string {
	if k == nil {
		return "(*sealing.Key)(nil)"
	}
	return fmt.Sprintf("&sealing.Key{KeyID:%q}", k.pub.KeyID)
}

// Format prints String for every verb but %#v, which prints GoString.
func (k *Key) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(k.GoString()))
		return
	}
	_, _ = f.Write([]byte(k.String()))
}
