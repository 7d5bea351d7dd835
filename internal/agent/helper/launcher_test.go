package helper

import (
	"context"
	"encoding/xml"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

func TestInProcessLauncher(t *testing.T) {
	ctx := context.Background()
	k := sim.NewMemKernel()
	l, err := NewInProcessLauncher(shortDir(t), fastSim(k), WithStopGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	spec := testSpec("u1")
	sock, err := l.Launch(ctx, "u1", spec)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := l.Launch(ctx, "u1", spec); err != nil || again != sock {
		t.Fatalf("launching again got %q, %v; want the same socket %q", again, err, sock)
	}
	changed := testSpec("u1")
	changed.MemoryBytes *= 2
	if _, err := l.Launch(ctx, "u1", changed); !errors.Is(err, ErrSpecMismatch) {
		t.Fatalf("relaunching with another spec got %v, want ErrSpecMismatch", err)
	}
	c := dial(t, sock)
	if err := c.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	running, err := l.Running()
	if err != nil || len(running) != 1 || running["u1"] != sock {
		t.Fatalf("running is %v, %v", running, err)
	}
	if err := l.Remove(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Active(); n != 0 {
		t.Fatalf("after the removal %d VMs count against the quota", n)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket is left: %v", err)
	}
	if running, _ := l.Running(); len(running) != 0 {
		t.Fatalf("running after the removal: %v", running)
	}
}

func TestLaunchRefuses(t *testing.T) {
	l, err := NewInProcessLauncher(shortDir(t), fastSim(sim.NewMemKernel()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	invalid := testSpec("u1")
	invalid.CPUCount = 0
	cases := []struct {
		name string
		uid  string
		spec vmspec.VMSpec
		want error
	}{
		{"a UID that cannot name a file is refused", "../u1", testSpec("u1"), ErrInvalidUID},
		{"a spec of another instance is refused", "u2", testSpec("u1"), ErrSpecMismatch},
		{"an invalid spec is refused", "u1", invalid, vmspec.ErrCPU},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := l.Launch(context.Background(), c.uid, c.spec); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestLaunchdPlist(t *testing.T) {
	body := launchdPlist("io.macrack.vm-helper.u1", []string{"/usr/local/bin/vm-helper", "--spec", "/var/run/a&b<c>.json"},
		"/var/log/u1.log", 90*time.Second)
	var doc struct {
		Dict struct {
			Inner string `xml:",innerxml"`
		} `xml:"dict"`
	}
	if err := xml.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the plist is not XML: %v\n%s", err, body)
	}
	for _, want := range []string{
		"<key>Label</key><string>io.macrack.vm-helper.u1</string>",
		"<string>/var/run/a&amp;b&lt;c&gt;.json</string>",
		"<key>KeepAlive</key><false/>",
		"<key>ExitTimeOut</key><integer>90</integer>",
		"<key>StandardErrorPath</key><string>/var/log/u1.log</string>",
	} {
		if !strings.Contains(doc.Dict.Inner, want) {
			t.Fatalf("the plist lacks %s:\n%s", want, body)
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// helperBinary builds cmd/vm-helper once per test run.
func helperBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vm-helper-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "vm-helper")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/boualleiguie/macrack-operator/cmd/vm-helper").CombinedOutput()
		if err != nil {
			buildErr = errors.New(err.Error() + ": " + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building vm-helper: %v", buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func execLauncher(t *testing.T, dir, kernelDir string, extra ...string) *ExecLauncher {
	t.Helper()
	l, err := NewExecLauncher(ExecConfig{
		Dir: dir, HelperPath: helperBinary(t), Driver: "sim", KernelStateDir: kernelDir,
		ExtraArgs: append([]string{"--sim-boot-time=10ms", "--sim-shutdown-time=10ms", "--stop-grace=5s"}, extra...),
		KillAfter: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func readPID(t *testing.T, dir, uid string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, uid+pidSuffix))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestAHelperProcessOutlivesItsAgent(t *testing.T) {
	dir, kernelDir := shortDir(t), shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := testSpec("u1")

	first := execLauncher(t, dir, kernelDir)
	t.Cleanup(func() { _ = first.Remove(context.Background(), "u1") })
	sock, err := first.Launch(ctx, "u1", spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.Hello().PID
	if pid == os.Getpid() || pid != readPID(t, dir, "u1") {
		t.Fatalf("the helper says pid %d; its pid file %d; the test is %d", pid, readPID(t, dir, "u1"), os.Getpid())
	}
	if err := c.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// The agent goes away: its client and its launcher with it.
	c.Close()

	second := execLauncher(t, dir, kernelDir)
	running, err := second.Running()
	if err != nil {
		t.Fatal(err)
	}
	if running["u1"] != sock || len(running) != 1 {
		t.Fatalf("after the restart the launcher finds %v, want u1 at %s", running, sock)
	}
	again, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Hello().PID != pid {
		t.Fatalf("reattached to pid %d, want %d", again.Hello().PID, pid)
	}
	mustState(t, again, driver.StateRunning)
	if sock2, err := second.Launch(ctx, "u1", spec); err != nil || sock2 != sock {
		t.Fatalf("launching a running helper again got %q, %v", sock2, err)
	}
	if again.Hello().PID != readPID(t, dir, "u1") {
		t.Fatal("launching a running helper again started another process")
	}

	k, err := sim.NewFileKernel(kernelDir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Active(); n != 1 {
		t.Fatalf("the host counts %d VMs, want 1", n)
	}
	// Removal stops the VM gracefully (SIGTERM) and ends the process.
	if err := second.Remove(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("helper %d survived its removal", pid)
	}
	if n, _ := k.Active(); n != 0 {
		t.Fatalf("after the removal the host counts %d VMs", n)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left after the removal: %v", entries)
	}
}

func TestAHelperThatDiedIsDroppedAndFreesItsSlot(t *testing.T) {
	dir, kernelDir := shortDir(t), shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := execLauncher(t, dir, kernelDir)
	t.Cleanup(func() { _ = l.Remove(context.Background(), "u1") })
	spec := testSpec("u1")
	sock, err := l.Launch(ctx, "u1", spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pid := c.Hello().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The launcher reaps its child; wait for that, briefly.
	if err := waitGone(ctx, pid); err != nil {
		t.Fatal(err)
	}
	running, err := l.Running()
	if err != nil || len(running) != 0 {
		t.Fatalf("running is %v, %v; want none", running, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "u1"+pidSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead helper's pid file is left: %v", err)
	}
	// Its process died, and the sim kernel freed its VM with it.
	k, err := sim.NewFileKernel(kernelDir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Active(); n != 0 {
		t.Fatalf("the host counts %d VMs after the helper died", n)
	}
}

func TestExecHelpersShareTheHostQuota(t *testing.T) {
	dir, kernelDir := shortDir(t), shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := execLauncher(t, dir, kernelDir)
	var errs []error
	for _, uid := range []string{"u1", "u2", "u3"} {
		t.Cleanup(func() { _ = l.Remove(context.Background(), uid) })
		sock, err := l.Launch(ctx, uid, testSpec(uid))
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		errs = append(errs, c.Start(ctx, testSpec(uid)))
		c.Close()
	}
	if errs[0] != nil || errs[1] != nil || !driver.IsLimitExceeded(errs[2]) {
		t.Fatalf("three helper processes' starts got %v; want two starts and code 6", errs)
	}
}

func TestAHelperThatCannotStartIsReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := shortDir(t)
	l, err := NewExecLauncher(ExecConfig{Dir: dir, HelperPath: helperBinary(t), Driver: "vz"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Launch(ctx, "u1", testSpec("u1"))
	if !errors.Is(err, ErrHelperExited) || !strings.Contains(err.Error(), "vz driver needs macOS on Apple silicon") {
		t.Fatalf("got %v, want ErrHelperExited explaining the vz driver", err)
	}
}

// TestABusyHelperIsNotLaunchedTwice: a live helper process whose socket takes
// the connection but does not answer in time (a loaded host) is not replaced
// by a second helper, which would run the same VM twice; the launch fails
// with ErrHelperBusy, to be retried. A helper whose socket is gone is.
func TestABusyHelperIsNotLaunchedTwice(t *testing.T) {
	dir := shortDir(t)
	f := files{dir: dir}
	uid := "u1"
	// A live process holds the pid file: this test's own.
	if err := os.WriteFile(f.path(uid, pidSuffix), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.writeSpec(uid, testSpec(uid)); err != nil {
		t.Fatal(err)
	}

	// Positive control: with no socket, nothing answers, and a launch may go on.
	if _, ok, err := f.existing(uid, testSpec(uid)); ok || err != nil {
		t.Fatalf("without a socket: ok %v, err %v; want a launch to go on", ok, err)
	}

	// A socket that accepts and never answers.
	ln, err := net.Listen("unix", f.path(uid, socketSuffix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	if _, ok, err := f.existing(uid, testSpec(uid)); ok || !errors.Is(err, ErrHelperBusy) {
		t.Fatalf("a busy helper: ok %v, err %v; want ErrHelperBusy", ok, err)
	}
	// It counts as running, so that stopping or counting VMs does not miss it.
	running, err := f.running()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := running[uid]; !ok {
		t.Fatalf("a busy helper is not listed as running: %v", running)
	}
}
