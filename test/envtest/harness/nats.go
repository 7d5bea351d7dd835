package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// NATS is a real nats-server with JetStream, built from the module proxy
// by hack/nats (bin/nats-server), on a loopback port. It keeps its store in
// a directory of its own, so that a killed server restarts with its stream.
type NATS struct {
	Port  int
	dir   string
	cmd   *exec.Cmd
	log   *os.File
	bin   string
	start int
}

// StartNATS starts nats-server on a free port, its store under dir.
func StartNATS(dir string) (*NATS, error) {
	bin := filepath.Join(RepoRoot(), "bin", "nats-server")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("nats-server is not built (make nats): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	n := &NATS{Port: port, dir: dir, bin: bin}
	return n, n.Start()
}

// URL is the server's client address.
func (n *NATS) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

// Start (re)starts the server on its port and store, and waits until it
// accepts connections.
func (n *NATS) Start() error {
	n.start++
	log, err := os.Create(filepath.Join(n.dir, fmt.Sprintf("nats-%d.log", n.start)))
	if err != nil {
		return err
	}
	n.log = log
	n.cmd = exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-js", "-sd", filepath.Join(n.dir, "store"))
	n.cmd.Stdout, n.cmd.Stderr = log, log
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("starting nats-server: %w", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.Port), 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nats-server did not listen on %d (log %s)", n.Port, log.Name())
}

// Kill SIGKILLs the server: no goodbye to its clients, no flush.
func (n *NATS) Kill() error {
	if n.cmd == nil || n.cmd.Process == nil {
		return nil
	}
	_ = n.cmd.Process.Kill()
	_, _ = n.cmd.Process.Wait()
	n.cmd = nil
	return n.log.Close()
}
