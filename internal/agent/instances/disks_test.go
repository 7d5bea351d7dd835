package instances

import (
	"os"
	"path/filepath"
	"testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
)

func TestAnInstanceDiskIsClonedThenWipedToNothingWithItsEvidence(t *testing.T) {
	root := t.TempDir()
	golden := filepath.Join(root, "golden.img")
	f, err := os.Create(golden)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("golden bytes"), 512<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	clones := 0
	clone := func(disk, aux string) (string, error) {
		clones++
		for _, dst := range []string{disk, aux} {
			if err := images.SparseCopy(golden, dst); err != nil {
				return "", err
			}
		}
		return string(images.MethodSparseCopy), nil
	}
	d := Disks{Root: root}
	disk, aux, err := d.Prepare("uid-1", clone)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(disk)
	if err != nil || info.Size() != 1<<20 {
		t.Fatalf("the clone is %v (%v), want the golden's size", info, err)
	}
	if _, err := os.Stat(aux); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.InstanceDir("uid-1"), "machine-id"), []byte("tenant data"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A second Prepare keeps the instance's disk as it is.
	if err := os.WriteFile(disk, []byte("written by the guest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Prepare("uid-1", clone); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(disk); string(b) != "written by the guest" || clones != 1 {
		t.Fatalf("Prepare overwrote an existing instance disk (%d clones)", clones)
	}
	if d.Wiped("uid-1") {
		t.Fatal("positive control: the instance has files before the wipe")
	}
	ev, err := d.Wipe("uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Wiped("uid-1") {
		t.Fatal("files survived the wipe")
	}
	if ev.Method != "unlink" || ev.Bytes <= 0 || len(ev.Files) != 3 {
		t.Fatalf("the evidence is %+v, want disk.img, aux.img and machine-id, their bytes, by unlink", ev)
	}
	if _, err := os.Stat(golden); err != nil {
		t.Fatal("the wipe touched the golden")
	}
}

func TestHalfACloneIsMadeAgainWhole(t *testing.T) {
	d := Disks{Root: t.TempDir()}
	dir := d.InstanceDir("uid-2")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A crash after the disk, before the auxiliary storage.
	if err := os.WriteFile(filepath.Join(dir, "disk.img"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := d.Prepare("uid-2", func(disk, aux string) (string, error) {
		if _, err := os.Stat(disk); err == nil {
			t.Fatal("the half clone was not removed before cloning again")
		}
		for _, p := range []string{disk, aux} {
			if err := os.WriteFile(p, []byte("whole"), 0o600); err != nil {
				return "", err
			}
		}
		return "ficlone", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := d.Wipe("uid-2")
	if err != nil || ev.Method != "reflink-unlink" {
		t.Fatalf("the evidence of a reflinked disk is %+v (%v), want reflink-unlink", ev, err)
	}
}

// TestTheRuntimePatchClearsWhatTheNewRuntimeLeavesOut: a VM that was
// Pulling and is now Running loses its pull message and percentage; what
// both hold stays as written.
func TestTheRuntimePatchClearsWhatTheNewRuntimeLeavesOut(t *testing.T) {
	pct := int32(40)
	old := &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMPulling, Message: "pulling golden x: 40%", PullPercent: &pct}
	b, err := runtimePatch(old, computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, BootStage: "desktop"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":{"runtime":{"bootStage":"desktop","message":null,"phase":"Running","pullPercent":null}}}`
	if string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	// Positive control: with nothing before, nothing is nulled.
	b, err = runtimePatch(nil, computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning})
	if err != nil || string(b) != `{"status":{"runtime":{"phase":"Running"}}}` {
		t.Fatalf("got %s (%v)", b, err)
	}
}
