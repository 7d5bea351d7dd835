// Package registry runs a real OCI registry for tests: the CNCF
// Distribution registry that `make registry` builds into bin/registry
// (hack/registry), serving plain HTTP on a free 127.0.0.1 port with its
// storage in a directory the test owns.
//
// A missing binary is an error that says to run `make registry`, never a
// reason to skip: a test that needs the registry fails without it.
package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvBinary names the registry binary, overriding <module root>/bin/registry.
const EnvBinary = "MACRACK_REGISTRY_BIN"

const modulePath = "github.com/boualleiguie/macrack-operator"

// startTimeout bounds how long a registry may take to answer GET /v2/.
const startTimeout = 30 * time.Second

// Options tune a registry; the zero value is an open registry.
type Options struct {
	// Htpasswd is an htpasswd file (bcrypt entries): the registry then
	// requires basic auth of one of its users.
	Htpasswd string
	// Log, if set, gets the registry's output too (make run's
	// bin/logs/registry.log).
	Log io.Writer
}

// Server is a running registry.
type Server struct {
	bin, root string
	opts      Options
	host      string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *tailBuffer
}

// Binary returns the registry binary's path: $MACRACK_REGISTRY_BIN, else
// bin/registry under the module's root (found by walking up from the
// working directory to the project's go.mod). It is an error, saying to run
// `make registry`, if the binary is not there.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("the registry binary %s (from $%s): %w; run `make registry`", p, EnvBinary, err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", "registry")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("the registry binary %s is missing: run `make registry` (or set $%s)", p, EnvBinary)
		}
		return "", fmt.Errorf("the registry binary %s: %w; run `make registry`", p, err)
	}
	return p, nil
}

// moduleRoot walks up from the working directory to the go.mod of the
// project's module (not hack/registry's or another nested module's).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isProjectGoMod(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory; set $%s to the registry binary (`make registry` builds bin/registry)", modulePath, EnvBinary)
		}
		dir = parent
	}
}

func isProjectGoMod(b []byte) bool {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == modulePath {
			return true
		}
	}
	return false
}

// Start runs a registry that stores its blobs under root (created if need
// be) on a free 127.0.0.1 port, and returns once GET /v2/ answers 200.
func Start(root string) (*Server, error) {
	return StartWith(root, Options{})
}

// StartWith is Start with options. With Options.Htpasswd it returns once
// GET /v2/ answers 401 (the registry asks for credentials).
func StartWith(root string, o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	if o.Htpasswd != "" {
		if o.Htpasswd, err = filepath.Abs(o.Htpasswd); err != nil {
			return nil, err
		}
	}
	s := &Server{bin: bin, root: abs, opts: o}
	if err := s.start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return s, nil
}

// StartT is Start for a test: the registry stores under a t.TempDir(), a
// failure to start fails the test, and the registry stops with the test.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start(t.TempDir())
	if err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Host is the registry's "127.0.0.1:port", which a reference starts with.
func (s *Server) Host() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.host
}

// Root is the storage directory. A blob's bytes are in
// Root()/docker/registry/v2/blobs/sha256/<first two hex>/<hex>/data.
func (s *Server) Root() string { return s.root }

// BlobPath is where the registry stores the blob of digest d
// ("sha256:<hex>").
func (s *Server) BlobPath(d string) string {
	algo, hex, _ := strings.Cut(d, ":")
	if len(hex) < 2 {
		return ""
	}
	return filepath.Join(s.root, "docker", "registry", "v2", "blobs", algo, hex[:2], hex, "data")
}

// Logs is the tail of the registry's output.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// Stop stops the registry (SIGTERM, then SIGKILL after 5s) and waits for it.
// Stopping a stopped registry does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart stops the registry and starts it again on the same port with the
// same storage: for a test where the registry goes away mid-pull and comes
// back.
func (s *Server) Restart() error {
	s.Stop()
	return s.start(s.Host())
}

func (s *Server) start(addr string) error {
	dir, err := os.MkdirTemp("", "macrack-registry-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addrFile := filepath.Join(dir, "addr")
	logs := &tailBuffer{max: 64 << 10}
	args := []string{"-addr", addr, "-root", s.root, "-addr-file", addrFile}
	ready := http.StatusOK
	if s.opts.Htpasswd != "" {
		args = append(args, "-htpasswd", s.opts.Htpasswd)
		ready = http.StatusUnauthorized
	}
	cmd := exec.Command(s.bin, args...)
	var out io.Writer = logs
	if s.opts.Log != nil {
		out = io.MultiWriter(logs, s.opts.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.logs = cmd, exited, logs
	s.mu.Unlock()

	fail := func(format string, args ...any) error {
		s.Stop()
		return fmt.Errorf("the registry on %s (root %s): %s\nits output:\n%s", addr, s.root, fmt.Sprintf(format, args...), logs.String())
	}
	deadline := time.Now().Add(startTimeout)
	var host string
	for host == "" {
		if b, err := os.ReadFile(addrFile); err == nil {
			host = strings.TrimSpace(string(b))
			break
		}
		select {
		case <-exited:
			return fail("it exited before listening: %v", waitErr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail("it did not listen within %s", startTimeout)
		}
	}
	s.mu.Lock()
	s.host = host
	s.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/v2/", nil)
		resp, err := client.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == ready {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		select {
		case <-exited:
			return fail("it exited: %v", waitErr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail("GET /v2/ did not answer %d within %s: %v", ready, startTimeout, err)
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
