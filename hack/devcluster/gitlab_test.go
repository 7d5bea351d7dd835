package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

// decodeManifest decodes every document of a manifest strictly: a field
// the kinds do not have fails the test.
func decodeManifest(t *testing.T, data []byte) []runtime.Object {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		objs = append(objs, obj)
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// startTestGitLab starts the fake GitLab with its log in a scratch bin/logs.
func startTestGitLab(t *testing.T) (*fakeGitLab, *logFiles, error) {
	t.Helper()
	bin := t.TempDir()
	logs, err := newLogFiles(bin)
	if err != nil {
		t.Fatal(err)
	}
	g, err := startGitLab(bin, logs)
	return g, logs, err
}

func TestTheDemoManifestRunsARunnerAgainstTheFakeGitLab(t *testing.T) {
	g, logs, err := startTestGitLab(t)
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	data, err := os.ReadFile(g.manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(g.manifestPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the manifest holds the token: want mode 0600, got %v %v", fi.Mode(), err)
	}
	objs := decodeManifest(t, data)
	if len(objs) != 2 {
		t.Fatalf("want the Secret and the runner, got %d objects", len(objs))
	}
	secret, ok1 := objs[0].(*corev1.Secret)
	runner, ok2 := objs[1].(*workloadsv1alpha1.GitLabRunner)
	if !ok1 || !ok2 {
		t.Fatalf("kinds %T %T", objs[0], objs[1])
	}
	// The tenant applies it: in the tenant's namespace, and no RBAC of its
	// own (the guide's step 1 makes the runner's identity, as the tenant).
	for _, o := range []interface{ GetNamespace() string }{secret, runner} {
		if o.GetNamespace() != tenantNamespace {
			t.Fatalf("%T in namespace %q, want %q", o, o.GetNamespace(), tenantNamespace)
		}
	}
	if secret.Name != demoTokenSecret {
		t.Fatalf("the Secret is %s, the guide names %s", secret.Name, demoTokenSecret)
	}
	s := runner.Spec
	if s.LeaseName != demoLease || s.ImageName != simGoldenName || s.Concurrency != 2 || s.GitLab.URL != g.srv.URL() ||
		s.GitLab.TokenSecretRef.Name != secret.Name || strings.TrimSpace(s.GitLab.CABundle) != strings.TrimSpace(string(g.srv.CABundle())) {
		t.Fatalf("runner %+v", s)
	}

	// The token and the CA bundle file reach the fake, as the runner's
	// controller and its guests will; a wrong token does not.
	ca, err := os.ReadFile(g.caPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gitlab.New(s.GitLab.URL, gitlab.Options{CABundle: ca})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.VerifyRunner(ctx, secret.StringData["token"], "s_demo"); err != nil {
		t.Fatalf("the manifest's token: %v", err)
	}
	if _, err := c.VerifyRunner(ctx, "glrt-wrong", "s_demo"); !errors.Is(err, gitlab.ErrForbidden) {
		t.Fatalf("a wrong token: want forbidden, got %v", err)
	}

	// The job the printed curl line queues is one the fake takes.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Post(g.srv.URL()+"/-/fake/jobs", "", strings.NewReader(demoJob))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("queueing the printed job: %d", resp.StatusCode)
	}
	if jobs := g.srv.Jobs(); len(jobs) != 1 || jobs[0].ID != firstJobID {
		t.Fatalf("the hint reads the trace of job %d: %+v", firstJobID, jobs)
	}
	if h := g.hint(); !strings.Contains(h, g.caPath) || !strings.Contains(h, g.manifestPath) || strings.Contains(h, secret.StringData["token"]) {
		t.Fatalf("the hint names the CA file and the manifest, never the token:\n%s", h)
	}

	// The fake's log in bin/logs has each request, in MacRack's JSON
	// lines, and never the token, which travels in request bodies.
	log, err := os.ReadFile(logs.path("fake-gitlab"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"msg":"Request","method":"POST","path":"/-/fake/jobs","status":201`) {
		t.Errorf("the fake GitLab's log has no line for the queued job:\n%s", log)
	}
	if strings.Contains(string(log), secret.StringData["token"]) {
		t.Errorf("the fake GitLab's log holds the runner token:\n%s", log)
	}
}

// make run allows the operator the fake GitLab's host, the one the demo
// runner names.
func TestMakeRunAllowsTheFakeGitLabsHostOnly(t *testing.T) {
	g, _, err := startTestGitLab(t)
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	host, err := g.allowedHost()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.srv.URL(), "https://"+host+":") || host == "" {
		t.Fatalf("allowed host %q, fake GitLab at %s", host, g.srv.URL())
	}
}
