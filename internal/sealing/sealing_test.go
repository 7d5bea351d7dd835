package sealing

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

var (
	bound     = Binding{Namespace: "tenant-a", Name: "ci-1", NodeName: "c02test00001"}
	plaintext = []byte(`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"glrt-s3cr3t"}}`)
)

func testKey(t *testing.T) *Key {
	t.Helper()
	k, err := LoadOrCreate(filepath.Join(t.TempDir(), "guest-key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func seal(t *testing.T, k *Key, b Binding, p []byte) computev1alpha1.SealedGuestConfig {
	t.Helper()
	c, err := Seal(k.Public(), b, p)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return *c
}

func TestASealedConfigOpensForItsInstanceOnItsNode(t *testing.T) {
	k := testKey(t)
	c := seal(t, k, bound, plaintext)
	if c.KeyID != k.Public().KeyID {
		t.Fatalf("sealed to key %q, want %q", c.KeyID, k.Public().KeyID)
	}
	if strings.Contains(c.Sealed, "glrt") || bytes.Contains(mustDecode(t, c.Sealed), []byte("glrt")) {
		t.Fatal("the seal shows the plaintext")
	}
	got, err := k.Open(c, bound)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !bytes.Equal(got, plaintext) {
		t.Fatalf("opened %q, sealed %q", got, plaintext)
	}
	// Every seal is fresh: the same plaintext twice is two blobs.
	if again := seal(t, k, bound, plaintext); again.Sealed == c.Sealed {
		t.Fatal("two seals of one plaintext are the same blob")
	}
}

func TestTheLargestPlaintextSealsWithinTheSchemaBound(t *testing.T) {
	k := testKey(t)
	c := seal(t, k, bound, bytes.Repeat([]byte("x"), MaxPlaintext))
	if n := len(c.Sealed); n > 32768 {
		t.Fatalf("the seal of %d bytes is %d characters, over the schema's 32768", MaxPlaintext, n)
	}
	if _, err := k.Open(c, bound); err != nil {
		t.Fatalf("positive control: the largest seal does not open: %v", err)
	}
	if _, err := Seal(k.Public(), bound, bytes.Repeat([]byte("x"), MaxPlaintext+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: got %v, want ErrTooLarge", err)
	}
}

// A blob moved onto another instance, or an instance on another node, does
// not open: the info string binds it. The positive control is the blob on
// its own instance.
func TestABlobMovedElsewhereDoesNotOpen(t *testing.T) {
	k := testKey(t)
	c := seal(t, k, bound, plaintext)
	if _, err := k.Open(c, bound); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	for _, tc := range []struct {
		name string
		b    Binding
	}{
		{"another instance's name", Binding{Namespace: "tenant-a", Name: "ci-2", NodeName: "c02test00001"}},
		{"another namespace", Binding{Namespace: "tenant-b", Name: "ci-1", NodeName: "c02test00001"}},
		{"another node", Binding{Namespace: "tenant-a", Name: "ci-1", NodeName: "c02test00002"}},
		// The separators keep the parts apart: shifting a character from
		// one part to the next is another binding.
		{"parts shifted across a separator", Binding{Namespace: "tenant-a", Name: "ci-1c02", NodeName: "test00001"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.Open(c, tc.b)
			if !errors.Is(err, ErrUnreadable) || got != nil {
				t.Fatalf("got %q, %v; want ErrUnreadable", got, err)
			}
		})
	}
}

func TestATamperedBlobDoesNotOpen(t *testing.T) {
	k := testKey(t)
	c := seal(t, k, bound, plaintext)
	raw := mustDecode(t, c.Sealed)
	for _, at := range []int{0, keySize - 1, keySize, len(raw) / 2, len(raw) - 1} {
		t.Run(fmt.Sprintf("a bit flipped at byte %d", at), func(t *testing.T) {
			bad := bytes.Clone(raw)
			bad[at] ^= 0x01
			got, err := k.Open(computev1alpha1.SealedGuestConfig{KeyID: c.KeyID, Sealed: base64.StdEncoding.EncodeToString(bad)}, bound)
			if !errors.Is(err, ErrUnreadable) || got != nil {
				t.Fatalf("got %q, %v; want ErrUnreadable", got, err)
			}
		})
	}
	for _, tc := range []struct{ name, sealed string }{
		{"not base64", "not base64!"},
		{"base64 with its padding bits set", paddingBitsSet(raw[:49])},
		{"base64 broken by a line", c.Sealed[:40] + "\n" + c.Sealed[40:]},
		{"shorter than a seal", base64.StdEncoding.EncodeToString(raw[:keySize+tagSize-1])},
		{"cut after the encapsulated key", base64.StdEncoding.EncodeToString(raw[:keySize+tagSize])},
		{"empty", ""},
		{"longer than any seal", strings.Repeat("A", maxSealedChars+4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := k.Open(computev1alpha1.SealedGuestConfig{KeyID: c.KeyID, Sealed: tc.sealed}, bound); !errors.Is(err, ErrUnreadable) {
				t.Fatalf("got %v, want ErrUnreadable", err)
			}
		})
	}
}

// Another chassis' key does not open the blob: it says so by the key id,
// and a key id forged to match fails authentication all the same.
func TestAnotherKeyDoesNotOpen(t *testing.T) {
	mine, other := testKey(t), testKey(t)
	if mine.Public().KeyID == other.Public().KeyID {
		t.Fatal("two keys share an id")
	}
	c := seal(t, mine, bound, plaintext)
	if _, err := mine.Open(c, bound); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	_, err := other.Open(c, bound)
	if !errors.Is(err, ErrWrongKey) || errors.Is(err, ErrUnreadable) {
		t.Fatalf("got %v, want ErrWrongKey", err)
	}
	if !strings.Contains(err.Error(), mine.ID()) || !strings.Contains(err.Error(), other.ID()) {
		t.Fatalf("error %q does not name both key ids", err)
	}
	forged := c
	forged.KeyID = other.ID()
	if _, err := other.Open(forged, bound); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("forged key id: got %v, want ErrUnreadable", err)
	}
}

func TestSealRefusesAKeyOrBindingItCannotTrust(t *testing.T) {
	k := testKey(t)
	good := k.Public()
	if _, err := Seal(good, bound, plaintext); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	other := testKey(t).Public()
	for _, tc := range []struct {
		name string
		key  func(fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey
		b    Binding
		want error
	}{
		{"another algorithm", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey {
			g.Algorithm = "HPKE-P256-SHA256-AES128GCM"
			return g
		}, bound, ErrInvalidKey},
		{"a public key that is not base64", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { g.PublicKey = "%%%"; return g }, bound, ErrInvalidKey},
		{"a public key of 31 bytes", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey {
			g.PublicKey = base64.StdEncoding.EncodeToString(make([]byte, 31))
			return g
		}, bound, ErrInvalidKey},
		{"a key id that is another key's", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { g.KeyID = other.KeyID; return g }, bound, ErrInvalidKey},
		{"a public key swapped under the key id", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { g.PublicKey = other.PublicKey; return g }, bound, ErrInvalidKey},
		{"an empty namespace", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { return g }, Binding{Name: "ci-1", NodeName: "n"}, ErrInvalidBinding},
		{"an empty name", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { return g }, Binding{Namespace: "a", NodeName: "n"}, ErrInvalidBinding},
		{"an empty node", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { return g }, Binding{Namespace: "a", Name: "ci-1"}, ErrInvalidBinding},
		{"a NUL in a part", func(g fleetv1alpha1.GuestKey) fleetv1alpha1.GuestKey { return g }, Binding{Namespace: "a", Name: "ci\x001", NodeName: "n"}, ErrInvalidBinding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Seal(tc.key(good), tc.b, plaintext); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := k.Open(seal(t, k, bound, plaintext), Binding{Namespace: "a", Name: "b"}); !errors.Is(err, ErrInvalidBinding) {
		t.Fatalf("Open with an empty node: got %v, want ErrInvalidBinding", err)
	}
}

func TestLoadOrCreateKeepsOneKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "guest-key")
	first, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != keySize {
		t.Fatalf("key file mode %04o size %d, want 0600 and %d", fi.Mode().Perm(), fi.Size(), keySize)
	}
	second, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	if first.Public() != second.Public() {
		t.Fatalf("the key changed across loads: %+v then %+v", first.Public(), second.Public())
	}
	// What the first sealed, the reloaded key opens.
	if _, err := second.Open(seal(t, first, bound, plaintext), bound); err != nil {
		t.Fatalf("the reloaded key does not open: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("the key's directory holds %d entries, want the key alone", len(entries))
	}
	pub := first.Public()
	if raw, err := base64.StdEncoding.DecodeString(pub.PublicKey); err != nil || len(raw) != keySize || len(pub.KeyID) != 16 ||
		pub.Algorithm != fleetv1alpha1.GuestKeyAlgorithm {
		t.Fatalf("the published key %+v is not what the schema wants", pub)
	}
}

func TestLoadOrCreateRefusesAKeyFileItCannotTrust(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, path string)
	}{
		{"a key readable by others", func(t *testing.T, path string) { chmod(t, path, 0o644) }},
		{"a key writable by its group", func(t *testing.T, path string) { chmod(t, path, 0o620) }},
		{"a key one byte short", func(t *testing.T, path string) { write(t, path, make([]byte, keySize-1)) }},
		{"a key with a byte more", func(t *testing.T, path string) { write(t, path, make([]byte, keySize+1)) }},
		{"an empty file", func(t *testing.T, path string) { write(t, path, nil) }},
		{"a symbolic link to a key", func(t *testing.T, path string) {
			real := path + ".real"
			if err := os.Rename(path, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "guest-key")
			if _, err := LoadOrCreate(path); err != nil {
				t.Fatalf("positive control: %v", err)
			}
			tc.prepare(t, path)
			before, _ := os.ReadFile(path)
			k, err := LoadOrCreate(path)
			if !errors.Is(err, ErrKeyFile) || k != nil {
				t.Fatalf("got %v, %v; want ErrKeyFile", k, err)
			}
			// Refused, not replaced: a new key would orphan every seal.
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Fatal("LoadOrCreate replaced a key file it refused")
			}
		})
	}
}

func TestAKeyNeverPrintsItsPrivateHalf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guest-key")
	k, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), fmt.Sprintf("%v %+v %#v", *k, *k, *k)} {
		for _, enc := range []string{string(raw), base64.StdEncoding.EncodeToString(raw), fmt.Sprintf("%x", raw), fmt.Sprint(raw)} {
			if strings.Contains(out, enc) {
				t.Fatalf("%q shows the private key", out)
			}
		}
		if !strings.Contains(out, k.ID()) {
			t.Fatalf("%q does not name the key id", out)
		}
	}
}

// paddingBitsSet encodes b (len(b)%3 == 1) with the unused low bits of
// its last character set: a lax decoder reads the same bytes.
func paddingBitsSet(b []byte) string {
	s := []byte(base64.StdEncoding.EncodeToString(b))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := len(s) - 3
	s[i] = alphabet[strings.IndexByte(alphabet, s[i])|1]
	return string(s)
}

func mustDecode(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
