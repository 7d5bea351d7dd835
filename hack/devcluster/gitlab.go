package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"go.uber.org/zap/zapcore"

	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
	"github.com/boualleiguie/macrack-operator/internal/logging"
)

// The GitLabRunner demo of `make run`: a fake GitLab (the tests' own,
// internal/gitlab/gitlabtest, over TLS) with one runner token registered,
// and a manifest that runs a GitLabRunner against it in the namespace and
// lease of docs/tenant.md's walkthrough, which the tenant applies. Jobs are queued with curl through
// the fake's admin API (gitlabtest.AdminPrefix); the sim guests run them.
const (
	// demoNamespace is the walkthrough's namespace, the tenant's.
	demoNamespace = tenantNamespace
	// demoLease is config/samples' lease, which the walkthrough applies.
	demoLease  = "build-mini"
	demoRunner = "demo-ci"
	// demoTokenSecret is the Secret docs/tenant.md names.
	demoTokenSecret = "gitlab-runner-token"
	// demoTag is the runner's tag; it runs untagged jobs too.
	demoTag = "macos"
	// demoJob is the job the printed curl line queues: its output shows in
	// the trace, and its sleep long enough to see the VM Busy.
	demoJob = `{"name":"build","tags":["macos"],"script":["echo hello from a fresh VM","sleep 10","echo done"]}`
	// firstJobID is the fake's first job id.
	firstJobID = 1000
)

// fakeGitLab is the fake GitLab of `make run` and the files written for it.
type fakeGitLab struct {
	srv *gitlabtest.Server
	// caPath holds its CA bundle, for curl --cacert; manifestPath the
	// GitLabRunner demo.
	caPath, manifestPath string
	logFile              *os.File
}

// startGitLab starts the fake GitLab on a free loopback port (httptest
// listens on 127.0.0.1:0: the kernel picks it, so two clusters never
// collide), registers one runner token, and writes the fake's CA bundle and
// the demo manifest into bin. The token is in the manifest only, which only
// its owner may read; it is never printed.
func startGitLab(bin string, logs *logFiles) (*fakeGitLab, error) {
	token, err := newRunnerToken()
	if err != nil {
		return nil, err
	}
	logFile, err := logs.open("fake GitLab", "fake-gitlab", true)
	if err != nil {
		return nil, err
	}
	logOpts := logging.Options()
	logOpts.DestWriter = logFile
	// Its requests at V(1): the fake is a demo, and its log a place to look.
	logOpts.Level = zapcore.DebugLevel
	g := &fakeGitLab{
		logFile:      logFile,
		srv:          gitlabtest.NewServer(nil, gitlabtest.WithLogger(logging.New(logOpts).WithName("fake-gitlab"))),
		caPath:       filepath.Join(bin, "fake-gitlab-ca.pem"),
		manifestPath: filepath.Join(bin, "gitlabrunner-demo.yaml"),
	}
	g.srv.AddRunnerToken(token, gitlabtest.WithTags(demoTag))
	if err := os.WriteFile(g.caPath, g.srv.CABundle(), 0o644); err != nil {
		g.stop()
		return nil, fmt.Errorf("writing %s: %w", g.caPath, err)
	}
	manifest, err := demoManifest(g.srv.URL(), string(g.srv.CABundle()), token)
	if err != nil {
		g.stop()
		return nil, err
	}
	if err := os.WriteFile(g.manifestPath, manifest, 0o600); err != nil {
		g.stop()
		return nil, fmt.Errorf("writing %s: %w", g.manifestPath, err)
	}
	fmt.Printf("devcluster: fake GitLab serving at %s\n", g.srv.URL())
	return g, nil
}

// allowedHost is the host the operator may send runner tokens to in
// make run: the fake GitLab's, on loopback.
func (g *fakeGitLab) allowedHost() (string, error) {
	u, err := url.Parse(g.srv.URL())
	if err != nil {
		return "", fmt.Errorf("parsing the fake GitLab's URL: %w", err)
	}
	return u.Hostname(), nil
}

// stop closes the fake GitLab.
func (g *fakeGitLab) stop() {
	if g == nil {
		return
	}
	fmt.Println("devcluster: stopping the fake GitLab")
	g.srv.Close()
	_ = g.logFile.Close()
}

// hint is what `make run` prints about the demo: apply the manifest, queue
// a job, list the jobs, read a trace.
func (g *fakeGitLab) hint() string {
	curl := "curl -sS --cacert " + g.caPath + " "
	jobs := g.srv.URL() + gitlabtest.AdminPrefix + "jobs"
	trace := fmt.Sprintf("%s/%d/trace", jobs, firstJobID)
	return fmt.Sprintf(`    # GitLab CI jobs, each in a fresh VM, from the fake GitLab (docs/tenant.md, "Run CI jobs locally"):
    # the runner needs the lease %s Bound, with no VMs of yours in it, and its identity (GitLabRunner, step 1)
    kubectl apply -f %s
    kubectl get glr -w
    %s-X POST %s -d '%s'
    %s%-*s   # every job, its state
    %s%s   # the first job's trace
`, demoLease, g.manifestPath, curl, jobs, demoJob, curl, len(trace), jobs, curl, trace)
}

// newRunnerToken makes a runner authentication token, prefixed as
// GitLab's are.
func newRunnerToken() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a runner token: %w", err)
	}
	return "glrt-" + hex.EncodeToString(b), nil
}

// demoManifest is bin/gitlabrunner-demo.yaml: the token Secret and a
// GitLabRunner of concurrency 2 on the sim golden, trusting the fake's CA.
// The runner's identity is not in it: the tenant creates that with
// docs/tenant.md's own commands (GitLabRunner, step 1), as the tenant, so
// that the walkthrough runs the guide's setup under the tenant's role.
func demoManifest(url, caBundle, token string) ([]byte, error) {
	var b bytes.Buffer
	err := demoTemplate.Execute(&b, map[string]any{
		"Namespace": demoNamespace,
		"Lease":     demoLease,
		"Runner":    demoRunner,
		"Secret":    demoTokenSecret,
		"Token":     token,
		"Image":     simGoldenName,
		"Tag":       demoTag,
		"URL":       url,
		"CABundle":  strings.TrimRight(caBundle, "\n"),
	})
	if err != nil {
		return nil, fmt.Errorf("rendering the GitLabRunner demo: %w", err)
	}
	return b.Bytes(), nil
}

var demoTemplate = template.Must(template.New("demo").Funcs(template.FuncMap{
	"indent": func(n int, s string) string {
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
	},
}).Parse(`# The GitLabRunner demo of make run (docs/tenant.md, "Run CI jobs locally"):
# a runner in namespace {{.Namespace}}, on the lease {{.Lease}}, taking jobs from
# make run's fake GitLab at {{.URL}}.
# Written by make run for this run only: the fake's port and runner token
# change with every run. It holds the runner token.
#
# Apply it, as the tenant, once the lease is Bound, has no VMs of yours in
# it, and the runner's identity exists (docs/tenant.md, GitLabRunner, step 1).
---
apiVersion: v1
kind: Secret
metadata:
  name: {{.Secret}}
  namespace: {{.Namespace}}
stringData:
  token: {{.Token}}
---
apiVersion: workloads.macrack.io/v1alpha1
kind: GitLabRunner
metadata:
  name: {{.Runner}}
  namespace: {{.Namespace}}
spec:
  leaseName: {{.Lease}}
  imageName: {{.Image}}
  concurrency: 2
  template:
    cpu: 4
    memory: 8Gi
    disk: 200Gi
  gitlab:
    url: {{.URL}}
    tokenSecretRef:
      name: {{.Secret}}
    caBundle: |
{{indent 6 .CABundle}}
  tags: [{{.Tag}}]
  maxJobDuration: 30m
`))
