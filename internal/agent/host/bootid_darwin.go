//go:build darwin

package host

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// SysctlBootID is a Mac's boot id: its boot session UUID, which macOS
// makes anew at every boot.
type SysctlBootID struct{}

var _ BootIDSource = SysctlBootID{}

// BootID implements BootIDSource with `sysctl -n kern.bootsessionuuid`.
func (SysctlBootID) BootID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/sbin/sysctl", "-n", "kern.bootsessionuuid").Output()
	if err != nil {
		return "", fmt.Errorf("sysctl -n kern.bootsessionuuid: %w", err)
	}
	id := strings.TrimSpace(string(out))
	if id == "" || len(id) > maxBootID {
		return "", fmt.Errorf("sysctl -n kern.bootsessionuuid: %q is not a boot id", id)
	}
	return id, nil
}
