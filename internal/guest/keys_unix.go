//go:build unix

package guest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The lines around the MacRack-managed keys in an authorized_keys file.
const (
	ManagedKeysBegin = "# BEGIN MacRack managed keys"
	ManagedKeysEnd   = "# END MacRack managed keys"
)

// maxAuthorizedKeysFile bounds how much of an authorized_keys file is
// read: a few KiB, or some hundred keys.
const maxAuthorizedKeysFile = 1 << 20

// UnixKeyInstaller installs the MacRack-managed keys of a login user in
// its ~/.ssh/authorized_keys, between the lines ManagedKeysBegin and
// ManagedKeysEnd, keeping every other line of the file as it was, and in
// its place. It makes ~/.ssh (0700) and the file (0600) if need be, owned
// by the user when the agent runs as root (a guest agent does; otherwise
// they are the agent's own user's), and replaces the file at once (a
// temporary file, renamed). It refuses a ~/.ssh or an authorized_keys that
// is a symbolic link, or not a directory or a regular file, and a file
// whose markers are not one BEGIN then one END: the user mends those.
// Installing the same keys again changes nothing. It is safe for
// concurrent use.
type UnixKeyInstaller struct {
	// LookupUser finds a login user by name: os/user.Lookup if nil.
	LookupUser func(name string) (*user.User, error)

	mu sync.Mutex
}

var _ KeyInstaller = (*UnixKeyInstaller)(nil)

// Install implements KeyInstaller.
func (k *UnixKeyInstaller) Install(name string, keys []string) error {
	keys, err := ValidateAuthorizedKeys(keys)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	u, err := k.lookup(name)
	if err != nil {
		return err
	}
	uid, gid, err := ids(u)
	if err != nil {
		return fmt.Errorf("installing the authorized keys of %q: %w", name, err)
	}
	dir, path := authorizedKeysPath(u)
	old, st, err := readAuthorizedKeys(path)
	if err != nil {
		return err
	}
	block, _, err := managedBlock(old)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	content := withManagedKeys(old, block, keys)
	asRoot := os.Geteuid() == 0
	if st != nil && content == old && st.Mode().Perm() == 0o600 && (!asRoot || owns(st, uid, gid)) {
		return nil
	}
	if st == nil && len(keys) == 0 {
		// None to remove, nowhere.
		return nil
	}
	if err := makeSSHDir(dir, asRoot, uid, gid); err != nil {
		return err
	}
	return replaceFile(dir, path, content, asRoot, uid, gid)
}

// Installed implements KeyInstaller.
func (k *UnixKeyInstaller) Installed(name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	u, err := k.lookup(name)
	if err != nil {
		return ""
	}
	_, path := authorizedKeysPath(u)
	content, _, err := readAuthorizedKeys(path)
	if err != nil {
		return ""
	}
	_, keys, err := managedBlock(content)
	if err != nil {
		return ""
	}
	return AuthorizedKeysDigest(keys)
}

func (k *UnixKeyInstaller) lookup(name string) (*user.User, error) {
	lookup := k.LookupUser
	if lookup == nil {
		lookup = user.Lookup
	}
	u, err := lookup(name)
	if err != nil {
		return nil, fmt.Errorf("installing the authorized keys of %q: %w", name, err)
	}
	if u.HomeDir == "" || !filepath.IsAbs(u.HomeDir) {
		return nil, fmt.Errorf("installing the authorized keys of %q: no home directory", name)
	}
	return u, nil
}

func authorizedKeysPath(u *user.User) (dir, path string) {
	dir = filepath.Join(u.HomeDir, ".ssh")
	return dir, filepath.Join(dir, "authorized_keys")
}

func ids(u *user.User) (uid, gid int, err error) {
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return 0, 0, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		return 0, 0, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	return uid, gid, nil
}

func owns(fi fs.FileInfo, uid, gid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid && int(st.Gid) == gid
}

// readAuthorizedKeys reads the file at path without following a symbolic
// link: a root agent must not copy another file's lines into one the user
// owns. A file that does not exist reads as "" and a nil FileInfo.
func readAuthorizedKeys(path string) (string, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, nil
	case errors.Is(err, syscall.ELOOP):
		return "", nil, fmt.Errorf("%s is a symbolic link: MacRack does not install keys through one", path)
	case err != nil:
		return "", nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", nil, err
	}
	if !st.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxAuthorizedKeysFile+1))
	if err != nil {
		return "", nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxAuthorizedKeysFile {
		return "", nil, fmt.Errorf("%s is over %d bytes", path, maxAuthorizedKeysFile)
	}
	return string(b), st, nil
}

// fileLines are content's lines, without their line ends.
func fileLines(content string) []string {
	if content == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(content, "\n"), "\n")
}

// managedBlock finds the managed block in content: the indexes of its
// BEGIN and END lines in fileLines(content), or -1s without one, and the
// keys between them. Anything but no marker or one BEGIN then one END is
// an error.
func managedBlock(content string) (block [2]int, keys []string, err error) {
	begin, end := -1, -1
	for i, l := range fileLines(content) {
		switch strings.TrimSpace(l) {
		case ManagedKeysBegin:
			if begin >= 0 {
				return block, nil, fmt.Errorf("two %q lines: mend the file by hand", ManagedKeysBegin)
			}
			begin = i
		case ManagedKeysEnd:
			if begin < 0 || end >= 0 {
				return block, nil, fmt.Errorf("a %q line without its %q before it: mend the file by hand", ManagedKeysEnd, ManagedKeysBegin)
			}
			end = i
		default:
			if begin >= 0 && end < 0 {
				if k := strings.TrimSpace(l); k != "" {
					keys = append(keys, k)
				}
			}
		}
	}
	if begin >= 0 && end < 0 {
		return block, nil, fmt.Errorf("a %q line without its %q: mend the file by hand", ManagedKeysBegin, ManagedKeysEnd)
	}
	return [2]int{begin, end}, keys, nil
}

// withManagedKeys is content with keys in place of its managed block
// (where block, from managedBlock, says it is), or after its last line;
// without keys, without a block.
func withManagedKeys(content string, block [2]int, keys []string) string {
	var managed []string
	if len(keys) > 0 {
		managed = append(append([]string{ManagedKeysBegin}, keys...), ManagedKeysEnd)
	}
	lines := fileLines(content)
	var out []string
	if block[0] >= 0 {
		out = append(append(append(out, lines[:block[0]]...), managed...), lines[block[1]+1:]...)
	} else {
		out = append(append(out, lines...), managed...)
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}

// makeSSHDir makes ~/.ssh, 0700 and the user's, unless it exists: then it
// must be a directory, not a link to one.
func makeSSHDir(dir string, asRoot bool, uid, gid int) error {
	st, err := os.Lstat(dir)
	switch {
	case err == nil && st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link: MacRack does not install keys through one", dir)
	case err == nil && !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	// Whatever the umask.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if asRoot {
		if err := os.Lchown(dir, uid, gid); err != nil {
			return fmt.Errorf("giving %s to its user: %w", dir, err)
		}
	}
	return nil
}

// replaceFile puts content at path at once: a temporary file beside it,
// 0600 and the user's, synced, then renamed over it.
func replaceFile(dir, path, content string, asRoot bool, uid, gid int) (err error) {
	f, err := os.CreateTemp(dir, ".authorized_keys.macrack-*")
	if err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("installing %s: %w", path, err)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if asRoot {
		if err = f.Chown(uid, gid); err != nil {
			return err
		}
	}
	if _, err = f.WriteString(content); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
