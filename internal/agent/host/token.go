package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// MaxTokenTTL is the longest token agent.scope lets an agent request for
// itself.
const MaxTokenTTL = 24 * time.Hour

// ServiceAccountName is the agent's ServiceAccount for a node.
func ServiceAccountName(nodeName string) string {
	return fleetv1alpha1.AgentServiceAccountPrefix + nodeName
}

// TokenRenewer renews the agent's own token with TokenRequest, for itself
// only (agent.scope), and writes it where the client reads its bearer token
// from: client-go re-reads a token file, so the agent never restarts to
// pick up a new token.
type TokenRenewer struct {
	Client    client.Client
	Namespace string
	NodeName  string
	File      string
	TTL       time.Duration
	Clock     clock.Clock
	Log       logr.Logger
}

// Run renews at half the token's life until ctx ends.
func (t *TokenRenewer) Run(ctx context.Context) error {
	for {
		if err := t.Renew(ctx); err != nil {
			t.Log.Error(err, "Token renewal failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.Clock.After(t.TTL / 2):
		}
	}
}

// Renew requests one token and writes it atomically.
func (t *TokenRenewer) Renew(ctx context.Context) error {
	sa := &corev1.ServiceAccount{}
	sa.Namespace, sa.Name = t.Namespace, ServiceAccountName(t.NodeName)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(t.TTL / time.Second))}}
	if err := t.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return fmt.Errorf("requesting a token for %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	tmp := t.File + ".tmp"
	if err := os.MkdirAll(filepath.Dir(t.File), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
		return fmt.Errorf("writing token: %w", err)
	}
	if err := os.Rename(tmp, t.File); err != nil {
		return fmt.Errorf("writing token: %w", err)
	}
	t.Log.Info("Token renewed", "expiresAt", tr.Status.ExpirationTimestamp.UTC())
	return nil
}
