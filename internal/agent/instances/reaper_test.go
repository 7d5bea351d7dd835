package instances

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

func (rg *rig) reap() {
	rg.t.Helper()
	if err := rg.r.Reap(context.Background(), logr.Discard()); err != nil {
		rg.t.Fatalf("reaping: %v", err)
	}
	// The agent's reporter writes the reaper's publish once the moment's
	// publishes settle; the rig writes it now.
	if err := rg.r.Report.Flush(context.Background()); err != nil {
		rg.t.Fatalf("writing the report: %v", err)
	}
}

func (rg *rig) helperRuns(name string) bool {
	rg.t.Helper()
	running, err := rg.launcher.Running()
	if err != nil {
		rg.t.Fatal(err)
	}
	_, ok := running["uid-"+name]
	return ok
}

func (rg *rig) diskExists(name string) bool {
	_, err := os.Stat(rg.r.Disks.InstanceDir("uid-" + name))
	return err == nil
}

// freeSlot drops the instance's slot, as the placement controller does once
// the instance is gone.
func (rg *rig) freeSlot(name string) {
	rg.t.Helper()
	mn := rg.macNode()
	var kept []fleetv1alpha1.Slot
	for _, s := range mn.Status.Slots {
		if s.Name != name {
			kept = append(kept, s)
		}
	}
	mn.Status.Slots = kept
	if err := rg.c.Status().Update(context.Background(), mn); err != nil {
		rg.t.Fatal(err)
	}
}

// vanish removes the instance as a forced deletion would: no finalizer,
// no teardown.
func (rg *rig) vanish(c client.Client, name string) {
	rg.t.Helper()
	i := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, i); err != nil {
		rg.t.Fatal(err)
	}
	i.Finalizers = nil
	if err := c.Update(context.Background(), i); err != nil {
		rg.t.Fatal(err)
	}
	if err := c.Delete(context.Background(), i); err != nil {
		rg.t.Fatal(err)
	}
}

func (rg *rig) inventory() *fleetv1alpha1.HostInventory {
	rg.t.Helper()
	mn := rg.macNode()
	if mn.Status.Reported == nil {
		return nil
	}
	return mn.Status.Reported.Inventory
}

func (rg *rig) eventsSaid() string {
	var said []string
	for {
		select {
		case e := <-rg.events.Events:
			said = append(said, e)
		default:
			return strings.Join(said, "\n")
		}
	}
}

// A VM whose UID holds no slot is stopped, and only stopped: its instance
// still exists, so its disk is that instance's.
func TestTheReaperStopsAVMThatHoldsNoSlotAndKeepsTheDiskOfAnInstanceThatExists(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2")
	rg.run("ci-1")
	rg.run("ci-2")
	rg.reap()
	if !rg.helperRuns("ci-1") || !rg.helperRuns("ci-2") {
		t.Fatal("positive control: the reaper stopped a VM that holds its slot")
	}
	if said := rg.eventsSaid(); said != "" {
		t.Fatalf("positive control: the reaper said %q with nothing to reap", said)
	}

	rg.freeSlot("ci-1")
	rg.reap()
	if rg.helperRuns("ci-1") {
		t.Fatal("the VM of ci-1 holds no slot and still runs")
	}
	if !rg.diskExists("ci-1") {
		t.Fatal("the disk of ci-1 was wiped while its instance exists")
	}
	if !rg.helperRuns("ci-2") {
		t.Fatal("the VM of ci-2, which holds its slot, was stopped")
	}
	if said := rg.eventsSaid(); !strings.Contains(said, "Warning VMReaped Stopped the VM of instance uid-ci-1") {
		t.Fatalf("no VMReaped Event for uid-ci-1; said %q", said)
	}
}

// The disk of an instance that vanished is wiped only when the API server
// itself says so: the cache may lag, and a lagging cache must not have a
// live tenant's disk wiped.
func TestTheReaperWipesADiskOnlyWhenALiveReadSaysItsInstanceIsGone(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rg.instance("ci-1")).Build()
	rg.r.APIReader = live

	rg.vanish(rg.c, "ci-1") // the cache no longer has it
	rg.freeSlot("ci-1")
	rg.reap()
	if rg.helperRuns("ci-1") {
		t.Fatal("the VM of the vanished ci-1 still runs")
	}
	if !rg.diskExists("ci-1") {
		t.Fatal("the disk was wiped on the cache's word, while the API server still has the instance")
	}

	rg.vanish(live, "ci-1")
	rg.reap()
	if rg.diskExists("ci-1") {
		t.Fatal("the live read says the instance is gone, and its disk is still there")
	}
	if said := rg.eventsSaid(); !strings.Contains(said, "Warning DiskReaped Wiped the disk of instance uid-ci-1") ||
		!strings.Contains(said, "instance tenant-a/ci-1 no longer exists") {
		t.Fatalf("no DiskReaped Event naming why; said %q", said)
	}
}

// A disk whose instance name is now another instance is the old one's: it
// is wiped. The new instance of that name keeps its own.
func TestTheReaperWipesTheDiskOfAnInstanceWhoseNameIsNowAnother(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	old := rg.instance("ci-1")
	rg.vanish(rg.c, "ci-1")
	rg.freeSlot("ci-1")
	again := old.DeepCopy()
	again.ResourceVersion, again.UID, again.Finalizers, again.DeletionTimestamp = "", "uid-again", nil, nil
	if err := rg.c.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	rg.reap()
	if rg.diskExists("ci-1") {
		t.Fatal("the old instance's disk survived its name's reuse")
	}
	if said := rg.eventsSaid(); !strings.Contains(said, "is now another instance (uid-again)") {
		t.Fatalf("the Event does not say why; said %q", said)
	}
}

// Without its owner record, a disk is wiped only when a live list of the
// instances placed on the chassis lacks its UID.
func TestTheReaperFallsBackToALiveListWithoutAnOwnerRecord(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2")
	rg.run("ci-1")
	rg.run("ci-2")
	for _, n := range []string{"ci-1", "ci-2"} {
		if err := os.Remove(filepath.Join(rg.r.Disks.InstanceDir("uid-"+n), ownerFile)); err != nil {
			t.Fatal(err)
		}
	}
	rg.freeSlot("ci-2") // ci-2 still exists, placed here: its disk stays
	rg.vanish(rg.c, "ci-1")
	rg.freeSlot("ci-1")
	rg.reap()
	if rg.diskExists("ci-1") {
		t.Fatal("no instance placed here has ci-1's UID, and its disk survived")
	}
	if !rg.diskExists("ci-2") {
		t.Fatal("ci-2 is placed here, and its disk was wiped")
	}
}

// The inventory lists what the chassis holds, and an emptied chassis is
// reported empty: the lists go as null, or a merge patch would keep them.
func TestTheInventoryListsVMsAndDisksAndReportsAnEmptyChassisEmpty(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	rg.reap()
	inv := rg.inventory()
	if inv == nil || len(inv.VMs) != 1 || inv.VMs[0].UID != "uid-ci-1" || inv.VMs[0].State != "Running" ||
		len(inv.Disks) != 1 || inv.Disks[0] != "uid-ci-1" {
		t.Fatalf("inventory %+v, want the VM of uid-ci-1 Running and its disk", inv)
	}
	if inv.Empty() {
		t.Fatal("an inventory with a VM is Empty")
	}

	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	inv = rg.inventory()
	if !inv.Empty() {
		t.Fatalf("after the teardown the inventory is %+v, want it reported empty at once", inv)
	}
	var last []byte
	for _, w := range rg.recorded() {
		if w.kind == "MacNode" && strings.Contains(string(w.body), `"inventory"`) {
			last = w.body
		}
	}
	var patch struct {
		Status struct {
			Reported struct {
				Inventory map[string]json.RawMessage `json:"inventory"`
			} `json:"reported"`
		} `json:"status"`
	}
	if err := json.Unmarshal(last, &patch); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"vms", "disks"} {
		if v, ok := patch.Status.Reported.Inventory[k]; !ok || string(v) != "null" {
			t.Errorf("the emptying patch %s sends %s as %q, want null", last, k, v)
		}
	}
	var nilInv *fleetv1alpha1.HostInventory
	if nilInv.Empty() {
		t.Error("an inventory never reported is Empty")
	}
}

// A chassis with more disks than the schema lets a report hold is reported
// with the first of them: still not empty, and never refused for its size.
func TestTheInventoryStaysWithinTheSchemaAndStillSaysNotEmpty(t *testing.T) {
	rg := newRig(t)
	for i := range 70 {
		if err := os.MkdirAll(rg.r.Disks.InstanceDir(fmt.Sprintf("uid-%02d", i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := rg.r.inventory(context.Background(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Disks) != maxInventoryDisks || inv.Empty() {
		t.Fatalf("%d disks reported (empty %v), want the schema's %d", len(inv.Disks), inv.Empty(), maxInventoryDisks)
	}
}
