//go:build unix && !darwin

package guest

import (
	"bufio"
	"context"
	"os"
	"os/user"
	"strings"
)

// DefaultPath is a login's PATH.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// loginShell is u's shell in /etc/passwd, sh if it says none.
func loginShell(_ context.Context, u *user.User) string {
	if f, err := os.Open("/etc/passwd"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			// name:password:uid:gid:gecos:home:shell
			fields := strings.Split(s.Text(), ":")
			if len(fields) == 7 && fields[0] == u.Username && strings.HasPrefix(fields[6], "/") {
				return fields[6]
			}
		}
	}
	return "/bin/sh"
}
