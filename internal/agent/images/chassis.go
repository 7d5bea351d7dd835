package images

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"oras.land/oras-go/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// Budget is the golden cache's budget: the agent's override, else the
// class's imageCacheBudget as the pre-pull loop last read it, else the
// default.
type Budget struct {
	mu       sync.Mutex
	override int64
	class    int64
}

// NewBudget is a budget with the agent's override; none if not positive.
func NewBudget(override int64) *Budget { return &Budget{override: override} }

// Bytes is the budget in allocated bytes.
func (b *Budget) Bytes() int64 {
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

// SetClass records the class's imageCacheBudget.
func (b *Budget) SetClass(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.class = n
}

// Chassis runs the golden cache of one chassis for the agent: its store,
// the pre-pull loop, and the cache's part of the MacNode's report.
type Chassis struct {
	// NodeName is the chassis' MacNode.
	NodeName string
	// Direct reads the API server itself; Cached, the agent's cache of
	// this chassis' instances and MacNode.
	Direct, Cached client.Client
	Recorder       events.EventRecorder
	// Report is where the cache's state is published.
	Report *report.Reporter
	Clock  clock.Clock
	Log    logr.Logger
	// Poll is how often the pre-pull loop looks again (10s if zero).
	Poll time.Duration
	// ReportInterval is how often the cache's state is published (2s if
	// zero): a pull's progress shows at that pace.
	ReportInterval time.Duration

	// budget is the store's, which the pre-pull loop keeps current.
	budget *Budget
	// seeded says the pull counters of the agent's earlier runs are in
	// the store.
	seeded atomic.Bool
}

// StoreOptions are the agent's settings of its golden cache.
type StoreOptions struct {
	// Root is the cache's directory.
	Root string
	// BudgetOverride, if positive, overrides the class's imageCacheBudget.
	BudgetOverride int64
	// Concurrency is how many chunks a pull fetches at once.
	Concurrency int
	// RegistryAuth is a Docker config JSON with the golden registries'
	// credentials; empty is anonymous.
	RegistryAuth []byte
	// Retry is how soon a pull that waited for room or failed is tried
	// again.
	Retry time.Duration
}

// NewStore builds the chassis' golden cache.
func (c *Chassis) NewStore(o StoreOptions) *Store {
	cache := &Cache{Root: o.Root, Clock: c.Clock, Log: c.Log}
	c.budget = NewBudget(o.BudgetOverride)
	return &Store{
		Puller: &Puller{Root: o.Root, Concurrency: o.Concurrency, Clock: c.Clock, Log: c.Log, Cache: cache,
			Space: StatfsSpace{}},
		Cache: cache, Cloner: DefaultCloner(c.Log), Clock: c.Clock, Log: c.Log,
		Source: func(img *fleetv1alpha1.MacOSImage) (oras.ReadOnlyTarget, error) {
			return golden.Repository(img.Spec.Source, golden.RemoteOptions{PlainHTTP: img.Spec.PlainHTTP, DockerConfigJSON: o.RegistryAuth})
		},
		Budget: c.budget.Bytes, Retry: o.Retry,
		Pinned:  func() map[string]bool { return c.pinned(context.Background()) },
		OnEvict: c.recordEviction,
	}
}

// recordEviction records an eviction as an Event on the chassis' MacNode.
func (c *Chassis) recordEviction(name, reason string) {
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Direct.Get(context.Background(), client.ObjectKey{Name: c.NodeName}, mn); err != nil {
		c.Log.Error(err, "Could not record an eviction as an Event", "image", name)
		return
	}
	c.Recorder.Eventf(mn, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonImageEvicted, "Evict",
		"Evicted golden %s from chassis %s: %s", name, mn.Spec.Serial, reason)
}

// pinned are the goldens never evicted: those of the instances placed
// here that are not stopped for good, and those the bound lease books.
func (c *Chassis) pinned(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	list := &computev1alpha1.MacOSInstanceList{}
	if err := c.Cached.List(ctx, list); err == nil {
		for _, i := range list.Items {
			if i.Status.NodeName == c.NodeName && i.DeletionTimestamp.IsZero() {
				out[i.Spec.ImageName] = true
			}
		}
	}
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Cached.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err == nil && mn.Status.Binding != nil {
		for _, name := range mn.Status.Binding.Images {
			out[name] = true
		}
	}
	return out
}

// RunPrePull pulls, ahead of any instance, the goldens the bound lease
// books and those pre-pulled onto this chassis' class, and keeps the
// class's cache budget current, until ctx ends. Pre-pulls yield bandwidth
// to on-demand pulls. It reads from the agent's cache: a thousand agents
// polling the API server would be 300 reads a second.
func (c *Chassis) RunPrePull(ctx context.Context, store *Store) error {
	for {
		if err := c.prePullOnce(ctx, store); err != nil {
			c.Log.Error(err, "Pre-pulling goldens failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.Clock.After(cmp.Or(c.Poll, 10*time.Second)):
		}
	}
}

func (c *Chassis) prePullOnce(ctx context.Context, store *Store) error {
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Cached.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err != nil {
		return fmt.Errorf("getting own MacNode: %w", err)
	}
	class := &fleetv1alpha1.MacNodeClass{}
	if err := c.Cached.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class); err == nil && class.Spec.ImageCacheBudget != nil && c.budget != nil {
		c.budget.SetClass(class.Spec.ImageCacheBudget.Value())
	}
	var booked []string
	if mn.Status.Binding != nil {
		booked = mn.Status.Binding.Images
	}
	list := &fleetv1alpha1.MacOSImageList{}
	if err := c.Cached.List(ctx, list); err != nil {
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

// RunReport publishes the golden cache's state into the chassis' report
// every ReportInterval, until ctx ends.
func (c *Chassis) RunReport(ctx context.Context, store *Store) error {
	for {
		if err := c.PublishReport(ctx, store); err != nil {
			c.Log.Error(err, "Reading the pull counters reported before failed; the cache is not reported until it succeeds")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.Clock.After(cmp.Or(c.ReportInterval, 2*time.Second)):
		}
	}
}

// PublishReport publishes the cache's state and its pull counters now. The
// counters carry on from those reported before the agent started: the
// first publish adds those the MacNode reports to the store's, and nothing
// is published until they are read, so that a restart never lowers them.
func (c *Chassis) PublishReport(ctx context.Context, store *Store) error {
	if !c.seeded.Load() {
		mn := &fleetv1alpha1.MacNode{}
		if err := c.Direct.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err != nil {
			return fmt.Errorf("reading the pull counters of MacNode %s: %w", c.NodeName, err)
		}
		if c.seeded.CompareAndSwap(false, true) && mn.Status.Reported != nil {
			store.SeedPullCounters(mn.Status.Reported.ImagePulls)
		}
	}
	imgs, usage := store.Report()
	c.Report.Images(report.Images{Images: imgs, Cache: usage, Pulls: store.PullCounters()})
	return nil
}
