package access

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The walk-through of docs/tenant.md's "Reach your Mac", as the tenant
// runs it, with the real kubectl.
var _ = Describe("Tenant access through kubectl", Ordered, func() {
	It("runs sw_vers in the guest, which answers as a Mac", func() {
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "exec", "ci", "--", "sw_vers")
		Expect(r.Code).To(BeZero(), r.Stderr)
		Expect(r.Stdout).To(ContainSubstring("ProductName:\t\tmacOS"))
		Expect(r.Stdout).To(ContainSubstring("ProductVersion:\t\t15.5"))

		r = run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "exec", "ci", "-c", "macos", "--", "sw_vers", "-productVersion")
		Expect(r.Code).To(BeZero(), r.Stderr)
		Expect(strings.TrimSpace(r.Stdout)).To(Equal("15.5"))
	})

	It("carries stdin, stdout, stderr and the exit code", func() {
		r := run(tenantA.Kubeconfig, "hello from stdin\n", "-n", tenantA.Namespace, "exec", "-i", "ci", "--",
			"sh", "-c", "cat; echo to-stderr >&2; exit 3")
		Expect(r.Stdout).To(Equal("hello from stdin\n"))
		Expect(r.Stderr).To(ContainSubstring("to-stderr"))
		Expect(r.Code).To(Equal(3), "kubectl exits with the command's code")

		r = run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "exec", "ci", "--", "sh", "-c", "exit 0")
		Expect(r.Code).To(BeZero(), "positive control: exit 0")
	})

	It("answers a command that does not exist clearly", func() {
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "exec", "ci", "--", "no-such-command-here")
		Expect(r.Code).NotTo(BeZero())
		Expect(r.Stdout + r.Stderr).To(ContainSubstring("no-such-command-here"))
	})

	It("refuses attach with a message that says to use exec", func() {
		// The tenant roles grant no pods/attach, which would give nothing:
		// an administrator sees the agent's answer.
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "attach", "ci")
		Expect(r.Code).NotTo(BeZero())
		Expect(r.Stderr).To(ContainSubstring(`cannot create resource "pods/attach"`))
		r = run(adminKubeconfig, "", "-n", tenantA.Namespace, "attach", "ci")
		Expect(r.Code).NotTo(BeZero())
		Expect(r.Stderr).To(ContainSubstring("not supported"))
		Expect(r.Stderr).To(ContainSubstring("kubectl exec"))
	})

	It("shows the guest agent's log and boot stages, and follows it", func() {
		Expect(firstLog).To(ContainSubstring("boot stage: ready"), "the boot stages")
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "logs", "ci")
		Expect(r.Code).To(BeZero(), r.Stderr)
		Expect(r.Stdout).NotTo(BeEmpty())

		tail := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "logs", "ci", "--tail=1")
		Expect(tail.Code).To(BeZero(), tail.Stderr)
		Expect(strings.Count(strings.TrimRight(tail.Stdout, "\n"), "\n")).To(BeZero(), "one line: %q", tail.Stdout)

		// -f follows: an exec afterwards shows in the stream.
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", tenantA.Kubeconfig, "-n", tenantA.Namespace, "logs", "-f", "--tail=0", "ci")
		out, err := cmd.StdoutPipe()
		Expect(err).NotTo(HaveOccurred())
		Expect(cmd.Start()).To(Succeed())
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := make(chan string, 64)
		go func() {
			defer GinkgoRecover()
			s := bufio.NewScanner(out)
			for s.Scan() {
				lines <- s.Text()
			}
			close(lines)
		}()
		// The stream may not be open yet when the first exec runs: exec
		// again until a line of it shows. The command does not exist; it
		// is logged all the same.
		Eventually(func() bool {
			Expect(run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "exec", "ci", "--", "followed-marker-cmd").Code).NotTo(BeZero())
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						Fail("kubectl logs -f ended")
					}
					if strings.Contains(l, "followed-marker-cmd") {
						return true
					}
				case <-time.After(2 * time.Second):
					return false
				}
			}
		}, 60*time.Second, 100*time.Millisecond).Should(BeTrue())
	})

	It("copies a file in and out with kubectl cp, byte for byte", func() {
		dir := GinkgoT().TempDir()
		data := make([]byte, 3<<20+17)
		_, err := rand.Read(data)
		Expect(err).NotTo(HaveOccurred())
		in := filepath.Join(dir, "in.bin")
		Expect(os.WriteFile(in, data, 0o600)).To(Succeed())
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "cp", in, "ci:copied.bin")
		Expect(r.Code).To(BeZero(), r.Stderr)
		out := filepath.Join(dir, "out.bin")
		r = run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "cp", "ci:copied.bin", out)
		Expect(r.Code).To(BeZero(), r.Stderr)
		got, err := os.ReadFile(out)
		Expect(err).NotTo(HaveOccurred())
		Expect(sha256.Sum256(got)).To(Equal(sha256.Sum256(data)))
	})

	It("runs an interactive shell on a terminal, with resize", func() {
		shell := startTTY(tenantA.Kubeconfig, "-n", tenantA.Namespace, "exec", "-it", "ci", "--", "sh")
		defer shell.Close()
		shell.Send("echo $((6 * 7))\n")
		Eventually(shell.Output, 20*time.Second).Should(ContainSubstring("42"))
		// The resize travels as kubectl's SIGWINCH, through the API server
		// and the agent, beside the typing: ask again until it has landed.
		shell.Resize(33, 101)
		Eventually(func() string {
			shell.Send("stty size\n")
			return shell.Output()
		}, 30*time.Second, time.Second).Should(ContainSubstring("33 101"))
		shell.Send("exit 5\n")
		Eventually(shell.Exited, 20*time.Second).Should(BeTrue())
		Expect(shell.Code()).To(Equal(5))
	})
})
