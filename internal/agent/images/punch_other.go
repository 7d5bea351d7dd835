//go:build !linux

package images

// punchHole is not implemented off Linux (darwin's F_PUNCHHOLE needs
// block-aligned ranges and zeroed edges): a chunk re-fetched over a
// region that holds bytes is then written in full, zeros included, which
// is correct but allocates its zero runs. Only chunks in flight when a
// pull stopped, or found corrupt, are re-fetched so.
func punchHole(f any, off, n int64) error { return errPunchUnsupported }
