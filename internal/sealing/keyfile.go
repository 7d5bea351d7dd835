//go:build unix

package sealing

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// LoadOrCreate returns the key kept at path, creating it on first use.
//
// The file is exactly the 32-byte X25519 private key, mode 0600. A new one
// is written to a temporary file beside path, synced, and linked into
// place: a link, unlike a rename, never replaces a key another process
// created meanwhile (the later one loads that key instead), and an agent
// killed mid-write leaves no half key. A file that is not regular (a
// symlink included), that others than its owner may read or write, or
// that is not one key long is refused with ErrKeyFile rather than used or
// replaced: it may have leaked, or be someone else's, and a new key would
// make every sealed config on the chassis unreadable.
func LoadOrCreate(path string) (*Key, error) {
	k, err := load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := create(path); err != nil {
		return nil, err
	}
	return load(path)
}

// load reads the key file at path, checking it on the open file itself.
func load(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("guest key %s: %w: a symbolic link", path, ErrKeyFile)
		}
		return nil, fmt.Errorf("opening guest key %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("guest key %s: %w", path, err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("guest key %s: %w: not a regular file (%s)", path, ErrKeyFile, fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("guest key %s: %w: mode %04o lets others than its owner at it; want 0600", path, ErrKeyFile, fi.Mode().Perm())
	case fi.Size() != keySize:
		return nil, fmt.Errorf("guest key %s: %w: %d bytes, want %d", path, ErrKeyFile, fi.Size(), keySize)
	}
	raw := make([]byte, keySize)
	defer clear(raw)
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, fmt.Errorf("reading guest key %s: %w", path, err)
	}
	k, err := newKey(raw)
	if err != nil {
		return nil, fmt.Errorf("guest key %s: %w", path, err)
	}
	return k, nil
}

// create writes a new key at path unless one is there already.
func create(path string) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the guest key's directory: %w", err)
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generating a guest key: %w", err)
	}
	raw := priv.Bytes()
	defer clear(raw)
	// CreateTemp makes the file 0600, and a umask only narrows that.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("creating guest key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // the link keeps the key; the temp name goes
	_, err = tmp.Write(raw)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing guest key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another process made it first: its key stands
		}
		return fmt.Errorf("installing guest key %s: %w", path, err)
	}
	// The link is durable only once its directory is.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing the guest key's directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing the guest key's directory: %w", err)
	}
	return nil
}
