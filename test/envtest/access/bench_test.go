package access

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// benchOnce sets the suite's world up once for every benchmark of a run;
// the process ends with the run, and tearDown runs from TestMain's exit.
var benchOnce sync.Once

func benchSetUp(b *testing.B) {
	b.Helper()
	RegisterTestingT(b)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	benchOnce.Do(func() {
		setUp()
		benchUp = true
	})
}

// benchUp says whether a benchmark started the world, for TestMain.
var benchUp bool

func TestMain(m *testing.M) {
	code := m.Run()
	if benchUp {
		tearDown()
	}
	os.Exit(code)
}

// percentiles reports the p50 and p99 of ds, in milliseconds.
func percentiles(b *testing.B, name string, ds []time.Duration) (p50, p99 float64) {
	b.Helper()
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / float64(time.Millisecond)
	}
	p50, p99 = at(0.50), at(0.99)
	b.ReportMetric(p50, name+"-p50-ms")
	b.ReportMetric(p99, name+"-p99-ms")
	return p50, p99
}

// hopExec is one exec of true over the agent-to-guest hop alone, as the
// agent makes it: the VM helper's socket, its vsock proxy, a session and
// the exec.
func hopExec(sock string) error {
	hc, err := helper.Dial(ctx, sock)
	if err != nil {
		return err
	}
	conn, err := hc.DialGuest(ctx, guest.DefaultPort)
	hc.Close()
	if err != nil {
		return err
	}
	s, err := guest.NewClient(conn).Session(ctx, "admin")
	if err != nil {
		conn.Close()
		return err
	}
	defer s.Close()
	return s.Exec(ctx, guest.ExecOptions{Command: []string{"true"}})
}

// BenchmarkKubectlExec: `kubectl exec <vm> -- true` end to end, as tenant
// A, and beside it in the same run the agent-to-guest hop alone (helper,
// vsock proxy, session, exec). hop-share is the hop's p50 over kubectl's:
// the part of a round trip MacRack's guest path takes. Run with
// -benchtime=100x for 100 of each.
func BenchmarkKubectlExec(b *testing.B) {
	benchSetUp(b)
	sock := filepath.Join(agents[tenantA.Node].StateDir, "run", string(tenantA.Instance.UID)+".sock")
	Expect(hopExec(sock)).To(Succeed())
	kubectlTimes := make([]time.Duration, 0, b.N)
	hopTimes := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "exec", "ci", "--", "true")
		kubectlTimes = append(kubectlTimes, time.Since(start))
		if r.Code != 0 {
			b.Fatalf("kubectl exec: %d %s", r.Code, r.Stderr)
		}
		start = time.Now()
		if err := hopExec(sock); err != nil {
			b.Fatal(err)
		}
		hopTimes = append(hopTimes, time.Since(start))
	}
	b.StopTimer()
	k50, _ := percentiles(b, "kubectl", kubectlTimes)
	h50, _ := percentiles(b, "hop", hopTimes)
	b.ReportMetric(100*h50/k50, "hop-share-%")
}

// sinkConn is what Forward carries to the guest: the bytes written into
// w, read by the forward; what the guest answers is dropped.
type sinkConn struct {
	*io.PipeReader
}

func (sinkConn) Write(p []byte) (int, error) { return len(p), nil }

// sendAll writes size bytes in 1 MiB writes to w, then closes it.
func sendAll(w io.WriteCloser, size int) error {
	chunk := make([]byte, 1<<20)
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return err
		}
	}
	return w.Close()
}

// BenchmarkForwardThroughput: 1 GiB per iteration to the sim guest's TCP
// sink (port 9), side by side in one run: "hop" through the agent-to-guest
// path a port-forward takes (helper socket, vsock proxy, session, forward
// channel), "loopback" as a direct TCP copy on loopback of the same bytes,
// and "kubectl-port-forward" end to end through the API server (256 MiB).
func BenchmarkForwardThroughput(b *testing.B) {
	benchSetUp(b)
	const size = 1 << 30
	sock := filepath.Join(agents[tenantA.Node].StateDir, "run", string(tenantA.Instance.UID)+".sock")
	b.Run("hop", func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			hc, err := helper.Dial(ctx, sock)
			if err != nil {
				b.Fatal(err)
			}
			conn, err := hc.DialGuest(ctx, guest.DefaultPort)
			hc.Close()
			if err != nil {
				b.Fatal(err)
			}
			s, err := guest.NewClient(conn).Session(ctx, "admin")
			if err != nil {
				b.Fatal(err)
			}
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- s.Forward(ctx, 9, sinkConn{pr}) }()
			if err := sendAll(pw, size); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	b.Run("loopback", func(b *testing.B) {
		b.SetBytes(size)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		for range b.N {
			read := make(chan error, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					read <- err
					return
				}
				defer c.Close()
				_, err = io.Copy(io.Discard, c)
				read <- err
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if err := sendAll(c, size); err != nil {
				b.Fatal(err)
			}
			if err := <-read; err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kubectl-port-forward", func(b *testing.B) {
		const size = 256 << 20
		b.SetBytes(size)
		fwd := portForward(tenantA.Kubeconfig, tenantA.Namespace, "ci", 9)
		defer fwd.Stop()
		for range b.N {
			c, err := net.Dial("tcp", "127.0.0.1:"+fwd.Port)
			if err != nil {
				b.Fatal(err)
			}
			if err := sendAll(c.(*net.TCPConn), size); err != nil {
				b.Fatal(err)
			}
		}
	})
}
