// Package audit stands in for the exporter, which alone may link a sink.
package audit

import "example.com/violation/internal/audit/sink"

// Publishes is the exporter's sink.
var Publishes sink.JetStream
