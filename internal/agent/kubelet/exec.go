package kubelet

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// The kubelet's defaults (streamingConnectionIdleTimeout, and the CRI
// streaming server's stream creation timeout).
const (
	defaultStreamIdleTimeout     = 4 * time.Hour
	defaultStreamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// commandParam is exec's query parameter for the command, once per
// argument (k8s.io/api/core/v1.ExecCommandParam).
const commandParam = "command"

// attachRefused is attach's answer: a VM runs no container process whose
// streams could be attached. 501 with a text body: kubectl prints it
// ("unable to upgrade connection: ..."), over SPDY and over WebSockets.
const attachRefused = "attach is not supported by MacRack VMs: a VM has no container process to attach to; use kubectl exec <pod> -- <command>"

// serveExec runs a command in the VM, over SPDY (a POST, kubectl's
// fallback and the API server's way to a kubelet) or WebSockets (a GET):
// the protocols of the kubelet's CRI streaming server, and v5.
func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		refuse(w, r, refusef(http.StatusBadRequest, "%v", err))
		return
	}
	cmd := r.URL.Query()[commandParam]
	if len(cmd) == 0 {
		refuse(w, r, refusef(http.StatusBadRequest, "exec needs a command: no %s= in the query", commandParam))
		return
	}
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	inst, err := s.target(r.Context(), namespace, pod, r.PathValue("uid"), container, opExec)
	if err != nil {
		refuse(w, r, err)
		return
	}
	ex := executor{guests: s.Guests, inst: inst}
	idle := cmp.Or(s.StreamIdleTimeout, defaultStreamIdleTimeout)
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		// v5.channel.k8s.io, client-go's WebSocket executor's: the
		// kubelet translates it to SPDY for its CRI streaming server;
		// the agent serves it directly.
		serveExecV5(w, r, ex, cmd, opts, idle)
		return
	}
	remotecommand.ServeExec(w, r, ex, pod, string(inst.UID), container, cmd, opts,
		idle, cmp.Or(s.StreamCreationTimeout, defaultStreamCreationTimeout),
		remotecommand.SupportedStreamingProtocols)
}

// serveAttach refuses attach, once authorized, with the reason.
func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	refuse(w, r, refusef(http.StatusNotImplemented, attachRefused))
}

// executor runs an exec through Guests, for one resolved instance.
type executor struct {
	guests Guests
	inst   *computev1alpha1.MacOSInstance
}

var _ remotecommand.Executor = executor{}

// ExecInContainer implements remotecommand.Executor. The names were
// resolved already; the instance stands for them.
func (e executor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	err := e.guests.Exec(ctx, e.inst, cmd, in, out, errOut, tty, resize)
	// ServeExec tells an exit code by a type assertion: unwrap it.
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		return exit
	}
	return err
}
