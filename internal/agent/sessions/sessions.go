// Package sessions reaches an instance's guest for the agent's kubelet
// API: it opens an exec, logs or port-forward session with the guest
// agent, over the vsock proxy of the instance's VM helper, as the image's
// login user. It holds no state: each exec, each log stream and each
// forwarded connection has its own connection, which ends with it.
package sessions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/kubelet"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// Guests implements kubelet.Guests.
type Guests struct {
	// Launcher finds the instance's helper.
	Launcher helper.Launcher
	// GuestPort is the guest agent's vsock port.
	GuestPort uint32
	// Reader reads the instance's MacOSImage, which names the login user.
	Reader client.Reader
}

var _ kubelet.Guests = (*Guests)(nil)

// Exec runs cmd in the guest of inst.
func (g *Guests) Exec(ctx context.Context, inst *computev1alpha1.MacOSInstance, cmd []string, in io.Reader, out, errOut io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize) error {
	s, err := g.session(ctx, inst)
	if err != nil {
		return err
	}
	defer s.Close()
	o := guest.ExecOptions{Command: cmd, Stdin: in, TTY: tty}
	// A nil io.WriteCloser must stay a nil io.Writer: the guest then
	// discards that stream.
	if out != nil {
		o.Stdout = out
	}
	if errOut != nil {
		o.Stderr = errOut
	}
	if resize != nil {
		sizes := make(chan guest.TerminalSize)
		o.Resize = sizes
		done := make(chan struct{})
		defer close(done)
		go func() {
			defer close(sizes)
			for {
				select {
				case sz, ok := <-resize:
					if !ok {
						return
					}
					select {
					case sizes <- guest.TerminalSize{Width: sz.Width, Height: sz.Height}:
					case <-done:
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	err = s.Exec(ctx, o)
	var exit *guest.ExitError
	if errors.As(err, &exit) {
		// As the kubelet answers: kubectl exits with the code.
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with non-zero exit code: %w", err), Code: exit.Code}
	}
	return err
}

// Logs writes the guest agent's log to w.
func (g *Guests) Logs(ctx context.Context, inst *computev1alpha1.MacOSInstance, o kubelet.LogOptions, w io.Writer) error {
	s, err := g.session(ctx, inst)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Logs(ctx, guest.LogOptions{Follow: o.Follow, TailLines: o.TailLines, Timestamps: o.Timestamps,
		LimitBytes: o.LimitBytes, SinceTime: o.SinceTime}, w)
}

// PortForward carries one forwarded connection, stream, to port in the
// guest of inst, over a session of its own, and returns when either end
// closes or ctx ends. A port that nothing listens on in the guest is an
// error that says so.
func (g *Guests) PortForward(ctx context.Context, inst *computev1alpha1.MacOSInstance, port int32, stream io.ReadWriteCloser) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d is not a TCP port: it must be within 1..65535", port)
	}
	s, err := g.session(ctx, inst)
	if err != nil {
		return err
	}
	defer s.Close()
	return forwardError(s.Forward(ctx, uint16(port), stream), port, inst)
}

// forwardError is err as the client is told it: a closed port names the
// port and the VM.
func forwardError(err error, port int32, inst *computev1alpha1.MacOSInstance) error {
	if errors.Is(err, guest.ErrPortClosed) {
		return &PortClosedError{Port: port, Namespace: inst.Namespace, Name: inst.Name, Err: err}
	}
	return err
}

// PortClosedError is a forward to a port that nothing listens on in the
// guest. It unwraps to guest.ErrPortClosed.
type PortClosedError struct {
	Port            int32
	Namespace, Name string
	Err             error
}

func (e *PortClosedError) Error() string {
	return fmt.Sprintf("nothing listens on port %d in VM %s/%s", e.Port, e.Namespace, e.Name)
}

func (e *PortClosedError) Unwrap() error { return e.Err }

// session opens a session with inst's guest agent, as the image's login
// user. The caller closes it.
func (g *Guests) session(ctx context.Context, inst *computev1alpha1.MacOSInstance) (*guest.Session, error) {
	img := &fleetv1alpha1.MacOSImage{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Name: inst.Spec.ImageName}, img); err != nil {
		return nil, fmt.Errorf("reading MacOSImage %s, which names the guest's login user: %w", inst.Spec.ImageName, err)
	}
	user := img.Spec.LoginUserOrDefault()
	running, err := g.Launcher.Running()
	if err != nil {
		return nil, fmt.Errorf("finding the VM helper of instance %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	sock, ok := running[string(inst.UID)]
	if !ok {
		return nil, fmt.Errorf("the VM of instance %s/%s has no helper running on this chassis", inst.Namespace, inst.Name)
	}
	hc, err := helper.Dial(ctx, sock)
	if err != nil {
		return nil, fmt.Errorf("reaching the VM helper of instance %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	conn, err := hc.DialGuest(ctx, g.GuestPort)
	// The guest stream outlives the helper's control connection.
	hc.Close()
	if err != nil {
		return nil, fmt.Errorf("reaching the guest agent of instance %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	s, err := guest.NewClient(conn).Session(ctx, user)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("instance %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	return s, nil
}

// maxScript bounds one script run in a guest: a CI job's step.
const maxScript = 16 << 20

// RunScript runs script in inst's guest with bash, as a login shell of the
// image's login user (the PATH a person at the Mac would have), and writes
// its output, both streams, to out. exitCode is the script's; an error is
// the VM's. The script is read whole and run as one block, with standard
// input at its end, so that no command in it reads the rest of it.
func (g *Guests) RunScript(ctx context.Context, inst *computev1alpha1.MacOSInstance, script io.Reader, out io.Writer) (int, error) {
	body, err := io.ReadAll(io.LimitReader(script, maxScript+1))
	if err != nil {
		return -1, fmt.Errorf("reading the script: %w", err)
	}
	if len(body) > maxScript {
		return -1, fmt.Errorf("the script is over %d bytes", maxScript)
	}
	s, err := g.session(ctx, inst)
	if err != nil {
		return -1, err
	}
	defer s.Close()
	block := make([]byte, 0, len(body)+32)
	block = append(block, "{\nexec 0</dev/null\n"...)
	block = append(block, body...)
	block = append(block, "\n}\n"...)
	w := &lockedWriter{w: out}
	err = s.Exec(ctx, guest.ExecOptions{Command: []string{"/bin/bash", "-l"}, Stdin: bytes.NewReader(block), Stdout: w, Stderr: w})
	var exit *guest.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	}
	return -1, fmt.Errorf("running a script in the guest of instance %s/%s: %w", inst.Namespace, inst.Name, err)
}

// lockedWriter lets a command's two streams share one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Scripts is inst's guest as a CI job's steps reach it.
func (g *Guests) Scripts(inst *computev1alpha1.MacOSInstance) *VMScripts {
	return &VMScripts{g: g, inst: inst.DeepCopy()}
}

// VMScripts runs scripts in one instance's guest (jobs.ScriptRunner).
type VMScripts struct {
	g    *Guests
	inst *computev1alpha1.MacOSInstance
}

// RunScript runs script in the instance's guest.
func (v *VMScripts) RunScript(ctx context.Context, script io.Reader, out io.Writer) (int, error) {
	return v.g.RunScript(ctx, v.inst, script, out)
}
