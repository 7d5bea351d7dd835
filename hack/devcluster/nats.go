package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// startNATS starts nats-server with JetStream (bin/nats-server, built by
// make nats from the module proxy) on a free loopback port: the audit
// stream's sink. Its store lives in a directory of its own, removed at the
// end, and its log in bin/.
func startNATS(bin string) (*child, string, func(), error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, "", func() {}, err
	}
	store, err := os.MkdirTemp("", "macrack-nats-")
	if err != nil {
		return nil, "", func() {}, err
	}
	cleanup := func() { _ = os.RemoveAll(store) }
	logPath := filepath.Join(bin, "nats-server.log")
	c, err := startProcess("nats-server", filepath.Join(bin, "nats-server"), []string{
		"-a", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-js", "-sd", store, "-l", logPath,
	})
	if err != nil {
		return nil, "", cleanup, fmt.Errorf("%w (make nats builds it)", err)
	}
	return c, fmt.Sprintf("nats://127.0.0.1:%d", ports[0]), cleanup, nil
}
