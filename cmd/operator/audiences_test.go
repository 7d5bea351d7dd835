package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + ".c2ln"
}

func TestOwnTokenAudiences(t *testing.T) {
	for _, tc := range []struct {
		name, token string
		want        []string
	}{
		{"a list of audiences is read as it is", jwt(`{"aud":["https://kubernetes.default.svc","api"]}`), []string{"https://kubernetes.default.svc", "api"}},
		{"a single audience string is a list of one", jwt(`{"aud":"https://kubernetes.default.svc"}`), []string{"https://kubernetes.default.svc"}},
		{"a token without audiences is refused", jwt(`{"sub":"x"}`), nil},
		{"an empty audience list is refused", jwt(`{"aud":[]}`), nil},
		{"a token that is not a JWT is refused", "opaque", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(path, []byte(tc.token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ownTokenAudiences(path)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("want an error, got %v", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := ownTokenAudiences(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing token file must be an error")
	}
}
