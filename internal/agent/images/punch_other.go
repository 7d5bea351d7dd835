//go:build !linux

package images

// punchHole is not implemented off Linux (darwin's F_PUNCHHOLE needs
// block-aligned ranges and zeroed edges): a chunk re-fetched over a
// region that holds bytes is then written in full, zeros included, which
// is correct but allocates its zero runs.
//
// TODO: F_PUNCHHOLE on darwin.
func punchHole(f any, off, n int64) error { return errPunchUnsupported }
