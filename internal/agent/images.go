package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"oras.land/oras-go/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// budget is the golden cache's budget: the agent's override, else the
// class's imageCacheBudget as prePull last read it, else the default.
type budget struct {
	mu       sync.Mutex
	override int64
	class    int64
}

func (b *budget) bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.override > 0:
		return b.override
	case b.class > 0:
		return b.class
	}
	q := resource.MustParse(fleetv1alpha1.DefaultImageCacheBudget)
	return q.Value()
}

func (b *budget) setClass(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.class = n
}

// imageStore builds the golden cache under the state directory. cached
// reads this chassis' instances and MacNode from the manager's cache.
func (c Config) imageStore(direct, cached client.Client, recorder events.EventRecorder) (*images.Store, *budget) {
	root := filepath.Join(c.StateDir, "images")
	log := c.Log.WithName("images")
	cache := &images.Cache{Root: root, Clock: c.Clock, Log: log}
	b := &budget{override: c.ImageCacheBudget}
	return &images.Store{
		Puller: &images.Puller{Root: root, Concurrency: c.PullConcurrency, Clock: c.Clock, Log: log, Cache: cache,
			Space: images.StatfsSpace{}},
		Cache: cache, Cloner: images.DefaultCloner(log), Clock: c.Clock, Log: log,
		Source: func(img *fleetv1alpha1.MacOSImage) (oras.ReadOnlyTarget, error) {
			return golden.Repository(img.Spec.Source, golden.RemoteOptions{PlainHTTP: img.Spec.PlainHTTP, DockerConfigJSON: c.RegistryAuth})
		},
		Budget: b.bytes, Retry: c.PullRetry,
		Pinned: func() map[string]bool { return c.pinnedImages(context.Background(), cached) },
		OnEvict: func(name, reason string) {
			mn := &fleetv1alpha1.MacNode{}
			if err := direct.Get(context.Background(), client.ObjectKey{Name: c.NodeName}, mn); err != nil {
				log.Error(err, "Could not record an eviction as an Event", "image", name)
				return
			}
			recorder.Eventf(mn, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonImageEvicted, "Evict",
				"Evicted golden %s from chassis %s: %s", name, mn.Spec.Serial, reason)
		},
	}, b
}

// pinnedImages are the goldens never evicted: those of the instances placed
// here that are not stopped for good, and those the bound lease books.
func (c Config) pinnedImages(ctx context.Context, cached client.Client) map[string]bool {
	out := map[string]bool{}
	list := &computev1alpha1.MacOSInstanceList{}
	if err := cached.List(ctx, list); err == nil {
		for _, i := range list.Items {
			if i.Status.NodeName == c.NodeName && i.DeletionTimestamp.IsZero() {
				out[i.Spec.ImageName] = true
			}
		}
	}
	mn := &fleetv1alpha1.MacNode{}
	if err := cached.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err == nil && mn.Status.Binding != nil {
		for _, name := range mn.Status.Binding.Images {
			out[name] = true
		}
	}
	return out
}

// prePull pulls, ahead of any instance, the goldens the bound lease books
// and those pre-pulled onto this chassis' class, and keeps the class's
// cache budget current. Pre-pulls yield bandwidth to on-demand pulls.
func (c Config) prePull(ctx context.Context, cl client.Client, store *images.Store, b *budget) {
	for {
		if err := c.prePullOnce(ctx, cl, store, b); err != nil {
			c.Log.Error(err, "Pre-pulling goldens failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-c.Clock.After(cmp.Or(c.Poll, 10*time.Second)):
		}
	}
}

func (c Config) prePullOnce(ctx context.Context, cl client.Client, store *images.Store, b *budget) error {
	mn := &fleetv1alpha1.MacNode{}
	if err := cl.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err != nil {
		return fmt.Errorf("getting own MacNode: %w", err)
	}
	class := &fleetv1alpha1.MacNodeClass{}
	if err := cl.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class); err == nil && class.Spec.ImageCacheBudget != nil {
		b.setClass(class.Spec.ImageCacheBudget.Value())
	}
	var booked []string
	if mn.Status.Binding != nil {
		booked = mn.Status.Binding.Images
	}
	list := &fleetv1alpha1.MacOSImageList{}
	if err := cl.List(ctx, list); err != nil {
		return fmt.Errorf("listing MacOSImages: %w", err)
	}
	for i := range list.Items {
		img := &list.Items[i]
		if slices.Contains(booked, img.Name) || (img.Spec.PrePull != nil && slices.Contains(img.Spec.PrePull.NodeClassNames, mn.Spec.NodeClassName)) {
			store.Ensure(img, true)
		}
	}
	return nil
}

// reportImages writes the golden cache's state, its pull counters and the
// latest wipes into status.reported, when they change: images, imageCache,
// imagePulls and wipes have this one writer. The counters carry on from
// those reported before the agent started (seedPullCounters), and are
// written only once seeded, so that a restart never lowers them. A request on flush makes it report at once, and it
// answers with the write's error: the instance loop waits so before it lets
// a wiped instance go, as a release copies the reported wipes into the
// chassis' history as soon as the last instance is gone.
func (c Config) reportImages(ctx context.Context, cl client.Client, store *images.Store, wipes func() []fleetv1alpha1.WipeEvidence, flush <-chan chan<- error) {
	var last []byte
	var reply chan<- error
	seeded := false
	for {
		if !seeded {
			seeded = c.seedPullCounters(ctx, cl, store)
		}
		imgs, usage := store.Report()
		w := wipes()
		if w == nil {
			w = []fleetv1alpha1.WipeEvidence{}
		}
		reported := map[string]any{"images": imgs, "imageCache": usage, "wipes": w}
		if pulls := store.PullCounters(); seeded && len(pulls) > 0 {
			reported["imagePulls"] = pulls
		}
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"reported": reported}})
		if err == nil && !bytes.Equal(patch, last) {
			mn := &fleetv1alpha1.MacNode{}
			mn.Name = c.NodeName
			if err = cl.Status().Patch(ctx, mn, client.RawPatch(types.MergePatchType, patch)); err != nil {
				c.Log.Error(err, "Reporting the golden cache failed")
			} else {
				last = patch
			}
		}
		if reply != nil {
			reply <- err
			reply = nil
		}
		select {
		case <-ctx.Done():
			return
		case reply = <-flush:
		case <-c.Clock.After(cmp.Or(c.ImagesInterval, 2*time.Second)):
		}
	}
}

// seedPullCounters adds the pull counters the MacNode reports, from the
// agent's earlier runs, to the store's, and reports whether it could read
// them.
func (c Config) seedPullCounters(ctx context.Context, cl client.Client, store *images.Store) bool {
	mn := &fleetv1alpha1.MacNode{}
	if err := cl.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err != nil {
		c.Log.Error(err, "Reading the pull counters reported before failed; they are not reported until it succeeds")
		return false
	}
	if mn.Status.Reported != nil {
		store.SeedPullCounters(mn.Status.Reported.ImagePulls)
	}
	return true
}

// flushReport asks reportImages, through flush, to report now, and waits.
func flushReport(flush chan<- chan<- error) func(context.Context) error {
	return func(ctx context.Context) error {
		reply := make(chan error, 1)
		select {
		case flush <- reply:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-reply:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
