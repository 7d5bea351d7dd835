package node

import "example.com/violation/internal/audit/sink"

// Publishes links a sink, and through it the JetStream client, which a
// controller that journals may not.
var Publishes sink.JetStream
