package gitlabrunner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// GitLab is what the controller asks of a GitLab: to verify the runner
// token for a manager (a pool slot's system_id), and to unregister one.
type GitLab interface {
	VerifyRunner(ctx context.Context, token, systemID string) error
	UnregisterManager(ctx context.Context, token, systemID string) error
}

// GitLabFactory connects to the GitLab at url, trusting caBundle's PEM
// roots beside the system's.
type GitLabFactory func(url string, caBundle []byte) (GitLab, error)

// NewGitLab is the production GitLabFactory.
func NewGitLab(u string, caBundle []byte) (GitLab, error) {
	c, err := gitlab.New(u, gitlab.Options{CABundle: caBundle, Timeout: 30 * time.Second, UserAgent: "macrack-operator"})
	if err != nil {
		return nil, err
	}
	return gitlabClient{c}, nil
}

type gitlabClient struct{ c *gitlab.Client }

func (g gitlabClient) VerifyRunner(ctx context.Context, token, systemID string) error {
	_, err := g.c.VerifyRunner(ctx, token, systemID)
	return err
}

func (g gitlabClient) UnregisterManager(ctx context.Context, token, systemID string) error {
	return g.c.UnregisterManager(ctx, token, systemID)
}

// SystemID is a pool slot's stable runner-manager id: gitlab-runner's
// "s_" and twelve hex digits, derived from the runner's UID and the slot,
// so that it survives the VMs that fill the slot and the operator's
// restarts, and differs between runners that share a token.
func SystemID(runnerUID string, slot int32) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", runnerUID, slot))
	return "s_" + hex.EncodeToString(sum[:6])
}

// hostAllowed says whether u's host is one of allowed: exact, or a
// "*.example.com" suffix. Any host when allowed is empty.
func hostAllowed(u string, allowed []string) bool {
	if len(allowed) == 0 {
		return true
	}
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	host := strings.ToLower(p.Hostname())
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		if suffix, ok := strings.CutPrefix(a, "*"); ok && strings.HasPrefix(suffix, ".") {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == a {
			return true
		}
	}
	return false
}

// verification is what the controller remembers of a runner's last
// successful verification: the token's digest, never the token.
type verification struct {
	digest [32]byte
	at     time.Time
	// managers are the system_ids GitLab accepted with that token.
	managers map[string]bool
}

func tokenDigest(token string) [32]byte { return sha256.Sum256([]byte(token)) }
