package report

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Defaults of a Reporter's timings.
const (
	// DefaultDebounce is how long a publish waits for others: the
	// sources' publishes of one moment (a wipe's inventory and evidence,
	// a start's facts, quota and cache) go out as one write.
	DefaultDebounce = 200 * time.Millisecond
	// DefaultRetry is how soon a failed write is tried again.
	DefaultRetry = 2 * time.Second
)

// Reporter owns status.reported of one MacNode. Sources publish their part
// (Facts, Quota, Inventory, Images, Wipes); Run writes what changed once the
// publishes of a moment have settled (Debounce), and Flush writes it now,
// for a source that must know it is on record. A part never published is
// never named, so that what an earlier run of the agent reported stands
// until this one says otherwise.
type Reporter struct {
	Client client.Client
	// NodeName is the MacNode's name.
	NodeName string
	Clock    clock.Clock
	// Debounce is how long Run waits after a publish before it writes:
	// the publishes within it are one write (DefaultDebounce if zero).
	Debounce time.Duration
	// Retry is how soon Run tries a failed write again (DefaultRetry if
	// zero).
	Retry time.Duration
	Log   logr.Logger

	// writeMu orders the writes: a Flush that starts after a publish
	// writes it, whatever write was under way.
	writeMu sync.Mutex

	mu    sync.Mutex
	parts parts
	// sent is, by field of status.reported, what the last successful
	// writes set it to: a field is written again only when it changes.
	sent map[string]json.RawMessage
	kick chan struct{}
}

// parts are the sources' publishes; nil is never published.
type parts struct {
	facts     *fleetv1alpha1.ReportedFacts
	quota     *fleetv1alpha1.QuotaReport
	inventory *fleetv1alpha1.HostInventory
	images    *Images
	wipes     *[]fleetv1alpha1.WipeEvidence
}

// Images is the golden cache's part: the goldens it holds or pulls, its use
// against the budget, and the pull counters.
type Images struct {
	Images []fleetv1alpha1.ReportedImage
	Cache  *fleetv1alpha1.ImageCacheReport
	Pulls  []fleetv1alpha1.ImagePullCounters
}

// Facts publishes the hardware and software facts. Every fact is named in
// the report, one left unset as null: an unknown fact is cleared rather
// than an older value surviving. The fields of the other parts that f may
// carry are not the facts' and are ignored; its quota is the facts
// source's word, reported only while the instance loop has published none.
func (r *Reporter) Facts(f *fleetv1alpha1.ReportedFacts) {
	if f == nil {
		f = &fleetv1alpha1.ReportedFacts{}
	}
	r.publish(func(p *parts) { p.facts = f.DeepCopy() })
}

// Quota publishes the instance loop's quota report, which replaces the
// one reported before whole, and the facts source's word from then on.
func (r *Reporter) Quota(q *fleetv1alpha1.QuotaReport) {
	r.publish(func(p *parts) { p.quota = q.DeepCopy() })
}

// Inventory publishes what the chassis holds.
func (r *Reporter) Inventory(inv fleetv1alpha1.HostInventory) {
	r.publish(func(p *parts) { p.inventory = inv.DeepCopy() })
}

// Images publishes the golden cache's state.
func (r *Reporter) Images(imgs Images) {
	c := Images{Images: slices.Clone(imgs.Images), Cache: imgs.Cache.DeepCopy(), Pulls: slices.Clone(imgs.Pulls)}
	r.publish(func(p *parts) { p.images = &c })
}

// Wipes publishes the latest wipes' evidence, newest last.
func (r *Reporter) Wipes(w []fleetv1alpha1.WipeEvidence) {
	c := slices.Clone(w)
	r.publish(func(p *parts) { p.wipes = &c })
}

func (r *Reporter) publish(set func(*parts)) {
	r.mu.Lock()
	r.initLocked()
	set(&r.parts)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default: // a write is due already
	}
}

func (r *Reporter) initLocked() {
	if r.kick == nil {
		r.kick = make(chan struct{}, 1)
		r.sent = map[string]json.RawMessage{}
	}
}

func (r *Reporter) kicked() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initLocked()
	return r.kick
}

// Run writes the report after each burst of publishes, until ctx ends.
func (r *Reporter) Run(ctx context.Context) error {
	kick := r.kicked()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock().After(orDefault(r.Debounce, DefaultDebounce)):
		}
		for {
			err := r.Flush(ctx)
			if err == nil {
				break
			}
			r.Log.Error(err, "Writing the report failed; it is tried again", "retryIn", orDefault(r.Retry, DefaultRetry).String())
			select {
			case <-ctx.Done():
				return nil
			case <-r.clock().After(orDefault(r.Retry, DefaultRetry)):
			}
		}
	}
}

// Flush writes now what was published and is not on record yet, as one
// merge patch of status.reported, and returns once the API server has
// answered.
func (r *Reporter) Flush(ctx context.Context) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	r.initLocked()
	fields, err := r.parts.fields()
	changed := map[string]json.RawMessage{}
	for k, v := range fields {
		if old, ok := r.sent[k]; !ok || string(old) != string(v) {
			changed[k] = v
		}
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrReport, r.NodeName, err)
	}
	if len(changed) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"reported": changed}})
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrReport, r.NodeName, err)
	}
	mn := &fleetv1alpha1.MacNode{}
	mn.Name = r.NodeName
	if err := r.Client.Status().Patch(ctx, mn, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("%w %s: %w", ErrReport, r.NodeName, err)
	}
	r.mu.Lock()
	maps.Copy(r.sent, changed)
	r.mu.Unlock()
	r.Log.V(1).Info("Report written", "fields", slices.Sorted(maps.Keys(changed)))
	return nil
}

func (r *Reporter) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Write writes f on the MacNode nodeName as an agent's Reporter would, in
// one patch: the facts, and each other part that f sets. It is for tools
// and tests that speak as an agent; the agent itself publishes each part
// from its own source.
func Write(ctx context.Context, c client.Client, nodeName string, f *fleetv1alpha1.ReportedFacts) error {
	r := &Reporter{Client: c, NodeName: nodeName}
	if f == nil {
		f = &fleetv1alpha1.ReportedFacts{}
	}
	r.Facts(f)
	if f.Inventory != nil {
		r.Inventory(*f.Inventory)
	}
	if f.Images != nil || f.ImageCache != nil || f.ImagePulls != nil {
		r.Images(Images{Images: f.Images, Cache: f.ImageCache, Pulls: f.ImagePulls})
	}
	if f.Wipes != nil {
		r.Wipes(f.Wipes)
	}
	return r.Flush(ctx)
}
