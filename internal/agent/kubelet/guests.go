package kubelet

import (
	"context"
	"io"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// Guests reaches the VMs: the integrator implements it through the VM
// helper and the guest agent. The server calls it only for an instance its
// Resolver returned, on this node, holding a slot, and Running.
type Guests interface {
	// Exec runs cmd in the VM of inst. A command that ran and exited
	// non-zero returns an error satisfying k8s.io/utils/exec.ExitError
	// (e.g. utilexec.CodeExitError) so that kubectl sees the exit code.
	//
	// in, out and errOut are nil when the client did not ask for them
	// (errOut always with tty, where the terminal merges the two). resize
	// is nil without tty; it is closed when the client's resize stream
	// ends. Exec returns when the command ends, or when ctx does.
	Exec(ctx context.Context, inst *computev1alpha1.MacOSInstance, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error
	// Logs writes the VM's log to w, as o asks, and returns at its end,
	// or, when o.Follow, when ctx ends. An error returned before anything
	// was written reaches the client as the request's error; a write to w
	// that fails (the client went, limitBytes was reached) should end it.
	Logs(ctx context.Context, inst *computev1alpha1.MacOSInstance, o LogOptions, w io.Writer) error
	// PortForward carries one forwarded connection, stream, to port (TCP,
	// on the VM's own loopback) in the VM of inst, and returns when the
	// connection ends either side, or when ctx does. A port outside
	// 1..65535 is refused; a port nothing listens on is an error that says
	// so, returned promptly: the client sees it for that connection, which
	// ends. The server calls it once per forwarded connection, and may
	// call it for several ports of one VM at once.
	PortForward(ctx context.Context, inst *computev1alpha1.MacOSInstance, port int32, stream io.ReadWriteCloser) error
}

// LogOptions are a containerLogs request's query, checked: TailLines is
// 0 or more, LimitBytes 1 or more, and sinceSeconds has become SinceTime.
// The server also cuts the output at LimitBytes.
type LogOptions struct {
	Follow     bool
	TailLines  *int64
	Timestamps bool
	LimitBytes *int64
	SinceTime  *time.Time
}
