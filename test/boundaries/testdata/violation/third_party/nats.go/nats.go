// Package nats stands in for the JetStream client.
package nats

// Conn is here so the sink fixture has something to import.
type Conn struct{}
