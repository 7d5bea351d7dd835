package instances

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// ProbeUID names the quota probe's helper. It is no Kubernetes UID (those
// are UUIDs), so it never meets a tenant's instance; the reaper and the
// inventory leave it to the probe.
const ProbeUID = "quota-probe"

// probeDir holds the probe VM's disk, under the state directory and apart
// from the instance disks.
const probeDir = "quota-probe"

// The probe VM's size: the least a macOS guest boots with. It runs alone.
const (
	probeCPUs        = 2
	probeMemoryBytes = vmspec.MinMemoryBytes
	// probeSimDiskBytes is the sparse disk of a sim probe with no golden.
	probeSimDiskBytes = 1 << 30
	// probeStopGrace bounds the probe VM's stop: its disk is thrown away.
	probeStopGrace = 10 * time.Second
)

// probeOutcome is how one probe VM went.
type probeOutcome struct {
	// image is the golden the VM booted from; "" for the sim's empty disk.
	image string
	// startErr is the start's failure: code 6 means the counter is full.
	startErr error
	// stopErr is a failure to stop the VM cleanly after it started.
	stopErr error
	// at is when the probe ended.
	at time.Time
}

// probe proves the kernel's VM counter healthy after a reboot: one VM,
// started and stopped, with no tenant's disk. It refuses to run beside any
// VM, so that it is never a third, and reports the result as the quota of
// this boot: OK with a Passed probe, or Stuck if the kernel refused it
// with code 6 though no VM ran.
func (r *Instances) probe(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode, boot string) error {
	r.vmMu.Lock()
	defer r.vmMu.Unlock()
	r.inventoryMu.Lock()
	defer r.inventoryMu.Unlock()
	running, _, err := r.vmsLeft(ctx, log)
	if err != nil {
		return err
	}
	if running > 0 {
		return fmt.Errorf("%w: %d VMs are not stopped; the quota probe waits, for it must never be a third VM", ErrVMsRunning, running)
	}
	log.Info("Probing the kernel VM quota after the reboot", "bootID", boot)
	out, err := r.probeVM(ctx, log, true)
	if err != nil {
		return r.probeFailed(ctx, log, mn, boot, out, err)
	}
	switch {
	case driver.IsLimitExceeded(out.startErr):
		return r.probeStuck(ctx, log, mn, boot, out)
	case out.startErr != nil:
		return r.probeFailed(ctx, log, mn, boot, out, fmt.Errorf("the probe VM did not start: %w", out.startErr))
	case out.stopErr != nil:
		return r.probeFailed(ctx, log, mn, boot, out, fmt.Errorf("the probe VM did not stop cleanly: %w", out.stopErr))
	}
	q := &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK, Probe: &fleetv1alpha1.QuotaProbe{
		BootID: boot, Result: fleetv1alpha1.ProbePassed, Image: out.image, At: metav1.NewTime(out.at)}}
	if err := r.writeQuota(ctx, q); err != nil {
		return err
	}
	log.Info("The quota probe passed", "bootID", boot, "image", out.image)
	r.Recorder.Eventf(mn, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonQuotaOK, "Probe",
		"A probe VM started and stopped cleanly on chassis %s in boot %s: its kernel VM quota is healthy", mn.Spec.Serial, boot)
	return nil
}

// probeStuck reports the quota stuck again in this boot: the kernel
// refused the probe, the only VM, with code 6.
func (r *Instances) probeStuck(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode, boot string, out probeOutcome) error {
	at := metav1.NewTime(out.at)
	q := &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaStuck, LastErrorCode: driver.CodeVirtualMachineLimitExceeded, LastErrorAt: &at,
		Probe: &fleetv1alpha1.QuotaProbe{BootID: boot, Result: fleetv1alpha1.ProbeFailed, Image: out.image, At: at,
			Message: truncate("the kernel refused the probe VM with VZErrorDomain code 6 while no VM ran: the quota stuck again; "+out.startErr.Error(), maxMessage)}}
	if err := r.writeQuota(ctx, q); err != nil {
		return err
	}
	log.Info("The quota probe was refused with code 6: the quota stuck again", "bootID", boot)
	r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonQuotaStuck, "Probe",
		"The kernel of chassis %s refused its probe VM with code 6 in boot %s while no VM ran: the quota stuck again", mn.Spec.Serial, boot)
	return nil
}

// probeFailed reports a probe that proves nothing either way (no golden
// to boot, a helper that would not launch): the quota stays OK, with the
// failed probe saying why, and it is tried again after ProbeRetry.
func (r *Instances) probeFailed(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode, boot string, out probeOutcome, why error) error {
	r.quarantine.mu.Lock()
	r.quarantine.probeFailedAt = r.Clock.Now()
	r.quarantine.mu.Unlock()
	at := cmp.Or(out.at, r.Clock.Now())
	q := &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK, Probe: &fleetv1alpha1.QuotaProbe{
		BootID: boot, Result: fleetv1alpha1.ProbeFailed, Image: out.image, At: metav1.NewTime(at),
		Message: truncate(why.Error(), maxMessage)}}
	log.Error(why, "The quota probe failed; it is tried again", "bootID", boot, "retryIn", r.probeRetry().String())
	r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonQuotaStuck, "Probe",
		"The quota probe of chassis %s failed in boot %s, and is tried again: %v", mn.Spec.Serial, boot, why)
	return r.writeQuota(ctx, q)
}

// probeVM starts and stops one probe VM through a helper, then removes the
// helper and the probe's disk, whatever happened. Its disk is a clone of
// the smallest Ready golden in the cache (withGolden), or, in the sim, an
// empty sparse disk. The caller holds vmMu and inventoryMu, and has
// counted the VMs.
func (r *Instances) probeVM(ctx context.Context, log logr.Logger, withGolden bool) (out probeOutcome, err error) {
	defer func() {
		if cerr := r.cleanUpProbe(ctx); cerr != nil {
			log.Error(cerr, "Removing the probe VM's helper and disk failed")
		}
	}()
	spec, image, err := r.probeSpec(withGolden)
	out.image = image
	if err != nil {
		return out, err
	}
	sock, err := r.Launcher.Launch(ctx, ProbeUID, spec)
	if err != nil {
		return out, fmt.Errorf("launching the probe VM's helper: %w", err)
	}
	c, err := helper.Dial(ctx, sock)
	if err != nil {
		return out, fmt.Errorf("reaching the probe VM's helper: %w", err)
	}
	defer c.Close()
	out.startErr = c.Start(ctx, spec)
	if out.startErr == nil {
		if _, err := c.StopVM(ctx, min(r.StopGrace, probeStopGrace)); err != nil {
			out.stopErr = err
		} else if st, err := c.State(ctx); err != nil || st != driver.StateStopped {
			out.stopErr = fmt.Errorf("the probe VM is %s (%v) after its stop", st, err)
		}
	}
	out.at = r.Clock.Now()
	return out, nil
}

// probeSpec prepares the probe VM's files and renders its spec.
func (r *Instances) probeSpec(withGolden bool) (vmspec.VMSpec, string, error) {
	dir, err := filepath.Abs(r.statePath(probeDir))
	if err != nil {
		return vmspec.VMSpec{}, "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return vmspec.VMSpec{}, "", fmt.Errorf("clearing %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return vmspec.VMSpec{}, "", fmt.Errorf("creating %s: %w", dir, err)
	}
	disk, aux := filepath.Join(dir, "disk.img"), filepath.Join(dir, "aux.img")
	var model []byte
	var g images.Entry
	ok := false
	if withGolden {
		g, ok = r.smallestGolden()
	}
	image := g.Name
	switch {
	case ok:
		if _, err := r.Images.Cache.Clone(image, g.Manifest, disk, aux, r.Images.Cloner); err != nil {
			return vmspec.VMSpec{}, image, fmt.Errorf("cloning golden %s for the probe VM: %w", image, err)
		}
		b, err := os.ReadFile(r.Images.Cache.Files(image).HardwareModel)
		if err != nil {
			return vmspec.VMSpec{}, image, fmt.Errorf("reading the hardware model of golden %s: %w", image, err)
		}
		model = b
	case r.SimKernel != nil:
		// A sim VM reads no disk: an empty sparse one will do.
		if err := sparseFile(disk, probeSimDiskBytes); err != nil {
			return vmspec.VMSpec{}, "", err
		}
		if err := sparseFile(aux, 0); err != nil {
			return vmspec.VMSpec{}, "", err
		}
		model = []byte("sim")
	default:
		return vmspec.VMSpec{}, "", fmt.Errorf("%w: a probe VM must boot macOS from a verified golden; it waits for one (a golden pre-pulled on the class, or the lease's)", ErrNoProbeGolden)
	}
	fi, err := os.Stat(disk)
	if err != nil {
		return vmspec.VMSpec{}, image, fmt.Errorf("the probe VM's disk: %w", err)
	}
	id, err := r.NewMachineID()
	if err != nil {
		return vmspec.VMSpec{}, image, fmt.Errorf("making the probe VM's machine identifier: %w", err)
	}
	spec := vmspec.VMSpec{
		Name: "macrack/" + ProbeUID, UID: ProbeUID, CPUCount: probeCPUs, MemoryBytes: probeMemoryBytes,
		DiskPath: disk, DiskBytes: uint64(max(fi.Size(), 1)), BootLoader: vmspec.BootLoaderMacOS,
		HardwareModel: model, MachineIdentifier: id, AuxiliaryStoragePath: aux,
		Network: vmspec.NetworkNAT, MACAddress: vmspec.MACAddress(ProbeUID).String(), Display: vmspec.DefaultDisplay(),
	}
	return spec, image, spec.Validate()
}

// smallestGolden is the Ready golden in the cache that allocates least.
func (r *Instances) smallestGolden() (images.Entry, bool) {
	if r.Images == nil || r.Images.Cache == nil {
		return images.Entry{}, false
	}
	entries, err := r.Images.Cache.Entries()
	if err != nil {
		r.Log.Error(err, "Listing the image cache for the probe VM failed")
		return images.Entry{}, false
	}
	entries = slices.DeleteFunc(entries, func(e images.Entry) bool { return !e.Ready || e.Manifest == "" })
	if len(entries) == 0 {
		return images.Entry{}, false
	}
	return slices.MinFunc(entries, func(a, b images.Entry) int { return cmp.Compare(a.AllocatedBytes, b.AllocatedBytes) }), true
}

// cleanUpProbe removes the probe's helper and its disk.
func (r *Instances) cleanUpProbe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	if err := r.Launcher.Remove(ctx, ProbeUID); err != nil {
		errs = append(errs, fmt.Errorf("removing the probe VM's helper: %w", err))
	}
	if err := os.RemoveAll(r.statePath(probeDir)); err != nil {
		errs = append(errs, fmt.Errorf("removing the probe VM's disk: %w", err))
	}
	return errors.Join(errs...)
}

func sparseFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing %s: %w", path, err)
	}
	return nil
}
