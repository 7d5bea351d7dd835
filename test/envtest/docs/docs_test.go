// Package docs runs the guides (test/docs.Pages) as written against a
// `make run` cluster of three simulated minis: every run block, in page
// order, as its identity, failing on an exit status the page does not
// show or on output that no longer matches the page. Then it tries, as the
// tenant, what the tenant's role must refuse.
package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/test/docs"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	// fleetSize is the cluster's minis: the tenant guide's two leases take
	// two, and the platform guide's quarantine walk-through a third.
	fleetSize = 3
	// readyTimeout bounds devcluster's start, blockTimeout one block.
	readyTimeout = 4 * time.Minute
	blockTimeout = 4 * time.Minute
)

func TestTheGuidesRunAsWritten(t *testing.T) {
	root := harness.RepoRoot()
	type page struct {
		path   string
		blocks []docs.Block
	}
	var pages []page
	reviewer := false
	for _, p := range docs.Pages {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := docs.Parse(data)
		if err != nil {
			t.Fatalf("%s:\n%v", p, err)
		}
		for _, b := range blocks {
			reviewer = reviewer || b.As == docs.AsReviewer
		}
		pages = append(pages, page{p, blocks})
	}

	start := time.Now()
	w := layout(t, root)
	t.Logf("built the binaries in %s", time.Since(start).Round(time.Second))
	ready := time.Now()
	startDevcluster(t, w)
	t.Logf("devcluster ready in %s", time.Since(ready).Round(time.Second))

	clone := ""
	if reviewer {
		clone = filepath.Join(t.TempDir(), "clone")
		if out, err := exec.Command("git", "clone", "-q", root, clone).CombinedOutput(); err != nil {
			t.Fatalf("cloning for the reviewer: %v: %s", err, out)
		}
		copyPinnedTools(t, filepath.Join(root, "bin"), filepath.Join(clone, "bin"))
	}
	sh := newShell(t, w, clone)
	run := time.Now()
	for _, p := range pages {
		for _, b := range p.blocks {
			if !b.Run {
				continue
			}
			began := time.Now()
			out, code, err := sh.run(b)
			where := fmt.Sprintf("%s:%d (as %s)", p.path, b.Line, b.As)
			if err != nil {
				t.Fatalf("%s: %v\n%s", where, err, out)
			}
			if code != b.Exit {
				t.Fatalf("%s: exit status %d, the page shows %d\n--- block\n%s\n--- output\n%s", where, code, b.Exit, b.Body, out)
			}
			if b.HasOutput {
				if err := docs.Match(b.Output, out); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
			}
			t.Logf("%s: ok in %s", where, time.Since(began).Round(100*time.Millisecond))
		}
	}
	t.Logf("the pages ran in %s", time.Since(run).Round(time.Second))

	t.Run("the tenant's role refuses", func(t *testing.T) { tenantRefusals(t, sh) })
	t.Run("the terminal shows the banner and the status line, nothing else", func(t *testing.T) {
		quietTerminal(t, filepath.Join(w.dir, "devcluster.log"))
	})
}

// bannerEnd is the banner's last words.
const bannerEnd = "Press Ctrl-C to stop everything."

// statusLine is a plain (not a terminal's) status line: its time, then the
// fleet.
var statusLine = regexp.MustCompile(`^[0-9]{2}:[0-9]{2}:[0-9]{2} chassis [0-9]+ Ready, `)

// quietTerminal checks what make run printed through the pages: after the
// banner, status lines only. The walk-through needs no person, so an error
// above the status line would be noise (a conflict or a deleted object that
// a retry resolves, a refusal the page asks for), and noise scrolls the
// banner away.
func quietTerminal(t *testing.T, logPath string) {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), bannerEnd)
	if !ok {
		t.Fatalf("no banner ending %q in make run's output:\n%s", bannerEnd, tail(string(b), 40))
	}
	statuses := 0
	var other []string
	for _, line := range strings.Split(after, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
		case statusLine.MatchString(line):
			statuses++
		default:
			other = append(other, line)
		}
	}
	if len(other) > 0 {
		t.Errorf("make run printed %d lines besides its status line through the pages:\n%s", len(other), strings.Join(other, "\n"))
	}
	if statuses == 0 {
		t.Errorf("make run printed no status line after its banner:\n%s", tail(after, 20))
	}
}

// pinnedTool is a tool the Makefile builds at a pinned version, named for
// it (bin/opa-v1.22.3).
var pinnedTool = regexp.MustCompile(`-v[0-9]+\.[0-9]+\.[0-9]+$`)

// copyPinnedTools gives the reviewer's clone the pinned tools this tree
// has built, so that its `make tools` finds them current instead of
// compiling five tools again: the same versions, from the same pins. They
// are copied after the clone, so make sees them newer than its go.mod (a
// link would keep the old time, and make would build through it).
func copyPinnedTools(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !pinnedTool.MatchString(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// workspace is the directory the blocks run in: a repository root as
// `make run` leaves it, with this test's binaries and kubeconfigs in bin/.
type workspace struct {
	dir, bin string
}

// layout builds the project's binaries into a fresh bin/ beside the
// control plane, the registry and nats-server of the repository's bin/, so
// that the test writes no kubeconfig over a developer's `make run`.
func layout(t *testing.T, root string) workspace {
	t.Helper()
	w := workspace{dir: t.TempDir()}
	w.bin = filepath.Join(w.dir, "bin")
	if err := os.Mkdir(w.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, need := range []string{filepath.Join(assets, "kube-apiserver"), filepath.Join(assets, "etcd"), filepath.Join(assets, "kubectl"),
		filepath.Join(root, "bin", "registry"), filepath.Join(root, "bin", "nats-server")} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("%v: %v (make controlplane registry nats)", harness.ErrNoControlPlane, err)
		}
	}
	links := map[string]string{
		filepath.Join(w.bin, "k8s"):         assets,
		filepath.Join(w.bin, "registry"):    filepath.Join(root, "bin", "registry"),
		filepath.Join(w.bin, "nats-server"): filepath.Join(root, "bin", "nats-server"),
		filepath.Join(w.dir, "config"):      filepath.Join(root, "config"),
	}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	// The binaries make run runs (simfleet only past 8 minis) and the
	// pages' macrackctl, linked without symbols as make test links.
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", w.bin+"/",
		"./cmd/operator", "./cmd/agent", "./cmd/vm-helper", "./cmd/macrackctl", "./hack/devcluster")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	return w
}

// startDevcluster runs `make run`'s devcluster with a small fleet until it
// says it is ready, and stops it, and everything it started, at the end.
func startDevcluster(t *testing.T, w workspace) {
	t.Helper()
	logPath := filepath.Join(w.dir, "devcluster.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(w.bin, "devcluster"), "--root", w.dir, "--fleet", fmt.Sprint(fleetSize))
	cmd.Dir, cmd.Stdout, cmd.Stderr = w.dir, log, log
	// The registry is found by the go.mod above the working directory,
	// which the workspace has not.
	cmd.Env = append(os.Environ(), "MACRACK_REGISTRY_BIN="+filepath.Join(w.bin, "registry"))
	cmd.SysProcAttr = procAttr(false, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// devcluster stops its children in order on SIGTERM.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("devcluster's log (tail):\n%s", tail(string(b), 60))
			}
		}
	})
	deadline := time.After(readyTimeout)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, []byte("devcluster: ready")) {
			banner := string(b)
			// The banner names both identities and the PATH the page's
			// commands need.
			for _, want := range []string{
				"export KUBECONFIG=" + filepath.Join(w.bin, "kubeconfig"),
				"export KUBECONFIG=" + filepath.Join(w.bin, "tenant.kubeconfig"),
				"export PATH=" + w.bin + ":" + filepath.Join(w.bin, "k8s") + ":$PATH",
			} {
				if !strings.Contains(banner, want) {
					t.Fatalf("the banner does not say %q:\n%s", want, tail(banner, 40))
				}
			}
			return
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("devcluster exited before it was ready: %v\n%s", err, tail(string(b), 60))
		case <-deadline:
			t.Fatalf("devcluster was not ready within %s\n%s", readyTimeout, tail(string(b), 60))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// shell runs blocks with bash, one process each, carrying the variables a
// block sets (GITLAB=...) to the next, as one terminal would.
type shell struct {
	w          workspace
	clone      string
	home, path string
	// goEnv is the Go setup the reviewer's go commands share with this
	// test's: a fresh HOME would otherwise mean an empty build cache.
	goEnv []string
	state string
}

func newShell(t *testing.T, w workspace, clone string) *shell {
	t.Helper()
	// A fresh user's home: an SSH key of their own (the page cats it),
	// and ssh answering "yes" to the VM's host key, as the user would.
	home := filepath.Join(w.dir, "home")
	sshDir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dev@my-team", "-f", filepath.Join(sshDir, "id_ed25519")).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	cfg := fmt.Sprintf("Host *\n  IdentityFile %s\n  UserKnownHostsFile %s\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n",
		filepath.Join(sshDir, "id_ed25519"), filepath.Join(sshDir, "known_hosts"))
	if err := os.WriteFile(filepath.Join(sshDir, "config"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// OpenSSH finds ~/.ssh through the password database, not $HOME: a
	// wrapper first on PATH points it at this home's configuration.
	sshPath, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatalf("the page runs ssh: %v", err)
	}
	tools := filepath.Join(w.dir, "user-bin")
	if err := os.Mkdir(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\nexec " + sshPath + " -F \"$HOME/.ssh/config\" \"$@\"\n"
	if err := os.WriteFile(filepath.Join(tools, "ssh"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return &shell{
		w: w, clone: clone, home: home, goEnv: goEnv(t),
		path:  tools + ":" + w.bin + ":" + filepath.Join(w.bin, "k8s") + ":" + os.Getenv("PATH"),
		state: filepath.Join(w.dir, "shell-state"),
	}
}

// goEnv is this process's Go settings, as the go command resolves them.
func goEnv(t *testing.T) []string {
	t.Helper()
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN", "GONOSUMDB", "GOPRIVATE"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var env []string
	for i, v := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if i < len(names) && v != "" {
			env = append(env, names[i]+"="+v)
		}
	}
	return env
}

// prologue restores the variables earlier blocks set and saves the
// block's on exit. -e and pipefail: a block fails at its first failing
// command, as a reader would stop there.
const prologue = `set -a
[ ! -f "$DOCS_STATE" ] || . "$DOCS_STATE"
set +a
export KUBECONFIG="$DOCS_KUBECONFIG"
save() {
  for v in $(compgen -e); do
    case $v in PWD|OLDPWD|SHLVL|_|HOME|PATH|KUBECONFIG|DOCS_*) ;; *) declare -p "$v" ;; esac
  done > "$DOCS_STATE"
}
trap save EXIT
set -a -e -o pipefail
`

// run runs a block as its identity; it returns the block's output (standard
// output and error, interleaved) and its exit status.
func (s *shell) run(b docs.Block) (string, int, error) {
	dir, kubeconfig := s.w.dir, ""
	switch b.As {
	case docs.AsTenant:
		kubeconfig = filepath.Join(s.w.bin, "tenant.kubeconfig")
	case docs.AsAdmin:
		kubeconfig = filepath.Join(s.w.bin, "kubeconfig")
	case docs.AsReviewer:
		// No cluster: a kubeconfig that names none.
		dir, kubeconfig = s.clone, os.DevNull
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	out, err := os.CreateTemp("", "docs-block-")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, "bash", "-c", prologue+b.Body+"\n")
	cmd.Dir = dir
	path := s.path
	if b.As == docs.AsReviewer {
		// The page's commands run with the clone's bin/ first on PATH.
		path = filepath.Join(s.clone, "bin") + ":" + path
	}
	cmd.Env = append([]string{
		"HOME=" + s.home, "PATH=" + path, "LANG=C.UTF-8", "TERM=dumb",
		"DOCS_STATE=" + s.state, "DOCS_KUBECONFIG=" + kubeconfig,
	}, s.goEnv...)
	// A file, not a pipe: a command the block leaves in the background
	// (kubectl port-forward &) must not hold the block open.
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, which ends with the block: what it left in
	// the background goes with it.
	cmd.SysProcAttr = procAttr(true, syscall.SIGKILL)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	data, _ := os.ReadFile(out.Name())
	if ctx.Err() != nil {
		return string(data), -1, fmt.Errorf("still running after %s", blockTimeout)
	}
	var exit *exec.ExitError
	if errors.As(runErr, &exit) {
		return string(data), exit.ExitCode(), nil
	}
	return string(data), 0, runErr
}

// tenantRefusals tries, as the tenant, what its role must not allow, each
// beside a positive control that the same kind of request is allowed where
// it should be: an attacker holding the tenant's credentials.
func tenantRefusals(t *testing.T, s *shell) {
	tenant := docs.Block{As: docs.AsTenant}
	try := func(t *testing.T, script string) (string, int) {
		t.Helper()
		tenant.Body = script
		out, code, err := s.run(tenant)
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return out, code
	}
	for _, c := range []struct {
		name  string
		allow []string // kubectl auth can-i arguments that must be yes
		deny  []string // ... that must be no
	}{
		{"the fleet: leases, yes; MacNodes and Nodes, which name other tenants, no",
			[]string{"get macnodeleases", "list macnodeclasses", "list macosimages"},
			[]string{"list macnodes", "get macnodes", "list nodes", "create nodes --subresource=proxy", "create macnodeclasses", "delete macosimages"}},
		{"other namespaces",
			[]string{"create macosinstances -n my-team"},
			[]string{"list macnodeleases -n default", "create macosinstances -n macrack-system", "list pods -n macrack-agents", "list events -n default"}},
		{"status is the operator's and the agents'",
			[]string{"update macnodeleases", "patch macosinstances"},
			[]string{"update macnodeleases --subresource=status", "patch macosinstances --subresource=status", "update gitlabrunners --subresource=status", "update pods --subresource=status"}},
		{"secrets: the runner's token by name, create; nothing else",
			[]string{"get secrets/gitlab-runner-token", "create secrets"},
			[]string{"list secrets", "get secrets/other", "watch secrets", "update secrets/gitlab-runner-token", "delete secrets/gitlab-runner-token", "get secrets/gitlab-runner-token -n default"}},
		{"RBAC: create and get, never escalate or bind, never change what the platform bound",
			[]string{"create rolebindings", "create roles", "get rolebindings/macrack-tenant-edit"},
			[]string{"escalate roles", "bind clusterroles", "bind roles", "escalate clusterroles", "delete rolebindings/macrack-tenant-edit",
				"update rolebindings/macrack-tenant-edit", "create clusterrolebindings", "create rolebindings -n default", "impersonate users"}},
		{"no pods of its own, no tokens for its ServiceAccounts",
			[]string{"create pods --subresource=exec", "get pods --subresource=log"},
			[]string{"create pods", "delete pods", "create serviceaccounts --subresource=token", "create pods --subresource=eviction"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, a := range c.allow {
				if out, code := try(t, "kubectl auth can-i "+a); code != 0 {
					t.Errorf("the tenant may not %s (positive control): %s", a, out)
				}
			}
			for _, d := range c.deny {
				if out, code := try(t, "kubectl auth can-i "+d); code == 0 {
					t.Errorf("the tenant may %s: %s", d, out)
				}
			}
		})
	}

	// Escalation through the RBAC it may create: binding a role it does
	// not hold is refused by the API server, binding one it holds is not.
	// The roles are ones with rules here: make run's kube-controller-manager
	// does not aggregate, so admin and edit are empty, and their parts
	// (system:aggregate-to-*) are what they would hold.
	t.Run("it binds only what it holds", func(t *testing.T) {
		if out, code := try(t, "kubectl create rolebinding attacker-ok --clusterrole=macrack-tenant-view --user=mallory"); code != 0 {
			t.Fatalf("binding a role the tenant holds (positive control): %s", out)
		}
		for _, role := range []string{"system:aggregate-to-admin", "system:aggregate-to-edit", "macrack-agent", "cluster-admin"} {
			out, code := try(t, "kubectl create rolebinding attacker-"+strings.ReplaceAll(role, ":", "-")+" --clusterrole="+role+" --user=mallory")
			if code == 0 || !strings.Contains(out, "forbidden") {
				t.Errorf("the tenant bound %s in its namespace: %s", role, out)
			}
		}
		out, code := try(t, "kubectl create role attacker-secrets --verb=get,list --resource=secrets")
		if code == 0 || !strings.Contains(out, "forbidden") {
			t.Errorf("the tenant made a role that reads every Secret: %s", out)
		}
		out, code = try(t, "kubectl create role attacker-token -n default --verb=get --resource=secrets --resource-name=gitlab-runner-token")
		if code == 0 || !strings.Contains(out, "forbidden") {
			t.Errorf("the tenant made a role in another namespace: %s", out)
		}
	})
}
