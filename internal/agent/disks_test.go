package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAnInstanceDiskIsClonedThenWipedToNothing(t *testing.T) {
	d := Disks{Root: t.TempDir()}
	if err := d.SeedImage("sequoia", 1<<20); err != nil {
		t.Fatal(err)
	}
	disk, aux, err := d.Prepare("uid-1", "sequoia")
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(disk)
	if err != nil || info.Size() != 1<<20 {
		t.Fatalf("the clone is %v (%v), want the image's size", info, err)
	}
	if _, err := os.Stat(aux); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.InstanceDir("uid-1"), "secret"), []byte("tenant data"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A second Prepare keeps the instance's disk as it is.
	if err := os.WriteFile(disk, []byte("written by the guest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Prepare("uid-1", "sequoia"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(disk); string(b) != "written by the guest" {
		t.Fatal("Prepare overwrote an existing instance disk")
	}
	if d.Wiped("uid-1") {
		t.Fatal("positive control: the instance has files before the wipe")
	}
	if err := d.Wipe("uid-1"); err != nil {
		t.Fatal(err)
	}
	if !d.Wiped("uid-1") {
		t.Fatal("files survived the wipe")
	}
	if _, err := os.Stat(filepath.Join(d.Root, "images", "sequoia", "disk.img")); err != nil {
		t.Fatal("the wipe touched the golden image")
	}
}
