package kubelet

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// The kubelet's defaults for its webhook authentication and authorization
// (KubeletConfiguration authentication.webhook.cacheTTL,
// authorization.webhook.cacheAuthorizedTTL and cacheUnauthorizedTTL), and
// the API server's retry backoff for both webhooks.
const (
	tokenCacheTTL    = 2 * time.Minute
	tokenReviewLimit = 10 * time.Second
	allowCacheTTL    = 5 * time.Minute
	denyCacheTTL     = 30 * time.Second
)

func webhookBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// delegatingAuth builds the kubelet's authentication and authorization:
// x509 client certificates verified against the CA bundle in
// s.ClientCAFile (its provider is returned, for Run to reload it and to
// name its CAs in the TLS handshake), bearer tokens checked by
// TokenReview, and every decision asked of the API server by
// SubjectAccessReview. Nothing is anonymous.
func (s *Server) delegatingAuth() (authenticator.Request, authorizer.UnconditionalAuthorizer, *dynamiccertificates.DynamicFileCAContent, error) {
	authn, authz := s.Authenticator, s.Authorizer
	var ca *dynamiccertificates.DynamicFileCAContent
	if authn == nil {
		cfg := authenticatorfactory.DelegatingAuthenticatorConfig{
			CacheTTL:                 tokenCacheTTL,
			TokenAccessReviewTimeout: tokenReviewLimit,
			WebhookRetryBackoff:      webhookBackoff(),
		}
		if s.ClientCAFile != "" {
			var err error
			if ca, err = dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", s.ClientCAFile); err != nil {
				return nil, nil, nil, fmt.Errorf("loading the client CA bundle: %w", err)
			}
			cfg.ClientCertificateCAContentProvider = ca
		}
		if s.Reviews != nil {
			cfg.TokenAccessReviewClient = s.Reviews.AuthenticationV1()
		}
		if cfg.ClientCertificateCAContentProvider == nil && cfg.TokenAccessReviewClient == nil {
			return nil, nil, nil, errors.New("no authentication: the kubelet API needs ClientCAFile, Reviews (for TokenReviews), or both")
		}
		var err error
		if authn, _, err = cfg.New(); err != nil {
			return nil, nil, nil, fmt.Errorf("building the authenticator: %w", err)
		}
	}
	if authz == nil {
		if s.Reviews == nil {
			return nil, nil, nil, errors.New("no authorization: the kubelet API needs Reviews, for SubjectAccessReviews")
		}
		var err error
		authz, err = authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: s.Reviews.AuthorizationV1(),
			AllowCacheTTL:             allowCacheTTL,
			DenyCacheTTL:              denyCacheTTL,
			WebhookRetryBackoff:       webhookBackoff(),
		}.New()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("building the authorizer: %w", err)
		}
	}
	return authn, authz, ca, nil
}

// streamingPaths are the kubelet API's paths that open a session in a
// container: whatever their method, they need create.
var streamingPaths = []string{"/exec", "/attach", "/portForward", "/run"}

// requestAttributes are the authorization attributes of a request to
// node's kubelet API, as the kubelet builds them (resource nodes, name the
// node, the subresource from the path, the verb from the method), with one
// difference: a streaming path needs create whatever the method. A
// WebSocket upgrade is a GET, and a kubelet that asked for get let anyone
// with nodes/proxy get run commands (kubernetes#133515).
func requestAttributes(node string, u user.Info, r *http.Request) authorizer.AttributesRecord {
	path := r.URL.Path
	verb := ""
	switch r.Method {
	case http.MethodGet:
		verb = "get"
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	for _, p := range streamingPaths {
		if isSubpath(path, p) {
			verb = "create"
		}
	}
	subresource := "proxy"
	switch {
	case isSubpath(path, "/stats"):
		subresource = "stats"
	case isSubpath(path, "/metrics"):
		subresource = "metrics"
	case isSubpath(path, "/logs"):
		subresource = "log"
	case isSubpath(path, "/spec"):
		subresource = "spec"
	}
	return authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		APIVersion:      "v1",
		Resource:        "nodes",
		Subresource:     subresource,
		Name:            node,
		ResourceRequest: true,
		Path:            path,
	}
}

// isSubpath reports whether subpath is path or below it.
func isSubpath(subpath, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}

// withAuth authenticates every request (401 without a valid identity),
// authorizes it by its attributes (403 saying what it lacked), logs the
// decision, and only then lets next route it.
func (s *Server) withAuth(authn authenticator.Request, authz authorizer.UnconditionalAuthorizer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := s.Log.WithValues("path", r.URL.Path)
		if isSubpath(r.URL.Path, "/exec") {
			// The command may hold secrets: its argv[0] at most.
			log = log.WithValues("command", argv0(r))
		}
		resp, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				log = log.WithValues("error", err.Error())
			}
			log.Info("Kubelet API request", "decision", "unauthenticated", "method", r.Method)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := requestAttributes(s.NodeName, resp.User, r)
		log = log.WithValues("user", attrs.User.GetName(), "verb", attrs.Verb)
		decision, reason, err := authz.Authorize(r.Context(), attrs)
		switch {
		case err != nil:
			log.Error(err, "Kubelet API request", "decision", "error")
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
				attrs.User.GetName(), attrs.Verb, attrs.Resource, attrs.Subresource), http.StatusInternalServerError)
			return
		case decision != authorizer.DecisionAllow:
			log.Info("Kubelet API request", "decision", "forbidden", "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource=%s)",
				attrs.User.GetName(), attrs.Verb, attrs.Resource, attrs.Subresource), http.StatusForbidden)
			return
		}
		allowed := log
		if r.URL.Path == "/healthz" {
			// Health checks come often: logged only at a higher verbosity.
			allowed = log.V(1)
		}
		allowed.Info("Kubelet API request", "decision", "allowed")
		next.ServeHTTP(w, r.WithContext(logr.NewContext(r.Context(), log)))
	})
}

// argv0 is the first command= of an exec request, cut short.
func argv0(r *http.Request) string {
	cmd := r.URL.Query().Get("command")
	if len(cmd) > 64 {
		cmd = strings.ToValidUTF8(cmd[:64], "") + "…"
	}
	return cmd
}
