package kubelet

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/cri-streaming/pkg/streaming/portforward"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// servePortForward forwards connections to the VM's ports, over SPDY (a
// POST: the API server's way to a kubelet, whatever kubectl spoke to it)
// or WebSockets (a GET, v4.channel.k8s.io, the ports in the query): the
// kubelet's CRI streaming server's protocols. One request carries any
// number of forwarded connections; each reaches the guest on its own.
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	// The WebSocket protocol names its ports in the query; SPDY names
	// each stream's port in the stream's headers.
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		refuse(w, r, refusef(http.StatusBadRequest, "port-forward: %v", err))
		return
	}
	namespace, pod := r.PathValue("namespace"), r.PathValue("pod")
	inst, err := s.targetPod(r.Context(), namespace, pod, r.PathValue("uid"), opPortForward)
	if err != nil {
		refuse(w, r, err)
		return
	}
	fwd := forwarder{ctx: r.Context(), guests: s.Guests, inst: inst}
	portforward.ServePortForward(w, r, fwd, pod, string(inst.UID), opts,
		cmp.Or(s.StreamIdleTimeout, defaultStreamIdleTimeout),
		cmp.Or(s.StreamCreationTimeout, defaultStreamCreationTimeout),
		portforward.SupportedProtocols)
}

// forwarder forwards through Guests, for one resolved instance.
type forwarder struct {
	// ctx is the request's: the streaming server calls PortForward with a
	// background context, and a forwarded connection must end with the
	// request (the client went, the server shuts down).
	ctx    context.Context
	guests Guests
	inst   *computev1alpha1.MacOSInstance
}

var _ portforward.PortForwarder = forwarder{}

// PortForward implements portforward.PortForwarder. The names were
// resolved already; the instance stands for them. Its error is written to
// the client's error stream for that port, and that connection ends.
func (f forwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d is not a TCP port: it must be within 1..65535", port)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.ctx, cancel)
	defer stop()
	log := logr.FromContextOrDiscard(f.ctx).WithValues("port", port)
	log.V(1).Info("Forwarding a connection")
	start := time.Now()
	err := f.guests.PortForward(ctx, f.inst, port, stream)
	if err != nil {
		log.Info("Forwarding a connection failed", "error", err.Error())
		holdError(ctx, start)
		return err
	}
	log.V(1).Info("Forwarded connection closed")
	return nil
}

// errorHold is how long after a forwarded connection began its error may
// be written. The SPDY streaming server calls PortForward as soon as it
// has the connection's two streams, before it has answered the client's
// opening of the data stream; an error then resets that stream, and
// kubectl, which has not got it yet, says "Stream reset" rather than the
// error. A failure that comes fast (a port that nothing listens on) waits
// this long, which the answer takes a fraction of.
const errorHold = 100 * time.Millisecond

// holdError waits until errorHold after start, or until ctx ends.
func holdError(ctx context.Context, start time.Time) {
	wait := errorHold - time.Since(start)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
