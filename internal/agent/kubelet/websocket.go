package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// statusWriteLimit bounds the write of an exec's final status.
const statusWriteLimit = 10 * time.Second

// serveExecV5 serves an exec over WebSockets with v5.channel.k8s.io:
// channels 0-4 are stdin, stdout, stderr, the status and resize, and a
// client closes its stdin with the CLOSE signal. The status is v4's, a
// metav1.Status with the exit code, as the API server's stream translator
// writes it.
func serveExecV5(w http.ResponseWriter, r *http.Request, ex executor, cmd []string, opts *remotecommand.Options, idle time.Duration) {
	log := logr.FromContextOrDiscard(r.Context())
	channels := []wsstream.ChannelType{
		remotecommand.StreamStdIn:  wsstream.IgnoreChannel,
		remotecommand.StreamStdOut: wsstream.IgnoreChannel,
		remotecommand.StreamStdErr: wsstream.IgnoreChannel,
		remotecommand.StreamErr:    wsstream.WriteChannel,
		remotecommand.StreamResize: wsstream.ReadChannel,
	}
	if opts.Stdin {
		channels[remotecommand.StreamStdIn] = wsstream.ReadChannel
	}
	if opts.Stdout {
		channels[remotecommand.StreamStdOut] = wsstream.WriteChannel
	}
	if opts.Stderr {
		channels[remotecommand.StreamStdErr] = wsstream.WriteChannel
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommand.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(idle)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		// Open answered the client.
		log.Info("WebSocket exec not opened", "error", err.Error())
		return
	}
	defer func() { _ = conn.Close() }()
	// An empty message on the lowest writable channel tells the client
	// the streams are open.
	first := remotecommand.StreamErr
	switch {
	case opts.Stdout:
		first = remotecommand.StreamStdOut
	case opts.Stderr:
		first = remotecommand.StreamStdErr
	}
	if _, err := streams[first].Write(nil); err != nil {
		log.Info("WebSocket exec closed at once", "error", err.Error())
		return
	}
	var (
		in          io.Reader
		out, errOut io.WriteCloser
		resize      chan remotecommand.TerminalSize
	)
	if opts.Stdin {
		in = streams[remotecommand.StreamStdIn]
	}
	if opts.Stdout {
		out = streams[remotecommand.StreamStdOut]
	}
	if opts.Stderr {
		errOut = streams[remotecommand.StreamStdErr]
	}
	if opts.TTY {
		resize = make(chan remotecommand.TerminalSize)
		go resizeEvents(r.Context(), streams[remotecommand.StreamResize], resize)
	}
	execErr := ex.ExecInContainer(r.Context(), "", "", "", cmd, in, out, errOut, opts.TTY, resize, 0)
	status, err := json.Marshal(execStatus(execErr))
	if err != nil {
		log.Error(err, "Encoding the exec's status")
		return
	}
	conn.SetWriteDeadline(statusWriteLimit)
	if _, err := streams[remotecommand.StreamErr].Write(status); err != nil {
		log.Info("Writing the exec's status failed", "error", err.Error())
	}
}

// execStatus is the status an exec ends with: success, its exit code, or
// why it failed.
func execStatus(err error) metav1.Status {
	if err == nil {
		return metav1.Status{Status: metav1.StatusSuccess}
	}
	if exit, ok := err.(utilexec.ExitError); ok && exit.Exited() {
		return metav1.Status{
			Status: metav1.StatusFailure,
			Reason: remotecommand.NonZeroExitCodeReason,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type:    remotecommand.ExitCodeCauseType,
				Message: fmt.Sprint(exit.ExitStatus()),
			}}},
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exit),
		}
	}
	return apierrors.NewInternalError(fmt.Errorf("error executing command in container: %w", err)).Status()
}

// resizeEvents decodes the client's terminal sizes into sizes, which it
// closes when the stream ends.
func resizeEvents(ctx context.Context, stream io.Reader, sizes chan<- remotecommand.TerminalSize) {
	defer close(sizes)
	dec := json.NewDecoder(stream)
	for {
		var size remotecommand.TerminalSize
		if err := dec.Decode(&size); err != nil {
			return
		}
		select {
		case sizes <- size:
		case <-ctx.Done():
			return
		}
	}
}
