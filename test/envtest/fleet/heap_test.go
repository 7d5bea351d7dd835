package fleet

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
)

// The tracker's share of the heap is what its frames allocated; the
// operator's setup, though the benchmark calls it, stays the operator's.
func TestTheTrackersShareIsWhatItsFramesAllocated(t *testing.T) {
	const pkg = "github.com/boualleiguie/macrack-operator/test/envtest/fleet."
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	tracked := fn(1, pkg+"trackedFields")
	setup := fn(2, pkg+"(*bench).startOperator")
	informer := fn(3, "k8s.io/client-go/tools/cache.(*threadSafeMap).updateLocked")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	locs := []*profile.Location{loc(1, tracked), loc(2, setup), loc(3, informer)}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{locs[2], locs[0]}, Value: []int64{9, 900, 3, 3 << 20}},
			{Location: []*profile.Location{locs[1]}, Value: []int64{9, 900, 5, 5 << 20}},
			{Location: []*profile.Location{locs[2]}, Value: []int64{9, 900, 7, 7 << 20}},
		},
		Location: locs, Function: []*profile.Function{tracked, setup, informer},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	inuse, tracker, err := trackerShare(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if inuse != 15<<20 || tracker != 3<<20 {
		t.Errorf("in use %d MB, the tracker's %d MB; want 15 and 3", inuse>>20, tracker>>20)
	}
}
