package images

// Progress: each image's pull status, in memory while it runs and on
// disk once it is ready, for the store's report.

import (
	"os"
	"sort"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

type imageStatus struct {
	st       Status
	meter    rateMeter
	retrying string // the blob whose retry Message shows
}

func (p *Puller) startStatus(name string, g *golden.Golden) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	w := p.RateWindow
	if w <= 0 {
		w = DefaultRateWindow
	}
	p.statuses[name] = &imageStatus{
		st:    Status{Name: name, Manifest: g.Manifest.Digest, Phase: PhasePulling, BytesTotal: bytesTotal(g)},
		meter: rateMeter{window: w},
	}
}

func (p *Puller) setReady(name string, m *readyMarker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	s := p.statuses[name]
	if s == nil || s.st.Phase != PhasePulling {
		p.statuses[name] = &imageStatus{st: Status{Name: name, Manifest: m.Manifest, Phase: PhaseReady,
			BytesDone: m.BytesTotal, BytesTotal: m.BytesTotal}}
	}
}

// progress counts n bytes done (negative: taken back); moved says they
// crossed the network (for Rate).
func (p *Puller) progress(name string, n int64, moved bool) {
	if n == 0 {
		return
	}
	now := p.clock().Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.statuses[name]
	if s == nil {
		return
	}
	s.st.BytesDone += n
	if moved && n > 0 {
		s.meter.add(now, n)
		p.counter(name, now).bytes += n
	}
}

func (p *Puller) setPhase(name string, phase Phase, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.statuses[name]
	if s == nil {
		return
	}
	s.st.Phase, s.st.Message, s.retrying = phase, msg, ""
	if phase == PhaseReady {
		s.st.BytesDone = s.st.BytesTotal
	}
}

func (p *Puller) setRetry(name, label, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.statuses[name]; s != nil {
		s.st.Message, s.retrying = msg, label
	}
}

func (p *Puller) clearRetry(name, label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.statuses[name]; s != nil && s.retrying == label {
		s.st.Message, s.retrying = "", ""
	}
}

// Progress is the status of one image: its pull in progress or its last
// pull's outcome in this process, else what its directory says (ready,
// or an incomplete download a Pull will resume). Phase is empty for a
// name neither knows.
func (p *Puller) Progress(name string) Status {
	if checkName(name) != nil {
		return Status{Name: name}
	}
	st, ok := p.memStatus(name)
	if !ok {
		st = diskStatus(p.dir(name), name)
	}
	if st.Phase != "" {
		st.AllocatedBytes, _ = allocatedBytes(p.dir(name))
	}
	return st
}

// memStatus is the in-memory status of name, unless it says Ready and
// the directory no longer does (the cache evicted it).
func (p *Puller) memStatus(name string) (Status, bool) {
	p.mu.Lock()
	s := p.statuses[name]
	var st Status
	if s != nil {
		st = s.st
		if st.Phase == PhasePulling {
			st.Rate = s.meter.rate(p.clock().Now())
		}
	}
	p.mu.Unlock()
	if s == nil {
		return Status{}, false
	}
	if st.Phase == PhaseReady {
		if _, ok := isReady(p.dir(name), st.Manifest); !ok {
			return Status{}, false
		}
	}
	return st, true
}

func diskStatus(dir, name string) Status {
	if m, ok := isReady(dir, ""); ok {
		return Status{Name: name, Manifest: m.Manifest, Phase: PhaseReady, BytesDone: m.BytesTotal, BytesTotal: m.BytesTotal}
	}
	if _, err := os.Lstat(dir); err != nil {
		return Status{Name: name}
	}
	st := Status{Name: name, Phase: PhaseFailed, Message: "incomplete download; a Pull resumes it"}
	if s, err := readState(dir); err == nil {
		st.Manifest = s.Manifest
	}
	return st
}

// Statuses lists every image in the cache directory, and every image
// this Puller pulled or is pulling, by name.
func (p *Puller) Statuses() []Status {
	names := map[string]bool{}
	p.mu.Lock()
	for n := range p.statuses {
		names[n] = true
	}
	p.mu.Unlock()
	if ents, err := os.ReadDir(p.Root); err == nil {
		for _, e := range ents {
			if e.IsDir() && checkName(e.Name()) == nil {
				names[e.Name()] = true
			}
		}
	}
	out := make([]Status, 0, len(names))
	for n := range names {
		if st := p.Progress(n); st.Phase != "" {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
