package golden

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// ParseReference parses a golden's reference, which must be pinned by
// digest: host[:port]/repository@sha256:<64 hex>. A tag alone is refused: a
// tag can be moved, and an instance must boot the bytes that were approved.
// host/repository:tag@sha256:... is accepted, the digest wins and the tag is
// dropped unchecked (as oras does); the Reference returned holds the digest
// in its Reference field.
func ParseReference(s string) (registry.Reference, error) {
	ref, err := registry.ParseReference(s)
	if err != nil {
		return registry.Reference{}, fmt.Errorf("golden reference %q: %w", s, err)
	}
	if ref.Reference == "" {
		return registry.Reference{}, fmt.Errorf("golden reference %q names no digest: want %s/%s@sha256:<64 hex digits>", s, ref.Registry, ref.Repository)
	}
	d, err := ref.Digest()
	if err != nil {
		return registry.Reference{}, fmt.Errorf("golden reference %q is a tag (%s), not pinned by digest: want %s/%s@sha256:<64 hex digits>",
			s, ref.Reference, ref.Registry, ref.Repository)
	}
	if d.Algorithm() != digest.SHA256 {
		return registry.Reference{}, fmt.Errorf("golden reference %q: digest algorithm %s, want sha256", s, d.Algorithm())
	}
	return ref, nil
}

// RemoteOptions say how to reach a registry.
type RemoteOptions struct {
	// PlainHTTP talks http, not https (a loopback test registry).
	PlainHTTP bool
	// DockerConfigJSON is a Docker config file's content, the shape of a
	// kubernetes.io/dockerconfigjson Secret's .dockerconfigjson:
	// {"auths":{"host[:port]":{"auth":"base64(user:password)"}}} or with
	// "username" and "password"; "identitytoken" and "registrytoken" are
	// used too. Empty means anonymous.
	DockerConfigJSON []byte
	// Client is the HTTP client under the auth layer; nil is oras' retry
	// client (retries 5xx, 429 and connection errors with backoff).
	Client *http.Client
	// UserAgent, if set, is sent with every request.
	UserAgent string
}

// Repository opens the repository ref names (host[:port]/repository, with
// or without a tag or digest, which are ignored) with opts' transport and
// credentials.
func Repository(ref string, opts RemoteOptions) (*remote.Repository, error) {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %w", ref, err)
	}
	cred, err := DockerConfigCredentials(opts.DockerConfigJSON)
	if err != nil {
		return nil, err
	}
	hc := opts.Client
	if hc == nil {
		hc = retry.DefaultClient
	}
	client := &auth.Client{
		Client:     hc,
		Cache:      auth.NewCache(),
		Credential: cred,
	}
	if opts.UserAgent != "" {
		client.SetUserAgent(opts.UserAgent)
	}
	return &remote.Repository{
		Client:    client,
		Reference: registry.Reference{Registry: r.Registry, Repository: r.Repository},
		PlainHTTP: opts.PlainHTTP,
	}, nil
}

type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// DockerConfigCredentials returns a static credential function of a Docker
// config JSON's "auths" (see RemoteOptions.DockerConfigJSON); a host it
// does not name is anonymous. Keys may be host[:port] or a URL
// ("https://host/v1/"). Empty data is anonymous everywhere.
func DockerConfigCredentials(data []byte) (auth.CredentialFunc, error) {
	creds := map[string]auth.Credential{}
	if len(strings.TrimSpace(string(data))) > 0 {
		var cfg dockerConfig
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("the docker config is not JSON of {\"auths\":{...}}: %w", err)
		}
		for key, a := range cfg.Auths {
			host := registryHost(key)
			if host == "" {
				return nil, fmt.Errorf("the docker config: %q names no registry", key)
			}
			c := auth.Credential{Username: a.Username, Password: a.Password, RefreshToken: a.IdentityToken, AccessToken: a.RegistryToken}
			if a.Auth != "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				if err != nil {
					return nil, fmt.Errorf("the docker config: %s: auth is not base64: %w", key, err)
				}
				user, pass, ok := strings.Cut(string(raw), ":")
				if !ok {
					return nil, fmt.Errorf("the docker config: %s: auth is not base64 of user:password", key)
				}
				c.Username, c.Password = user, pass
			}
			if c == auth.EmptyCredential {
				continue
			}
			creds[host] = c
		}
	}
	return func(_ context.Context, hostport string) (auth.Credential, error) {
		if c, ok := creds[hostport]; ok {
			return c, nil
		}
		return auth.EmptyCredential, nil
	}, nil
}

// registryHost is a Docker config key's host[:port].
func registryHost(key string) string {
	if strings.Contains(key, "://") {
		u, err := url.Parse(key)
		if err != nil {
			return ""
		}
		return u.Host
	}
	host, _, _ := strings.Cut(key, "/")
	return host
}
