// Command macrack-runner-stage is gitlab-runner's custom executor driver
// for MacRack: config, prepare, run and cleanup in one binary, the stage
// its first argument. The host agent starts gitlab-runner with it
// configured; it reaches the job's VM through the agent's socket
// (MACRACK_STAGE_SOCKET) and sends the VM only the scripts gitlab-runner
// wrote. See internal/runner/custom.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/boualleiguie/macrack-operator/internal/runner/custom"
)

func main() {
	// gitlab-runner sends SIGTERM to the stage's process group on a
	// timeout or a cancelled job, and SIGKILL later: ending the request
	// stops the script in the VM in between.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := custom.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
