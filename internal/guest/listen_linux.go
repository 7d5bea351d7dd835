package guest

import (
	"fmt"
	"net"

	"github.com/mdlayher/vsock"
)

// Listen listens for vsock connections on port, on this machine's context ID.
func Listen(port uint32) (net.Listener, error) {
	l, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, fmt.Errorf("listening on vsock port %d: %w", port, err)
	}
	return l, nil
}
