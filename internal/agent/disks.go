package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Disks lays out images and instance disks under the agent's state
// directory: images/<image>/{disk.img,aux.img} are the golden copies,
// instances/<uid>/{owner.json,disk.img,aux.img,machine-id} each instance's
// own.
type Disks struct {
	Root string
}

// ImagePaths are an image's golden disk and auxiliary-storage template.
func (d Disks) ImagePaths(image string) (disk, aux string) {
	dir := filepath.Join(d.Root, "images", image)
	return filepath.Join(dir, "disk.img"), filepath.Join(dir, "aux.img")
}

// InstanceDir is where an instance's files live.
func (d Disks) InstanceDir(uid string) string { return filepath.Join(d.Root, "instances", uid) }

// Owner names the instance a disk was made for, so that the reaper can ask
// the API server about it by name.
type Owner struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// ownerFile is written before any disk file, so that a disk always has it
// unless a crash came in between.
const ownerFile = "owner.json"

// RecordOwner writes the instance directory's owner record, once.
func (d Disks) RecordOwner(o Owner) error {
	dir := d.InstanceDir(string(o.UID))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	p := filepath.Join(dir, ownerFile)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("recording the owner of %s: %w", o.UID, err)
	}
	return os.Rename(p+".tmp", p)
}

// OwnerOf reads the owner record of the instance directory uid.
func (d Disks) OwnerOf(uid string) (Owner, error) {
	var o Owner
	b, err := os.ReadFile(filepath.Join(d.InstanceDir(uid), ownerFile))
	if err != nil {
		return o, err
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("reading the owner of %s: %w", uid, err)
	}
	if o.UID != types.UID(uid) || o.Namespace == "" || o.Name == "" {
		return o, fmt.Errorf("the owner record of %s names %s/%s (%s)", uid, o.Namespace, o.Name, o.UID)
	}
	return o, nil
}

// List returns the UIDs of every instance directory: every disk on the
// chassis, whether or not an instance still names it, sorted.
func (d Disks) List() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.Root, "instances"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing instance disks: %w", err)
	}
	var uids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			uids = append(uids, e.Name())
		}
	}
	sort.Strings(uids)
	return uids, nil
}

// Prepare gives the instance its own disk and auxiliary storage, cloned from
// the image (a copy-on-write clone where the filesystem has one), unless it
// has them already. It returns their paths.
func (d Disks) Prepare(uid, image string) (disk, aux string, err error) {
	srcDisk, srcAux := d.ImagePaths(image)
	dir := d.InstanceDir(uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("creating %s: %w", dir, err)
	}
	disk, aux = filepath.Join(dir, "disk.img"), filepath.Join(dir, "aux.img")
	for _, p := range [][2]string{{srcDisk, disk}, {srcAux, aux}} {
		if _, err := os.Stat(p[1]); err == nil {
			continue
		}
		if err := cloneFile(p[0], p[1]); err != nil {
			return "", "", fmt.Errorf("cloning %s: %w", p[0], err)
		}
	}
	return disk, aux, nil
}

// Wipe removes every file of the instance: its disk, its auxiliary storage
// and its machine identifier. Nothing of a tenant's VM survives it.
func (d Disks) Wipe(uid string) error {
	dir := d.InstanceDir(uid)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("wiping %s: %w", dir, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wiping %s: still present", dir)
	}
	return nil
}

// Wiped reports whether the instance has no files left.
func (d Disks) Wiped(uid string) bool {
	_, err := os.Stat(d.InstanceDir(uid))
	return errors.Is(err, os.ErrNotExist)
}

// SeedImage writes a small golden disk and auxiliary template for image, as
// the sim does until images are pulled from the central store.
func (d Disks) SeedImage(image string, size int64) error {
	disk, aux := d.ImagePaths(image)
	if _, err := os.Stat(disk); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(disk), 0o755); err != nil {
		return err
	}
	for _, p := range []string{disk, aux} {
		f, err := os.Create(p + ".tmp")
		if err != nil {
			return err
		}
		if _, err := io.WriteString(f, "macrack sim golden image "+image+"\n"); err != nil {
			f.Close()
			return err
		}
		// Sparse: the size is claimed, not written.
		if err := f.Truncate(size); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return err
		}
	}
	return nil
}

// copyFile is cloneFile's fallback: a plain copy, written beside dst and
// renamed into place, so that a crash never leaves half a disk.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst+".tmp", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Truncate(info.Size()); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}
