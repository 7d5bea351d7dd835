package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// serviceAccountTokenFile is where the kubelet mounts a pod's
// ServiceAccount token. Its default projection requests no audience, so the
// API server issued it for its own audiences.
const serviceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// ownTokenAudiences reads the audiences of the token in path. It only reads
// the claim, unverified: the API server verifies tokens; this learns how it
// is configured.
func ownTokenAudiences(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the operator's token to learn the API server's audiences: %w", err)
	}
	parts := strings.Split(strings.TrimSpace(string(raw)), ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("the token in %s is not a JWT", path)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("decoding the token in %s: %w", path, err)
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, fmt.Errorf("decoding the token in %s: %w", path, err)
	}
	var auds []string
	if err := json.Unmarshal(claims.Aud, &auds); err != nil {
		var one string
		if err := json.Unmarshal(claims.Aud, &one); err != nil || one == "" {
			return nil, fmt.Errorf("the token in %s names no audience", path)
		}
		auds = []string{one}
	}
	if len(auds) == 0 {
		return nil, fmt.Errorf("the token in %s names no audience", path)
	}
	return auds, nil
}
