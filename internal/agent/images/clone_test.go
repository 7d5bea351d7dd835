package images

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// sparseFile writes a file of size bytes with data at the given offsets
// (each region n bytes of random data) and allocated zeros at zeroAt,
// holes elsewhere. It returns its content.
func sparseFile(t testing.TB, path string, size int64, dataAt []int64, n int, zeroAt []int64) []byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 0)
	if size <= 64<<20 {
		want = make([]byte, size)
	}
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	buf := make([]byte, n)
	for _, off := range dataAt {
		for i := range buf {
			buf[i] = byte(rng.Uint32() | 1)
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if len(want) > 0 {
			copy(want[off:], buf)
		}
	}
	zeros := make([]byte, n)
	for _, off := range zeroAt {
		if _, err := f.WriteAt(zeros, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return want
}

func TestSparseCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	// 16 MiB: data at a few places, a 1 MiB run of written zeros, the
	// rest holes; the size is not a multiple of 64 KiB.
	size := int64(16<<20 + 777)
	want := sparseFile(t, src, size, []int64{0, 3 << 20, 9<<20 + 4096, size - 1<<20}, 1<<20, []int64{6 << 20})
	dst := filepath.Join(dir, "dst")
	if err := SparseCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("copy differs")
	}
	as, ad := allocated(t, src), allocated(t, dst)
	t.Logf("src allocates %d, dst %d, of %d", as, ad, size)
	if ad > as-(1<<20) || ad > 5<<20 {
		t.Errorf("copy allocates %d bytes, src %d: holes or zero runs were written", ad, as)
	}
	if exists(dst + ".tmp") {
		t.Error("dst.tmp left behind")
	}
	// dst exists: refused.
	if err := SparseCopy(src, dst); !errors.Is(err, fs.ErrExist) {
		t.Errorf("copy over an existing file: %v", err)
	}
	// Positive control for the refusal: another name works, and
	// SparseCopier says what it did.
	m, err := SparseCopier{}.Clone(src, filepath.Join(dir, "dst2"))
	if err != nil || m != MethodSparseCopy {
		t.Fatalf("SparseCopier: %s, %v", m, err)
	}
	// An all-hole file and an empty file.
	for _, sz := range []int64{0, 5 << 20} {
		s := filepath.Join(dir, "holes")
		os.Remove(s)
		sparseFile(t, s, sz, nil, 0, nil)
		d := filepath.Join(dir, "holes-copy")
		os.Remove(d)
		if err := SparseCopy(s, d); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(d); err != nil || fi.Size() != sz || allocated(t, d) != 0 {
			t.Errorf("copy of %d bytes of holes: %v, allocates %d", sz, err, allocated(t, d))
		}
	}
}

func TestSeekData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	sparseFile(t, path, 8<<20, []int64{2 << 20}, 1<<20, nil)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, hole, ok := nextData(f, 0, 8<<20)
	t.Logf("first data extent [%d, %d)", data, hole)
	if !ok || data > 2<<20 || hole < 3<<20 {
		t.Errorf("first data extent [%d, %d), %v; want it to cover [2 MiB, 3 MiB)", data, hole, ok)
	}
	if _, _, ok := nextData(f, 4<<20, 8<<20); ok {
		t.Error("data after 4 MiB")
	}
	if regionHasData(f, 4<<20, 4<<20) || regionHasData(f, 0, 1<<20) {
		t.Error("holes reported as data")
	}
	if !regionHasData(f, 1<<20, 2<<20) || !regionHasData(struct{}{}, 0, 1) {
		t.Error("data (or a file that cannot tell) reported as holes")
	}
}
