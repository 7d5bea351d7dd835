package access

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"

	"github.com/creack/pty"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// terminal is kubectl run on a pseudo-terminal, as a person at a shell
// runs it: -t then takes a real TTY, and a resize of the terminal reaches
// the guest.
type terminal struct {
	cmd  *exec.Cmd
	ptmx *os.File

	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func startTTY(kubeconfig string, args ...string) *terminal {
	GinkgoHelper()
	t := &terminal{cmd: exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...), done: make(chan struct{})}
	var err error
	t.ptmx, err = pty.StartWithSize(t.cmd, &pty.Winsize{Rows: 24, Cols: 80})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := t.ptmx.Read(buf)
			t.mu.Lock()
			t.out.Write(buf[:n])
			t.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		t.err = t.cmd.Wait()
		close(t.done)
	}()
	return t
}

func (t *terminal) Send(s string) {
	GinkgoHelper()
	_, err := t.ptmx.WriteString(s)
	Expect(err).NotTo(HaveOccurred())
}

func (t *terminal) Resize(rows, cols uint16) {
	GinkgoHelper()
	Expect(pty.Setsize(t.ptmx, &pty.Winsize{Rows: rows, Cols: cols})).To(Succeed())
}

func (t *terminal) Output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.String()
}

func (t *terminal) Exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Code is kubectl's exit code, once it exited.
func (t *terminal) Code() int {
	<-t.done
	var exit *exec.ExitError
	if errors.As(t.err, &exit) {
		return exit.ExitCode()
	}
	return 0
}

func (t *terminal) Close() {
	if !t.Exited() {
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	_ = t.ptmx.Close()
}
