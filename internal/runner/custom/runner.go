package custom

import (
	"context"
	"io"
)

// ScriptRunner runs a shell script in the job's VM as its login user
// (the script on stdin of the guest's shell), writing the output to out.
// exitCode is the script's; err means the VM could not run it (a system
// failure). It must return soon after ctx ends: that is how a cancelled
// or timed-out job stops.
type ScriptRunner interface {
	RunScript(ctx context.Context, script io.Reader, out io.Writer) (exitCode int, err error)
}

// Prober is a ScriptRunner that can tell whether the VM answers without
// running a script. Without it the prepare stage runs "exit 0".
type Prober interface {
	Probe(ctx context.Context) error
}

// Cleaner is a ScriptRunner told when gitlab-runner's cleanup stage runs,
// the job's last. The agent tears the VM down after RunJob either way.
type Cleaner interface {
	Cleanup(ctx context.Context) error
}
