package access

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// forward is a running `kubectl port-forward` and the local port it
// listens on.
type forward struct {
	cmd    *exec.Cmd
	Port   string
	stderr *bytes.Buffer
	done   chan struct{}
}

var forwardingFrom = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// portForward runs kubectl port-forward pod/<pod> :<remote> as kubeconfig's
// user, and waits until it listens.
func portForward(kubeconfig, namespace, pod string, remote int) *forward {
	GinkgoHelper()
	f := &forward{stderr: &bytes.Buffer{}, done: make(chan struct{})}
	f.cmd = exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "port-forward", "pod/"+pod, fmt.Sprintf(":%d", remote))
	out, err := f.cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	f.cmd.Stderr = f.stderr
	Expect(f.cmd.Start()).To(Succeed())
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	ports := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if m := forwardingFrom.FindStringSubmatch(s.Text()); m != nil {
				select {
				case ports <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case f.Port = <-ports:
	case <-f.done:
		Fail("kubectl port-forward ended: " + f.stderr.String())
	case <-time.After(30 * time.Second):
		Fail("kubectl port-forward did not listen: " + f.stderr.String())
	}
	return f
}

func (f *forward) Stop() {
	_ = f.cmd.Process.Kill()
	<-f.done
}

// sshArgs are the real OpenSSH client's arguments for port, with key.
func sshArgs(key, port string, remote ...string) []string {
	return append([]string{"-p", port, "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", "admin@127.0.0.1"}, remote...)
}

// newKey makes an ed25519 key pair with ssh-keygen and returns the
// private key's path and the public key's line.
func newKey(dir, name string) (string, string) {
	GinkgoHelper()
	path := filepath.Join(dir, name)
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", path).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "ssh-keygen (apt-get install openssh-client): %s", out)
	pub, err := os.ReadFile(path + ".pub")
	Expect(err).NotTo(HaveOccurred())
	return path, strings.TrimSpace(string(pub))
}

var _ = Describe("Port-forward, SSH and Screen Sharing through kubectl", Ordered, func() {
	var dir, key, otherKey string

	BeforeAll(func() {
		_, err := exec.LookPath("ssh")
		Expect(err).NotTo(HaveOccurred(), "the real OpenSSH client: apt-get install openssh-client")
		dir = GinkgoT().TempDir()
		var pub string
		key, pub = newKey(dir, "alice")
		otherKey, _ = newKey(dir, "mallory")
		// As docs/tenant.md: the tenant patches its keys in.
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "patch", "mi", "ci", "--type", "merge",
			"-p", `{"spec":{"access":{"sshAuthorizedKeys":["`+pub+`"]}}}`)
		Expect(r.Code).To(BeZero(), r.Stderr)
	})

	It("reaches the guest's SSH server with the tenant's key, and copies a file out", func() {
		fwd := portForward(tenantA.Kubeconfig, tenantA.Namespace, "ci", 22)
		defer fwd.Stop()
		var out []byte
		Eventually(func() error {
			var err error
			out, err = exec.CommandContext(ctx, "ssh", sshArgs(key, fwd.Port, "sw_vers")...).CombinedOutput()
			return err
		}, 60*time.Second, time.Second).Should(Succeed(), "once the agent installed the key: %s", func() string { return string(out) })
		Expect(string(out)).To(ContainSubstring("ProductName:\t\tmacOS"))

		// A key the tenant did not give is refused: the positive control's
		// other half.
		bad, err := exec.CommandContext(ctx, "ssh", sshArgs(otherKey, fwd.Port, "true")...).CombinedOutput()
		Expect(err).To(HaveOccurred())
		Expect(string(bad)).To(ContainSubstring("Permission denied"))

		// Copy a file out over SSH, byte for byte.
		data := make([]byte, 1<<20+3)
		_, err = rand.Read(data)
		Expect(err).NotTo(HaveOccurred())
		in := filepath.Join(dir, "in.bin")
		Expect(os.WriteFile(in, data, 0o600)).To(Succeed())
		Expect(run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "cp", in, "ci:ssh-out.bin").Code).To(BeZero())
		cat := exec.CommandContext(ctx, "ssh", sshArgs(key, fwd.Port, "cat ssh-out.bin")...)
		got, err := cat.Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(sha256.Sum256(got)).To(Equal(sha256.Sum256(data)))
	})

	It("reaches Screen Sharing on 5900", func() {
		fwd := portForward(tenantA.Kubeconfig, tenantA.Namespace, "ci", 5900)
		defer fwd.Stop()
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+fwd.Port, 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		Expect(conn.SetReadDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
		banner := make([]byte, 12)
		_, err = io.ReadFull(conn, banner)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(banner)).To(Equal("RFB 003.008\n"))
	})

	It("fails a forward to a closed guest port cleanly, and the VM serves the next", func() {
		fwd := portForward(tenantA.Kubeconfig, tenantA.Namespace, "ci", 4444)
		defer fwd.Stop()
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+fwd.Port, 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.SetReadDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
		_, err = conn.Read(make([]byte, 1))
		Expect(err).To(MatchError(io.EOF), "closed at once, not hung")
		conn.Close()
		// kubectl names the port and why; client-go then ends the whole
		// port-forward on a stream's error (it may still be closing).
		Eventually(fwd.stderr.String).Should(ContainSubstring("nothing listens on port 4444 in VM " + tenantA.Namespace + "/ci"))

		ssh := portForward(tenantA.Kubeconfig, tenantA.Namespace, "ci", 5900)
		defer ssh.Stop()
		again, err := net.DialTimeout("tcp", "127.0.0.1:"+ssh.Port, 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		defer again.Close()
		Expect(again.SetReadDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
		banner := make([]byte, 12)
		_, err = io.ReadFull(again, banner)
		Expect(err).NotTo(HaveOccurred(), "positive control: an open port of the same VM")
		Expect(string(banner)).To(Equal("RFB 003.008\n"))
	})

	It("refuses tenant B a forward to tenant A's VM", func() {
		r := run(tenantB.Kubeconfig, "", "-n", tenantA.Namespace, "port-forward", "pod/ci", ":22")
		Expect(r.Code).NotTo(BeZero())
		Expect(r.Stderr).To(ContainSubstring("forbidden"))
	})

	It("leaks no goroutine or file descriptor over a thousand forwarded connections", func() {
		fwd := portForward(tenantA.Kubeconfig, tenantA.Namespace, "ci", 7)
		defer fwd.Stop()
		echo := func(i int) {
			conn, err := net.DialTimeout("tcp", "127.0.0.1:"+fwd.Port, 10*time.Second)
			Expect(err).NotTo(HaveOccurred())
			defer conn.Close()
			Expect(conn.SetDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
			msg := fmt.Sprintf("hello %d\n", i)
			_, err = conn.Write([]byte(msg))
			Expect(err).NotTo(HaveOccurred())
			got := make([]byte, len(msg))
			_, err = io.ReadFull(conn, got)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(got)).To(Equal(msg))
		}
		echo(0)
		helper := agents[tenantA.Node].HelperPID(string(tenantA.Instance.UID))
		Expect(helper).To(BeNumerically(">", 0))
		settle := func() (int, int, int) {
			runtime.GC()
			return runtime.NumGoroutine(), fdCount(os.Getpid()), fdCount(helper)
		}
		time.Sleep(time.Second) // the warm-up connection's goroutines end
		g0, f0, h0 := settle()
		for i := 1; i <= 1000; i++ {
			echo(i)
		}
		Eventually(func() []int { g, f, h := settle(); return []int{g - g0, f - f0, h - h0} }, 30*time.Second, time.Second).
			Should(HaveEach(BeNumerically("<", 40)), "goroutines, fds of the agent, fds of the guest's helper")
	})
})
