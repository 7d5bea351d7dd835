package harness

import "github.com/boualleiguie/macrack-operator/test/natsserver"

// NATS is a real nats-server with JetStream, built from the module proxy
// by hack/nats (bin/nats-server), on loopback ports. It keeps its store in
// a directory of its own, so that a killed server restarts with its stream.
type NATS = natsserver.Server

// StartNATS starts nats-server on free ports, its store under dir.
func StartNATS(dir string) (*NATS, error) { return natsserver.Start(dir) }
