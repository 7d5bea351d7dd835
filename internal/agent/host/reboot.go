package host

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
)

// Rebooter reboots the host, the only repair of a stuck kernel VM quota.
// It changes no setting of the host: never the quota, never boot-args.
// A nil error means the reboot is under way; the new boot id proves it.
type Rebooter interface {
	Reboot(ctx context.Context) error
}

// SimRebooter restarts a sim host as a real restart would: every VM helper
// dies at once (their VMs with them), the kernel's VM counter starts from
// zero, stuck slots included, and the host gets a new boot id. The agent,
// which a real restart would end too, stops once Reboot returns and is
// started again by its supervisor.
type SimRebooter struct {
	// HelperDir is the exec launcher's directory: every helper in it dies.
	HelperDir string
	// Kernel is the sim host's kernel.
	Kernel *sim.FileKernel
	// Boot is the sim host's boot id, renewed.
	Boot SimBootID
	Log  logr.Logger
}

var _ Rebooter = SimRebooter{}

// Reboot implements Rebooter.
func (r SimRebooter) Reboot(ctx context.Context) error {
	if err := helper.KillAll(ctx, r.HelperDir); err != nil {
		return fmt.Errorf("sim reboot: %w", err)
	}
	if err := r.Kernel.Reboot(); err != nil {
		return fmt.Errorf("sim reboot: %w", err)
	}
	id, err := r.Boot.NewBoot()
	if err != nil {
		return fmt.Errorf("sim reboot: %w", err)
	}
	if r.Log.GetSink() != nil {
		r.Log.Info("Sim host rebooted", "bootID", id)
	}
	return nil
}
