// Package logging is the one log format of every MacRack process (the
// operator, the host and guest agents, the VM helpers, simfleet): zap's
// JSON encoder, one object a line, with ISO 8601 times and no stack traces
// below a panic. JSON, because the lines are read by programs as much as by
// people (make run shows the errors of its processes' logs, and jq reads
// them); no stacks, because a wrapped error names its path through
// MacRack's code and a stack adds only controller-runtime's frames.
package logging

import (
	"flag"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Options are the format's zap options; the --zap-* flags that BindFlags
// adds may still change them.
func Options() *zap.Options {
	return &zap.Options{
		Development:     false,
		TimeEncoder:     zapcore.ISO8601TimeEncoder,
		StacktraceLevel: zapcore.DPanicLevel,
	}
}

// BindFlags binds the --zap-* flags on fs and returns the options they
// set, with the format's defaults.
func BindFlags(fs *flag.FlagSet) *zap.Options {
	o := Options()
	o.BindFlags(fs)
	return o
}

// New is the logger of the options, once the flags are parsed.
func New(o *zap.Options) logr.Logger {
	return zap.New(zap.UseFlagOptions(o))
}
