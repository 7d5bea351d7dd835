package simguest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// simHost is a sim driver whose guests are this package's.
func simHost(ctx context.Context) *sim.Driver {
	h := Handler(ctx, Reporter{XcodeVersions: []string{"16.4"}, HeadroomBytes: 1 << 30, Clock: clock.RealClock{}}, logr.Discard())
	return sim.New(sim.NewMemKernel(), sim.WithBootTime(0), sim.WithShutdownTime(0), sim.WithGuestHandler(h))
}

// startedVM is a running sim VM, stopped at the end of the test.
func startedVM(t *testing.T, ctx context.Context, d *sim.Driver, name string) (driver.VM, vmspec.VMSpec) {
	t.Helper()
	vm, spec := newVMWithSpec(t, d, name)
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Stop(context.Background(), 0) })
	return vm, spec
}

// session opens a session on the VM's guest, as the host agent does.
func session(t *testing.T, ctx context.Context, vm driver.VM) *guest.Session {
	t.Helper()
	conn, err := vm.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	s, err := guest.NewClient(conn).Session(ctx, "admin")
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exposed is a TCP listener on the loopback whose connections each go
// through s.Forward to the guest's port, as kubectl port-forward exposes
// one; it is closed at the end of the test.
func exposed(t *testing.T, s *guest.Session, port uint16) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				if err := s.Forward(ctx, port, c); err != nil && ctx.Err() == nil {
					t.Logf("forward to guest port %d: %v", port, err)
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		cancel()
		wg.Wait()
	})
	return l.Addr().(*net.TCPAddr).Port
}

// openSSHTool is the path of OpenSSH's ssh or ssh-keygen.
func openSSHTool(t *testing.T, name string) string {
	t.Helper()
	if p := "/usr/bin/" + name; isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("these tests drive the real OpenSSH client, and %s is not installed: apt-get install openssh-client", name)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// keyPair makes an ed25519 key with ssh-keygen: its private key's path,
// and its public key's line.
func keyPair(t *testing.T, keygen, dir, name string) (string, string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", name+"@tenant", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.TrimSpace(string(pub))
}

// runSSH runs the real ssh client against port, as user with key: its
// stdout, stderr and exit code.
func runSSH(t *testing.T, ctx context.Context, sshPath string, port int, key, user string, command ...string) (string, string, int) {
	t.Helper()
	return runSSHWith(t, ctx, sshPath, port, key, user, "", nil, command...)
}

// runSSHWith is runSSH with stdin and more options.
func runSSHWith(t *testing.T, ctx context.Context, sshPath string, port int, key, user, stdin string, opts []string, command ...string) (string, string, int) {
	t.Helper()
	args := append(append(slices.Clone(opts), []string{
		"-F", "/dev/null", // no user or system configuration
		"-p", strconv.Itoa(port), "-i", key,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
		user + "@127.0.0.1",
	}...), command...)
	cmd := exec.CommandContext(ctx, sshPath, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running ssh: %v", err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// The real OpenSSH client logs in to a sim guest through a forward of its
// port 22, with the key the host set, and runs commands there as a Mac's
// sshd would: sw_vers answers as macOS does. A key the host did not set,
// or another user, is refused, beside the control that logs in.
func TestRealSSHLogsInThroughAForwardWithTheKeysTheHostSet(t *testing.T) {
	sshPath, keygen := openSSHTool(t, "ssh"), openSSHTool(t, "ssh-keygen")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vm, spec := startedVM(t, ctx, simHost(ctx), "ssh-1")
	s := session(t, ctx, vm)
	keys := t.TempDir()
	good, goodPub := keyPair(t, keygen, keys, "good")
	other, _ := keyPair(t, keygen, keys, "other")
	if err := s.SetAuthorizedKeys(ctx, []string{goodPub}); err != nil {
		t.Fatalf("SetAuthorizedKeys: %v", err)
	}
	port := exposed(t, s, PortSSH)

	t.Run("the key the host set runs sw_vers", func(t *testing.T) {
		out, errOut, code := runSSH(t, ctx, sshPath, port, good, "admin", "sw_vers")
		if want := "ProductName:\t\tmacOS\nProductVersion:\t\t15.5\nBuildVersion:\t\t24F74\n"; code != 0 || out != want {
			t.Fatalf("ssh admin@ sw_vers: exit %d, %q (stderr %q); want %q", code, out, errOut, want)
		}
	})
	t.Run("a command line goes through sh, in the home, with its exit status", func(t *testing.T) {
		out, errOut, code := runSSH(t, ctx, sshPath, port, good, "admin", `echo "$HOME" && pwd && sw_vers -productVersion && exit 3`)
		home := filepath.Join(Dir(spec), "home")
		if code != 3 || out != home+"\n"+home+"\n15.5\n" {
			t.Fatalf("exit %d, %q (stderr %q); want exit 3 after the home twice and 15.5", code, out, errOut)
		}
	})
	t.Run("without a command, a shell reads its input", func(t *testing.T) {
		out, errOut, code := runSSHWith(t, ctx, sshPath, port, good, "admin", "sw_vers -productName\nexit 4\n", nil)
		if code != 4 || out != "macOS\n" {
			t.Fatalf("a shell: exit %d, %q (stderr %q); want macOS, then exit 4", code, out, errOut)
		}
	})
	t.Run("on a terminal", func(t *testing.T) {
		out, errOut, code := runSSHWith(t, ctx, sshPath, port, good, "admin", "", []string{"-tt"}, `[ -t 0 ] && echo "$TERM" && stty size`)
		if code != 0 || !strings.Contains(out, "\r\n") || !strings.Contains(out, "24 80") {
			t.Fatalf("ssh -tt: exit %d, %q (stderr %q); want a terminal's output, 80x24", code, out, errOut)
		}
	})
	t.Run("a key the host did not set is refused", func(t *testing.T) {
		out, errOut, code := runSSH(t, ctx, sshPath, port, other, "admin", "sw_vers")
		if code != 255 || out != "" || !strings.Contains(errOut, "Permission denied (publickey)") {
			t.Fatalf("ssh with another key: exit %d, %q, stderr %q; want it refused", code, out, errOut)
		}
	})
	t.Run("another user is refused", func(t *testing.T) {
		out, errOut, code := runSSH(t, ctx, sshPath, port, good, "root", "sw_vers")
		if code != 255 || out != "" || !strings.Contains(errOut, "Permission denied (publickey)") {
			t.Fatalf("ssh as root: exit %d, %q, stderr %q; want it refused", code, out, errOut)
		}
	})
	t.Run("keys the host removed are refused", func(t *testing.T) {
		if err := s.SetAuthorizedKeys(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runSSH(t, ctx, sshPath, port, good, "admin", "true"); code != 255 || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("ssh after the keys were removed: exit %d, stderr %q", code, errOut)
		}
		// And set again, they let in again.
		if err := s.SetAuthorizedKeys(ctx, []string{goodPub}); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runSSH(t, ctx, sshPath, port, good, "admin", "true"); code != 0 {
			t.Fatalf("ssh after the keys were set again: exit %d, stderr %q", code, errOut)
		}
	})
}

// hostKeyOf logs in with x/crypto's client through a forward, and returns
// the host key the guest showed, and whether the login went through.
func hostKeyOf(t *testing.T, ctx context.Context, s *guest.Session, signer ssh.Signer) (ssh.PublicKey, error) {
	t.Helper()
	client, local := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.Forward(ctx, PortSSH, local) }()
	var seen ssh.PublicKey
	conf := &ssh.ClientConfig{
		User: "admin",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			seen = key
			return nil
		},
	}
	c, chans, reqs, err := ssh.NewClientConn(client, "sim-guest", conf)
	if err == nil {
		ssh.NewClient(c, chans, reqs).Close()
	}
	client.Close()
	<-done
	return seen, err
}

// A VM's host key is made once and kept in its directory: the same after
// a reboot, another VM's another. The keys the host set are one boot's:
// the guest reports their digest, and after a reboot none, until the host
// sets them again.
func TestTheSimGuestsHostKeyIsTheVMsAndItsKeysOneBoots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := simHost(ctx)
	vm, spec := startedVM(t, ctx, d, "keys-1")
	signer := newSigner(t)
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	report := func() string {
		t.Helper()
		conn, err := vm.DialGuest(ctx, guest.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		c := guest.NewClient(conn)
		defer c.Close()
		r, err := c.Report(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r.AuthorizedKeysDigest
	}

	if got := report(); got != "" {
		t.Fatalf("a new guest reports keys: %q", got)
	}
	s := session(t, ctx, vm)
	if _, err := hostKeyOf(t, ctx, s, signer); err == nil {
		t.Fatal("a login before the host set any key went through")
	}
	if err := s.SetAuthorizedKeys(ctx, []string{pub}); err != nil {
		t.Fatal(err)
	}
	if got, want := report(), guest.AuthorizedKeysDigest([]string{pub}); got != want {
		t.Fatalf("the guest reports %q, want the digest of the keys set, %q", got, want)
	}
	first, err := hostKeyOf(t, ctx, s, signer)
	if err != nil {
		t.Fatalf("a login with the key set: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(Dir(spec), HostKeyFile+".pub")); err != nil || strings.TrimSpace(string(b)) != strings.TrimSpace(string(ssh.MarshalAuthorizedKey(first))) {
		t.Fatalf("the host key kept in the VM's directory: %q, %v", b, err)
	}
	s.Close()

	if err := vm.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := report(); got != "" {
		t.Fatalf("a rebooted sim guest reports keys: %q", got)
	}
	s = session(t, ctx, vm)
	if _, err := hostKeyOf(t, ctx, s, signer); err == nil {
		t.Fatal("a login to a rebooted guest went through before the host set its keys again")
	}
	if err := s.SetAuthorizedKeys(ctx, []string{pub}); err != nil {
		t.Fatal(err)
	}
	again, err := hostKeyOf(t, ctx, s, signer)
	if err != nil {
		t.Fatalf("a login after the keys were set again: %v", err)
	}
	if !bytes.Equal(again.Marshal(), first.Marshal()) {
		t.Fatal("the VM's host key changed with a reboot")
	}

	vm2, _ := startedVM(t, ctx, d, "keys-2")
	s2 := session(t, ctx, vm2)
	if err := s2.SetAuthorizedKeys(ctx, []string{pub}); err != nil {
		t.Fatal(err)
	}
	other, err := hostKeyOf(t, ctx, s2, signer)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other.Marshal(), first.Marshal()) {
		t.Fatal("two VMs have one host key")
	}
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Port 5900 answers as Screen Sharing first does: a VNC client sees an
// RFB server.
func TestScreenSharingPortSaysTheRFBBanner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, _ := startedVM(t, ctx, simHost(ctx), "vnc-1")
	s := session(t, ctx, vm)
	port := exposed(t, s, PortScreenSharing)
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	banner := make([]byte, len("RFB 003.008\n"))
	if _, err := io.ReadFull(c, banner); err != nil || string(banner) != "RFB 003.008\n" {
		t.Fatalf("the first bytes of port 5900: %q, %v; want an RFB 3.8 banner", banner, err)
	}
	// A client's answer is taken, and nothing more is said.
	if _, err := c.Write([]byte("RFB 003.008\n")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after the banner: %q, %v; want the end, once the client ended", rest, err)
	}
}

// Port 7 echoes (and passes a half-close on), port 9 takes 64 MiB, and
// any other port is closed: the forward says ErrPortClosed, beside the
// open ones.
func TestTheSimGuestsOtherPorts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vm, _ := startedVM(t, ctx, simHost(ctx), "ports-1")
	s := session(t, ctx, vm)

	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(exposed(t, s, PortEcho)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	payload := strings.Repeat("echo ", 50000)
	go func() {
		io.WriteString(c, payload)
		c.(*net.TCPConn).CloseWrite()
	}()
	if got, err := io.ReadAll(c); err != nil || string(got) != payload {
		t.Fatalf("port 7: %d bytes, %v; want the %d sent, then the end", len(got), err, len(payload))
	}

	const size = 64 << 20
	sink, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(exposed(t, s, PortDiscard)))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	sink.SetDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	chunk := bytes.Repeat([]byte{'x'}, 1<<20)
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := sink.Write(chunk); err != nil {
			t.Fatalf("port 9, after %d bytes: %v", sent, err)
		}
	}
	sink.(*net.TCPConn).CloseWrite()
	if rest, err := io.ReadAll(sink); err != nil || len(rest) != 0 {
		t.Fatalf("port 9 answered %q, %v", rest, err)
	}
	elapsed := time.Since(start)
	t.Logf("64 MiB to port 9 in %v: %.0f MiB/s", elapsed.Round(time.Millisecond), float64(size>>20)/elapsed.Seconds())

	for _, port := range []uint16{8080, 23, 5901} {
		_, local := net.Pipe()
		err := s.Forward(ctx, port, local)
		if !errors.Is(err, guest.ErrPortClosed) || !strings.Contains(err.Error(), fmt.Sprintf("port %d", port)) {
			t.Errorf("a forward to closed port %d: %v, want ErrPortClosed naming it", port, err)
		}
	}
}
