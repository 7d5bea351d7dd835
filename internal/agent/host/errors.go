package host

import "errors"

// Sentinel errors of the host agent.
var (
	// ErrNotEnrolled means no MacNode exists for this chassis: run
	// `macrackctl node enroll` first.
	ErrNotEnrolled = errors.New("chassis not enrolled")
)
