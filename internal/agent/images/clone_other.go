//go:build !linux && !darwin

package images

// Clone sparse-copies src to dst: no filesystem clone here.
func (c FSCloner) Clone(src, dst string) (Method, error) {
	return MethodSparseCopy, SparseCopy(src, dst)
}
