// Package sink stands in for the audit stream's sinks, which link the
// JetStream client.
package sink

import "github.com/nats-io/nats.go"

// JetStream is here so the controllers' fixtures have something to import.
type JetStream struct{ Conn *nats.Conn }
