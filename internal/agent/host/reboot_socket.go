package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"syscall"

	"github.com/go-logr/logr"
)

// maxRebootOutput bounds what is kept of the reboot job's output.
const maxRebootOutput = 4096

// requestReboot connects to the reboot helper's socket, which makes launchd
// run the helper's shutdown. It returns once the connection is made: the
// reboot itself is seen in the boot session UUID changing, not here.
//
// The connection stays open, drained, until the job closes it: it is
// shutdown's stdout, and shutdown writes to it while it carries out the
// reboot, so closing it early could end shutdown with SIGPIPE. What the job
// wrote is logged when it closes.
func requestReboot(ctx context.Context, socketPath string, log logr.Logger) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
			return fmt.Errorf("requesting a reboot: no reboot helper listens on %s; install the %s LaunchDaemon: %w", socketPath, RebootDaemonLabel, err)
		case errors.Is(err, fs.ErrPermission):
			return fmt.Errorf("requesting a reboot: the agent's user may not reach %s; its directory must be the agent's group's: %w", socketPath, err)
		}
		return fmt.Errorf("requesting a reboot through %s: %w", socketPath, err)
	}
	go func() {
		defer conn.Close()
		var out bytes.Buffer
		_, err := io.Copy(&limitedBuffer{b: &out, max: maxRebootOutput}, conn)
		log.Info("The reboot helper closed its connection", "output", out.String(), "error", err)
	}()
	return nil
}

// limitedBuffer keeps the first max bytes written to it and discards the
// rest, so that the drain never stops reading.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
