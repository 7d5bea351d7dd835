package images

import (
	"time"

	"github.com/opencontainers/go-digest"
)

// Phase is where an image of the cache stands.
type Phase string

const (
	PhasePulling Phase = "Pulling"
	PhaseReady   Phase = "Ready"
	// PhaseFailed is a pull that stopped: see Message. After an integrity
	// failure or a full disk its bytes are gone; after a cancellation or
	// exhausted retries they stay for the next Pull to resume.
	PhaseFailed Phase = "Failed"
)

// Status is one image's progress, for the agent's MacNode report.
type Status struct {
	Name     string        `json:"name"`
	Manifest digest.Digest `json:"manifest,omitempty"`
	// Phase is empty for a name the puller knows nothing of.
	Phase Phase `json:"phase,omitempty"`
	// BytesDone and BytesTotal count compressed bytes (what crosses the
	// network): every chunk's layer, the aux storage and hardware model.
	// Chunks kept from an earlier pull count as done once re-verified.
	BytesDone  int64 `json:"bytesDone"`
	BytesTotal int64 `json:"bytesTotal"`
	// Rate is the fetch rate in bytes per second over the last
	// RateWindow (by the Puller's clock); zero when nothing moves.
	Rate    float64 `json:"rate"`
	Message string  `json:"message,omitempty"`
	// AllocatedBytes is what the image holds on disk now (du).
	AllocatedBytes int64 `json:"allocatedBytes"`
}

// DefaultRateWindow is the window Status.Rate is measured over.
const DefaultRateWindow = 10 * time.Second

// rateMeter measures a rate over a sliding window, in buckets of a
// twentieth of it.
type rateMeter struct {
	window  time.Duration
	start   time.Time // the first bytes
	buckets []rateBucket
}

type rateBucket struct {
	idx int64 // time / width
	n   int64
}

func (m *rateMeter) width() int64 {
	return int64(max(m.window/20, time.Millisecond))
}

// add counts n bytes moved at now.
func (m *rateMeter) add(now time.Time, n int64) {
	if m.start.IsZero() {
		m.start = now
	}
	idx := now.UnixNano() / m.width()
	if l := len(m.buckets); l > 0 && m.buckets[l-1].idx == idx {
		m.buckets[l-1].n += n
	} else {
		m.buckets = append(m.buckets, rateBucket{idx, n})
	}
	m.trim(idx)
}

func (m *rateMeter) trim(idx int64) {
	oldest := idx - int64(m.window)/m.width()
	cut := 0
	for cut < len(m.buckets) && m.buckets[cut].idx <= oldest {
		cut++
	}
	if cut > 0 {
		m.buckets = append(m.buckets[:0], m.buckets[cut:]...)
	}
}

// rate is bytes per second over the window ending at now (or since the
// first bytes, when they are more recent).
func (m *rateMeter) rate(now time.Time) float64 {
	if m.start.IsZero() {
		return 0
	}
	m.trim(now.UnixNano() / m.width())
	var sum int64
	for _, b := range m.buckets {
		sum += b.n
	}
	from := now.Add(-m.window)
	if m.start.After(from) {
		from = m.start
	}
	dt := now.Sub(from).Seconds()
	if dt <= 0 || sum <= 0 {
		return 0
	}
	return float64(sum) / dt
}
