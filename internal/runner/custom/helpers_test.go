package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// waitLimit bounds every wait in these tests, so a hang fails, not stalls.
const waitLimit = 20 * time.Second

// runnerToken is the runner authentication token: in gitlab-runner's
// environment and the stages', never in a VM.
const runnerToken = "glrt-t1_customRUNNERsecret42"

// stageBinary is macrack-runner-stage, built once for the package's tests.
var stageBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stage-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stageBinary = filepath.Join(dir, "macrack-runner-stage")
	build := exec.Command("go", "build", "-o", stageBinary, "github.com/boualleiguie/macrack-operator/cmd/macrack-runner-stage")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building macrack-runner-stage:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bashVM is a ScriptRunner that runs each script for real, with
// /bin/bash reading it on stdin in a home directory of its own, and
// records the scripts it got.
type bashVM struct {
	home string

	mu       sync.Mutex
	scripts  []string
	canceled int
	// fail, when set, makes RunScript a system failure.
	fail     error
	cleanups int
}

func newBashVM(t *testing.T) *bashVM { return &bashVM{home: t.TempDir()} }

func (v *bashVM) RunScript(ctx context.Context, script io.Reader, out io.Writer) (int, error) {
	b, err := io.ReadAll(script)
	if err != nil {
		return -1, err
	}
	v.mu.Lock()
	v.scripts = append(v.scripts, string(b))
	fail := v.fail
	v.mu.Unlock()
	if fail != nil {
		return -1, fail
	}
	cmd := exec.Command("/bin/bash")
	cmd.Dir = v.home
	cmd.Env = []string{"HOME=" + v.home, "PATH=/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(b)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// The guest's shell and its children end with the job.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		v.mu.Lock()
		v.canceled++
		v.mu.Unlock()
		return -1, ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func (v *bashVM) Cleanup(context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cleanups++
	return nil
}

func (v *bashVM) cleanupCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cleanups
}

func (v *bashVM) got() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.scripts...)
}

func (v *bashVM) canceledRuns() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.canceled
}

// blockingProber is a VM whose probe waits for ctx: a VM that hangs.
type blockingProber struct{ *bashVM }

func (blockingProber) Probe(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// recordingProxy forwards a Unix socket to another and keeps every byte
// the stages sent, to show what reaches the agent's side.
type recordingProxy struct {
	socket string
	mu     sync.Mutex
	sent   bytes.Buffer
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "mrp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &recordingProxy{socket: filepath.Join(dir, "p")}
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.forward(c, target)
		}
	}()
	return p
}

func (p *recordingProxy) forward(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("unix", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		io.Copy(c, up)
		c.Close()
	}()
	io.Copy(io.MultiWriter(up, writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.sent.Write(b)
	})), c)
}

func (p *recordingProxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newServer serves vm on a stage socket for the test's length.
func newServer(t *testing.T, vm ScriptRunner) *StageServer {
	t.Helper()
	s, err := NewStageServer(vm, ServerOptions{Log: (&logBuffer{}).logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
