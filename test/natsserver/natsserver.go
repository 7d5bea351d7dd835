// Package natsserver runs the real nats-server that `make nats` builds into
// bin/nats-server (hack/nats) for tests: one server with JetStream, or a
// JetStream cluster of several, on loopback ports picked free, each keeping
// its store under a directory the test owns. A server killed and started
// again comes back with its store and its ports, as a rebooted host would.
// On Linux every server dies with the test process, even one killed by a
// timeout.
//
// A missing binary is an error that says to run `make nats`, never a reason
// to skip.
package natsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startTimeout bounds how long a server may take to report itself healthy.
const startTimeout = 60 * time.Second

// Binary is bin/nats-server under the repository's root.
func Binary() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	// test/natsserver/natsserver.go -> repository root
	bin := filepath.Join(filepath.Dir(file), "..", "..", "bin", "nats-server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("nats-server is not built (make nats): %w", err)
	}
	return filepath.Clean(bin), nil
}

// Server is one nats-server with JetStream.
type Server struct {
	// Name is its server_name, which JetStream's cluster answers name it by.
	Name string
	// Port, ClusterPort and HTTPPort are its client, route and monitoring
	// ports on 127.0.0.1; ClusterPort is 0 for a server alone.
	Port, ClusterPort, HTTPPort int

	bin, dir, conf string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
	starts int
	paused bool
}

// Start runs one server alone, its store and log under dir.
func Start(dir string) (*Server, error) {
	servers, err := newServers(dir, 1)
	if err != nil {
		return nil, err
	}
	s := servers[0]
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, s.waitHealthy()
}

// Cluster is a JetStream cluster: every server routes to every other.
type Cluster struct {
	Servers []*Server
}

// StartCluster runs n servers as one JetStream cluster, named macrack, each
// with a directory of its own under dir, and returns once JetStream is up
// on every one (its meta group has a leader).
func StartCluster(dir string, n int) (*Cluster, error) {
	servers, err := newServers(dir, n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Servers: servers}
	for _, s := range servers {
		if err := s.Start(); err != nil {
			c.Kill()
			return nil, err
		}
	}
	for _, s := range servers {
		if err := s.waitHealthy(); err != nil {
			c.Kill()
			return nil, err
		}
	}
	return c, nil
}

// newServers picks each server's ports and writes its configuration.
func newServers(dir string, n int) ([]*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	per := 2
	if n > 1 {
		per = 3
	}
	ports, err := freePorts(n * per)
	if err != nil {
		return nil, err
	}
	servers := make([]*Server, n)
	for i := range servers {
		s := &Server{Name: fmt.Sprintf("n%d", i+1), Port: ports[i*per], HTTPPort: ports[i*per+1], bin: bin}
		if n > 1 {
			s.ClusterPort = ports[i*per+2]
		}
		s.dir = filepath.Join(dir, s.Name)
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, err
		}
		servers[i] = s
	}
	for _, s := range servers {
		conf := fmt.Sprintf("server_name: %q\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n",
			s.Name, s.Port, s.HTTPPort, filepath.Join(s.dir, "store"))
		if n > 1 {
			var routes []string
			for _, o := range servers {
				if o != s {
					routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats://127.0.0.1:%d", o.ClusterPort)))
				}
			}
			conf += fmt.Sprintf("cluster {\n  name: \"macrack\"\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n", s.ClusterPort, strings.Join(routes, ", "))
		}
		s.conf = filepath.Join(s.dir, "nats.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
			return nil, err
		}
	}
	return servers, nil
}

// freePorts picks n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// URL is the server's client address.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.Port) }

// Start (re)starts the server with its configuration and store, and returns
// once it accepts connections. A cluster's server may not have found its
// peers yet.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("nats-server %s is running", s.Name)
	}
	s.starts++
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("nats-%d.log", s.starts)))
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "-c", s.conf)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = serverProcAttr()
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting nats-server %s: %w", s.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.log = cmd, exited, log
	deadline := time.Now().Add(startTimeout)
	for {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("nats-server %s exited before listening (log %s)", s.Name, log.Name())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server %s did not listen on %d (log %s)", s.Name, s.Port, log.Name())
		}
	}
}

// waitHealthy waits until the server's /healthz says JetStream is up.
func (s *Server) waitHealthy() error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		if last = s.getJSON("/healthz", nil); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nats-server %s is not healthy: %w", s.Name, last)
}

// Running says whether the process runs (paused or not).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Kill SIGKILLs the server, as a lost host: no goodbye to its clients or
// its peers, no flush. Killing a killed server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.paused = nil, false
	return s.log.Close()
}

// Pause freezes the server (SIGSTOP): its sockets stay open and the kernel
// still takes what its peers send, but it reads, answers and writes
// nothing, as a host stalled in its hypervisor.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume thaws a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("nats-server %s is not running", s.Name)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	if paused {
		if err := stopped(s.cmd.Process.Pid, 10*time.Second); err != nil {
			return fmt.Errorf("pausing nats-server %s: %w", s.Name, err)
		}
	}
	s.paused = paused
	return nil
}

// Clients names the client connections the server holds (nats.Name).
func (s *Server) Clients() ([]string, error) {
	var connz struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if err := s.getJSON("/connz?limit=4096", &connz); err != nil {
		return nil, err
	}
	var names []string
	for _, c := range connz.Connections {
		names = append(names, c.Name)
	}
	return names, nil
}

// RaftGroup is a Raft group as one of its members sees it (/raftz).
type RaftGroup struct {
	State  string `json:"state"`
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	// PIndex is the last entry in the member's log; Committed, the last
	// one it knows a quorum holds; Applied, the last one it applied.
	PIndex    uint64 `json:"pindex"`
	Committed uint64 `json:"committed"`
	Applied   uint64 `json:"applied"`
}

// Raft reads the server's view of the Raft group of a stream (its
// ClusterInfo.RaftGroup) of the global account, where these servers keep
// every stream.
func (s *Server) Raft(group string) (RaftGroup, error) {
	const acc = "$G"
	var raftz map[string]map[string]RaftGroup
	q := url.Values{"acc": {acc}, "group": {group}}
	if err := s.getJSON("/raftz?"+q.Encode(), &raftz); err != nil {
		return RaftGroup{}, err
	}
	g, ok := raftz[acc][group]
	if !ok {
		return RaftGroup{}, fmt.Errorf("nats-server %s has no Raft group %s", s.Name, group)
	}
	return g, nil
}

// getJSON GETs path on the monitoring port and decodes a 200's body into
// out, if not nil.
func (s *Server) getJSON(path string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", s.HTTPPort, path), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s on nats-server %s: %s: %s", path, s.Name, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// URL is every server's client address, separated by commas, as a NATS
// client takes a cluster's.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Server is the server named name, or nil.
func (c *Cluster) Server(name string) *Server {
	for _, s := range c.Servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Heal resumes every paused server and starts every killed one, and waits
// until JetStream is up on each: what a test that failed half-way through
// a fault leaves to the next.
func (c *Cluster) Heal() error {
	for _, s := range c.Servers {
		s.mu.Lock()
		running, paused := s.cmd != nil, s.paused
		s.mu.Unlock()
		var err error
		switch {
		case paused:
			err = s.Resume()
		case !running:
			err = s.Start()
		}
		if err != nil {
			return err
		}
	}
	for _, s := range c.Servers {
		if err := s.waitHealthy(); err != nil {
			return err
		}
	}
	return nil
}

// Kill kills every server, a paused one too.
func (c *Cluster) Kill() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Kill())
	}
	return errors.Join(errs...)
}

// js connects to the running servers, for one request.
func (c *Cluster) js(ctx context.Context) (jetstream.JetStream, func(), error) {
	var urls []string
	for _, s := range c.Servers {
		if s.Running() {
			urls = append(urls, s.URL())
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name("natsserver-probe"), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// StreamInfo is the stream's state as its leader answers it.
func (c *Cluster) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	js, done, err := c.js(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// WaitStream waits until the stream has a leader and every replica is
// current, as after a server's return, and returns its state.
func (c *Cluster) WaitStream(ctx context.Context, stream string, timeout time.Duration) (*jetstream.StreamInfo, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		info, err := c.StreamInfo(ctx, stream)
		if err == nil {
			err = current(info)
		}
		if err == nil {
			return info, nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("stream %s: %w", stream, last)
}

func current(info *jetstream.StreamInfo) error {
	ci := info.Cluster
	if ci == nil || ci.Leader == "" {
		return errors.New("no leader")
	}
	if len(ci.Replicas)+1 != info.Config.Replicas {
		return fmt.Errorf("%d replicas beside the leader, want %d", len(ci.Replicas), info.Config.Replicas-1)
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline {
			return fmt.Errorf("replica %s is not current", r.Name)
		}
	}
	return nil
}

// StreamLeader is the server that leads the stream.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (*Server, error) {
	info, err := c.StreamInfo(ctx, stream)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil || c.Server(info.Cluster.Leader) == nil {
		return nil, fmt.Errorf("stream %s has no leader among the cluster's servers", stream)
	}
	return c.Server(info.Cluster.Leader), nil
}

// MoveStreamLeader makes to the stream's leader (a step-down with to
// preferred), and waits until it leads with every replica current.
func (c *Cluster) MoveStreamLeader(ctx context.Context, stream string, to *Server) error {
	js, done, err := c.js(ctx)
	if err != nil {
		return err
	}
	defer done()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.WaitStream(ctx, stream, time.Until(deadline))
		if err != nil {
			return err
		}
		if info.Cluster.Leader == to.Name {
			return nil
		}
		req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": to.Name}})
		var resp struct {
			Error *jetstream.APIError `json:"error"`
		}
		msg, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
		if err == nil {
			err = json.Unmarshal(msg.Data, &resp)
		}
		if err == nil && resp.Error != nil {
			err = resp.Error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("moving the leader of stream %s to %s: %v", stream, to.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ClientServer is the running server that holds the client connection
// named name.
func (c *Cluster) ClientServer(name string) (*Server, error) {
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		names, err := s.Clients()
		if err != nil {
			return nil, err
		}
		if slices.Contains(names, name) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no server holds a client named %q", name)
}
