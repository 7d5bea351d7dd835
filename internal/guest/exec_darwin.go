//go:build darwin

package guest

import (
	"context"
	"os/exec"
	"os/user"
	"strings"
	"time"
)

// DefaultPath is a macOS login's PATH (path_helper's /etc/paths), with
// Homebrew's first, as its shell profile puts it.
const DefaultPath = "/opt/homebrew/bin:/opt/homebrew/sbin:/usr/local/bin:/System/Cryptexes/App/usr/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// loginShell is u's shell in Directory Services, zsh if it says none.
func loginShell(ctx context.Context, u *user.User) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/dscl", ".", "-read", "/Users/"+u.Username, "UserShell").Output()
	if err == nil {
		// "UserShell: /bin/zsh"
		if _, sh, ok := strings.Cut(strings.TrimSpace(string(out)), ":"); ok && strings.HasPrefix(strings.TrimSpace(sh), "/") {
			return strings.TrimSpace(sh)
		}
	}
	return "/bin/zsh"
}
