package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// jetStream is the audit stream's sink: one nats-server with JetStream
// (bin/nats-server, built by make nats from the module proxy), or three
// routed into one JetStream cluster, on free loopback ports. Their stores
// live in a directory of their own, removed at the end, and their logs in
// bin/logs.
type jetStream struct {
	servers []*child
	// sink is the operator's --audit-sink; url is what a client takes.
	sink, url string
	store     string
}

// startNATS starts n servers: 1, or 3 for a cluster with the stream at
// three replicas. Each logs to bin/logs/nats-server[-nN].log.
func startNATS(bin string, logs *logFiles, n int) (*jetStream, error) {
	js := &jetStream{}
	ports, err := freePorts(2 * n)
	if err != nil {
		return js, err
	}
	if js.store, err = os.MkdirTemp("", "macrack-nats-"); err != nil {
		return js, err
	}
	client, route := ports[:n], ports[n:]
	var urls, routes []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", route[i]))
	}
	for i := range n {
		name, logName := "nats-server", "nats-server"
		args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(client[i]), "-js"}
		if n > 1 {
			name = fmt.Sprintf("nats-server n%d", i+1)
			logName = fmt.Sprintf("nats-server-n%d", i+1)
			var peers []string
			for k, r := range routes {
				if k != i {
					peers = append(peers, r)
				}
			}
			args = append(args, "--server_name", fmt.Sprintf("n%d", i+1), "--cluster_name", "macrack",
				"--cluster", routes[i], "--routes", strings.Join(peers, ","))
		}
		log, err := logs.open(name, logName, false)
		if err != nil {
			return js, err
		}
		args = append(args, "-sd", filepath.Join(js.store, strconv.Itoa(i+1)), "-l", log.Name())
		c, err := startProcess(name, filepath.Join(bin, "nats-server"), log, args)
		log.Close() // the child holds its own descriptor
		if err != nil {
			return js, fmt.Errorf("%w (make nats builds it)", err)
		}
		js.servers = append(js.servers, c)
	}
	js.url = strings.Join(urls, ",")
	js.sink = urls[0]
	if n > 1 {
		js.sink = js.url + "?replicas=" + strconv.Itoa(n)
	}
	return js, nil
}

// describe is make run's line for the stream.
func (js *jetStream) describe() string {
	if len(js.servers) == 1 {
		return js.url + ", stream MACRACK_AUDIT"
	}
	return fmt.Sprintf("%s,\n                             a %d-node cluster, stream MACRACK_AUDIT at %d replicas", js.url, len(js.servers), len(js.servers))
}

func (js *jetStream) stop() {
	for _, c := range js.servers {
		c.stop()
	}
	if js.store != "" {
		_ = os.RemoveAll(js.store)
	}
}
