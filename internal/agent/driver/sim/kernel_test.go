package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
)

// kernels returns one fresh kernel of each implementation.
func kernels(t *testing.T) map[string]Kernel {
	fk, err := NewFileKernel(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Kernel{"in memory": NewMemKernel(), "in a state directory": fk}
}

func mustAcquire(t *testing.T, k Kernel) Slot {
	t.Helper()
	s, err := k.Acquire("vm")
	if err != nil {
		t.Fatalf("acquiring: %v", err)
	}
	return s
}

func mustActive(t *testing.T, k Kernel, want int) {
	t.Helper()
	n, err := k.Active()
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("counter is %d, want %d", n, want)
	}
}

func requireLimit(t *testing.T, err error) {
	t.Helper()
	var vz *driver.VZError
	if !errors.As(err, &vz) || vz.Domain != "VZErrorDomain" || vz.Code != 6 || !driver.IsLimitExceeded(err) {
		t.Fatalf("got %v, want the code-6 VZError", err)
	}
}

func TestKernelQuota(t *testing.T) {
	for name, k := range kernels(t) {
		t.Run("a kernel "+name+" counts two VMs and refuses a third until one is released", func(t *testing.T) {
			a, b := mustAcquire(t, k), mustAcquire(t, k)
			if a == b {
				t.Fatalf("two VMs share slot %d", a)
			}
			_, err := k.Acquire("third")
			requireLimit(t, err)
			mustActive(t, k, 2)
			if err := k.Release(a); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, 1)
			c := mustAcquire(t, k)
			if err := k.Release(c); err != nil {
				t.Fatal(err)
			}
			if err := k.Release(b); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, 0)
		})
	}
}

func TestKernelStuckQuota(t *testing.T) {
	for name, k := range kernels(t) {
		t.Run("a kernel "+name+" keeps a released slot under the fault until a reboot", func(t *testing.T) {
			a, b := mustAcquire(t, k), mustAcquire(t, k)
			if err := k.SetStuckQuota(true); err != nil {
				t.Fatal(err)
			}
			if err := k.Release(a); err != nil {
				t.Fatal(err)
			}
			_, err := k.Acquire("after stuck release")
			requireLimit(t, err)
			mustActive(t, k, 2)
			if err := k.Reboot(); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, 0)
			// b's VM died with the host; its late release must not free the new slots.
			c, d := mustAcquire(t, k), mustAcquire(t, k)
			if err := k.Release(b); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, 2)
			if err := k.SetStuckQuota(false); err != nil {
				t.Fatal(err)
			}
			for _, s := range []Slot{c, d} {
				if err := k.Release(s); err != nil {
					t.Fatal(err)
				}
			}
			mustActive(t, k, 0)
		})
	}
}

func TestFileKernelsOnOneDirectoryShareTheCounter(t *testing.T) {
	dir := t.TempDir()
	k1, err := NewFileKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := NewFileKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := mustAcquire(t, k1), mustAcquire(t, k2)
	_, err = k1.Acquire("third")
	requireLimit(t, err)
	_, err = k2.Acquire("third")
	requireLimit(t, err)
	if err := k2.Release(a); err != nil {
		t.Fatal(err)
	}
	mustActive(t, k1, 1)
	// The fault is a file: switching it through one kernel affects the other.
	if err := k1.SetStuckQuota(true); err != nil {
		t.Fatal(err)
	}
	c := mustAcquire(t, k2)
	if err := k2.Release(c); err != nil {
		t.Fatal(err)
	}
	mustActive(t, k1, 2)
	if err := k2.Reboot(); err != nil {
		t.Fatal(err)
	}
	mustActive(t, k1, 0)
}

func TestFileKernelRejectsACorruptState(t *testing.T) {
	dir := t.TempDir()
	k, err := NewFileKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/"+StateFile, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Acquire("vm"); !errors.Is(err, ErrKernelState) {
		t.Fatalf("got %v, want ErrKernelState", err)
	}
}

// childDirEnv makes the test binary act as a helper process holding one
// slot of the kernel in that directory; see TestKernelChildProcess.
const childDirEnv = "MACRACK_SIM_KERNEL_CHILD_DIR"

// TestKernelChildProcess is not a test of its own: it is the body of the
// child processes that TestFileKernelIsSharedAcrossProcesses spawns from
// this test binary. It acquires a slot, reports it on stdout, and releases
// it when its stdin closes.
func TestKernelChildProcess(t *testing.T) {
	dir := os.Getenv(childDirEnv)
	if dir == "" {
		return
	}
	k, err := NewFileKernel(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	slot, err := k.Acquire("child")
	if err != nil {
		fmt.Println("refused", driver.IsLimitExceeded(err))
		os.Exit(0)
	}
	fmt.Println("acquired", slot)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := k.Release(slot); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	os.Exit(0)
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	first string
}

func spawnChild(t *testing.T, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelChildProcess$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's report: %v", err)
	}
	return &child{cmd: cmd, stdin: stdin, first: strings.TrimSpace(line)}
}

func TestFileKernelIsSharedAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	c1, c2 := spawnChild(t, dir), spawnChild(t, dir)
	for _, c := range []*child{c1, c2} {
		if !strings.HasPrefix(c.first, "acquired ") {
			t.Fatalf("a child within the quota reported %q", c.first)
		}
	}
	if c3 := spawnChild(t, dir); c3.first != "refused true" {
		t.Fatalf("a third process reported %q, want the limit", c3.first)
	}
	k, err := NewFileKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Acquire("parent")
	requireLimit(t, err)

	// A child that releases and exits frees its slot for this process.
	c1.stdin.Close()
	if err := c1.cmd.Wait(); err != nil {
		t.Fatalf("child exited with %v", err)
	}
	s := mustAcquire(t, k)
	if err := k.Release(s); err != nil {
		t.Fatal(err)
	}
	// A child killed outright loses its VM, and the kernel its slot.
	if err := c2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c2.cmd.Wait()
	mustActive(t, k, 0)
}
