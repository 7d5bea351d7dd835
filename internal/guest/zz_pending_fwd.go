package guest

// TEMP: stand-ins for internal/guest's port-forward and authorized-keys API,
// which another branch adds, so that the host side compiles until it is
// merged. The integrator drops this commit (this file, and the
// AuthorizedKeysDigest field of Report in messages.go) at the merge.

import (
	"context"
	"errors"
	"io"
	"strconv"
)

var ErrPortClosed error = errors.New("pending")

func (s *Session) Forward(ctx context.Context, port uint16, conn io.ReadWriteCloser) error {
	return errors.New("pending")
}

func (s *Session) SetAuthorizedKeys(ctx context.Context, keys []string) error {
	return errors.New("pending")
}

func AuthorizedKeysDigest(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return "pending-" + strconv.Itoa(len(keys))
}
