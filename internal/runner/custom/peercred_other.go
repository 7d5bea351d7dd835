//go:build !linux && !darwin

package custom

import "net"

// peerUID cannot ask this system; the socket's 0700 directory is the
// only guard then.
func peerUID(*net.UnixConn) (int, error) { return -1, errPeerUnknown }
