package images_test

// The instance side of an interrupted clone: package instances imports
// images, so this test is in the external test package.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/agent/instances"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/golden/simgolden"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// An agent killed mid-clone leaves, at worst, a <disk>.tmp and no disk.img
// (SparseCopy and FICLONE write a temporary renamed over the destination),
// or a disk.img without aux.img (killed between the two). Prepare takes
// neither for a disk: it clones again, and the instance gets the golden's
// bytes, not the leftovers.
func TestPrepareRemakesAClonePastAKill(t *testing.T) {
	reg := registry.StartT(t)
	ctx := context.Background()
	src, err := simgolden.Write(t.TempDir(), "prepare", 8<<20, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := reg.Host() + "/goldens/prepare"
	repo, err := golden.Repository(name, golden.RemoteOptions{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := golden.Push(ctx, repo, "", src, golden.PushOptions{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	wantDisk, _ := os.ReadFile(src.Disk)
	wantAux, _ := os.ReadFile(src.AuxiliaryStorage)

	state := t.TempDir()
	log := logr.Discard()
	cache := &images.Cache{Root: filepath.Join(state, "images"), Log: log}
	store := &images.Store{
		Puller: &images.Puller{Root: cache.Root, Cache: cache, Log: log},
		Cache:  cache, Cloner: images.DefaultCloner(log), Log: log, Retry: time.Hour,
		Source: func(img *fleetv1alpha1.MacOSImage) (oras.ReadOnlyTarget, error) {
			return golden.Repository(img.Spec.Source, golden.RemoteOptions{PlainHTTP: img.Spec.PlainHTTP})
		},
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { store.Run(runCtx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran })
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "img"},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: name + "@" + desc.Digest.String(), PlainHTTP: true}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		st := store.Ensure(img, false)
		if st.Phase == fleetv1alpha1.ImageReady {
			break
		}
		if st.Phase == fleetv1alpha1.ImageFailed || time.Now().After(deadline) {
			t.Fatalf("the golden: %+v", st)
		}
	}

	disks := instances.Disks{Root: state}
	clones := 0
	clone := func(disk, aux string) (string, error) {
		clones++
		m, err := store.Clone(img, disk, aux)
		return string(m), err
	}
	junk := bytes.Repeat([]byte("half a clone "), 1<<20) // larger than the golden
	check := func(uid, disk, aux string) {
		t.Helper()
		for file, want := range map[string][]byte{disk: wantDisk, aux: wantAux} {
			got, err := os.ReadFile(file)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %s is not the golden's (%d bytes, want %d; %v)", uid, filepath.Base(file), len(got), len(want), err)
			}
			if _, err := os.Lstat(file + ".tmp"); err == nil {
				t.Errorf("%s: %s.tmp left behind", uid, filepath.Base(file))
			}
		}
	}

	// Killed mid-copy: only leftovers of the temporaries.
	dir := disks.InstanceDir("uid-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"disk.img.tmp", "aux.img.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, f), junk, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	disk, aux, err := disks.Prepare("uid-1", clone)
	if err != nil {
		t.Fatal(err)
	}
	check("uid-1", disk, aux)
	if clones != 1 {
		t.Fatalf("%d clones, want 1", clones)
	}

	// Killed between the disk and the aux storage: a disk.img alone (here
	// with other bytes) is not kept.
	dir = disks.InstanceDir("uid-2")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "disk.img"), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	disk, aux, err = disks.Prepare("uid-2", clone)
	if err != nil {
		t.Fatal(err)
	}
	check("uid-2", disk, aux)
	if clones != 2 {
		t.Fatalf("%d clones, want 2", clones)
	}

	// Positive control: a whole pair is the instance's, kept as it is.
	if err := os.WriteFile(disk, []byte("written by the guest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := disks.Prepare("uid-2", clone); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(disk); string(b) != "written by the guest" || clones != 2 {
		t.Fatalf("Prepare remade a whole pair (%d clones)", clones)
	}
}
