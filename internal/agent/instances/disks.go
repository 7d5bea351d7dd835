package instances

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Disks lays out the instance disks under the agent's state directory:
// instances/<uid>/{owner.json,clone-method,disk.img,aux.img,machine-id} are
// each instance's own. The goldens they are cloned from are
// internal/agent/images'.
type Disks struct {
	Root string
}

// InstanceDir is where an instance's files live.
func (d Disks) InstanceDir(uid string) string { return filepath.Join(d.Root, "instances", uid) }

// Owner names the instance a disk was made for, so that the reaper can ask
// the API server about it by name.
type Owner struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	LeaseName string    `json:"leaseName,omitempty"`
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

// Clone makes an instance's disk and auxiliary storage from its golden
// (images.Store.Clone), and says how: clonefile, ficlone or sparse-copy.
type Clone func(disk, aux string) (method string, err error)

// cloneMethodFile records how the disk was made, for the wipe's evidence.
const cloneMethodFile = "clone-method"

// Prepare gives the instance its own disk and auxiliary storage, cloned from
// its golden, unless it has them already. It returns their paths.
func (d Disks) Prepare(uid string, clone Clone) (disk, aux string, err error) {
	dir := d.InstanceDir(uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("creating %s: %w", dir, err)
	}
	disk, aux = filepath.Join(dir, "disk.img"), filepath.Join(dir, "aux.img")
	_, errDisk := os.Stat(disk)
	_, errAux := os.Stat(aux)
	if errDisk == nil && errAux == nil {
		return disk, aux, nil
	}
	// Half a clone (a crash between the two files) is made again whole.
	_ = os.Remove(disk)
	_ = os.Remove(aux)
	method, err := clone(disk, aux)
	if err != nil {
		return "", "", fmt.Errorf("cloning the golden of %s: %w", uid, err)
	}
	if err := os.WriteFile(filepath.Join(dir, cloneMethodFile), []byte(method), 0o600); err != nil {
		return "", "", fmt.Errorf("recording how the disk of %s was made: %w", uid, err)
	}
	return disk, aux, nil
}

// Evidence is what a wipe destroyed: the files, what they allocated, and
// how the disk had been made, which says how its blocks were freed.
type Evidence struct {
	Files  []string
	Bytes  int64
	Method string
}

// wipeMethod is how deleting a disk made by clone frees its blocks.
func wipeMethod(clone string) string {
	switch clone {
	case "clonefile":
		// An APFS clone shares the golden's blocks until written: deleting
		// it frees the blocks it wrote, which are all the tenant's; the
		// shared ones were never the tenant's.
		return "apfs-clone-unlink"
	case "ficlone":
		return "reflink-unlink"
	}
	return "unlink"
}

// Wipe removes every file of the instance: its disk, its auxiliary storage
// and its machine identifier. Nothing of a tenant's VM survives it. It
// returns the evidence of what it removed.
func (d Disks) Wipe(uid string) (Evidence, error) {
	dir := d.InstanceDir(uid)
	ev := Evidence{Method: "unlink"}
	if b, err := os.ReadFile(filepath.Join(dir, cloneMethodFile)); err == nil {
		ev.Method = wipeMethod(strings.TrimSpace(string(b)))
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return ev, fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			ev.Bytes += allocated(info)
		}
		if n := e.Name(); n != ownerFile && n != cloneMethodFile {
			ev.Files = append(ev.Files, n)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return ev, fmt.Errorf("wiping %s: %w", dir, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return ev, fmt.Errorf("wiping %s: still present", dir)
	}
	return ev, nil
}

// Wiped reports whether the instance has no files left.
func (d Disks) Wiped(uid string) bool {
	_, err := os.Stat(d.InstanceDir(uid))
	return errors.Is(err, os.ErrNotExist)
}
