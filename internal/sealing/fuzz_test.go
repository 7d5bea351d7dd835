package sealing

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// FuzzOpen checks that Open never panics on a hostile blob or binding, and
// fails only with its own sentinels: any agent can write nothing into a
// spec, but a tenant writes whatever it likes into its own.
func FuzzOpen(f *testing.F) {
	k, err := GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	good, err := Seal(k.Public(), bound, plaintext)
	if err != nil {
		f.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(good.Sealed)
	f.Add(good.KeyID, good.Sealed, bound.Namespace, bound.Name, bound.NodeName)
	f.Add(good.KeyID, good.Sealed, bound.Namespace, "ci-2", bound.NodeName)
	f.Add(good.KeyID, base64.StdEncoding.EncodeToString(raw[:keySize]), bound.Namespace, bound.Name, bound.NodeName)
	f.Add(good.KeyID, "", bound.Namespace, bound.Name, bound.NodeName)
	f.Add(good.KeyID, "====", "", "", "")
	f.Add("0000000000000000", good.Sealed, bound.Namespace, bound.Name, bound.NodeName)
	f.Add(good.KeyID, good.Sealed[:len(good.Sealed)-2]+"==", "a\x00", "b", "c")

	f.Fuzz(func(t *testing.T, keyID, sealed, ns, name, node string) {
		b := Binding{Namespace: ns, Name: name, NodeName: node}
		got, err := k.Open(computev1alpha1.SealedGuestConfig{KeyID: keyID, Sealed: sealed}, b)
		if err != nil {
			if got != nil {
				t.Fatal("a failed Open returned plaintext")
			}
			if !errors.Is(err, ErrWrongKey) && !errors.Is(err, ErrUnreadable) && !errors.Is(err, ErrInvalidBinding) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		// Only the genuine blob, for its own binding, opens.
		if sealed != good.Sealed || b != bound || !bytes.Equal(got, plaintext) {
			t.Fatalf("opened %q from a blob or binding that was never sealed (%+v)", got, b)
		}
	})
}
