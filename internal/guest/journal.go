package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Journal bounds, used when a JournalOptions field is zero.
const (
	DefaultJournalLines = 4096
	DefaultJournalBytes = 1 << 20
	// maxJournalLine bounds one line, so that one huge line cannot push
	// out the whole journal.
	maxJournalLine = 8 << 10
)

// JournalOptions configure a Journal. Zero fields take the defaults.
type JournalOptions struct {
	// Lines and Bytes bound what the journal keeps: the oldest lines go
	// first when either would be exceeded.
	Lines int
	Bytes int
	// Clock stamps the lines; the real clock if nil.
	Clock clock.PassiveClock
}

// LogOptions select the guest agent's log lines Logs writes, as kubelet's
// PodLogOptions do a container's.
type LogOptions struct {
	// Follow keeps writing lines as the agent adds them, until ctx ends.
	Follow bool
	// TailLines, if set, writes only the last lines (of those since SinceTime).
	TailLines *int64
	// Timestamps prefixes each line with RFC3339Nano time, as kubelet does.
	Timestamps bool
	// LimitBytes, if set, stops after that many bytes, the last line cut short.
	LimitBytes *int64
	// SinceTime, if set, skips lines from before it.
	SinceTime *time.Time
}

// Journal is the guest agent's own log, which a host reads through a
// session's Logs: a bounded in-memory ring of timestamped lines, safe for
// concurrent use. It holds what the agent did (its start, boot stages,
// configuration, job phases, sessions and execs), never a Config's
// contents nor an exec's arguments: those hold secrets.
type Journal struct {
	clock clock.PassiveClock
	lines int
	bytes int

	mu      sync.Mutex
	entries []journalEntry // oldest first
	size    int            // bytes of the entries' lines
	next    uint64         // sequence number of the next Add
	added   chan struct{}  // closed, and replaced, at each Add
}

type journalEntry struct {
	seq  uint64
	time time.Time
	line string
}

// NewJournal returns an empty journal.
func NewJournal(opts JournalOptions) *Journal {
	if opts.Lines <= 0 {
		opts.Lines = DefaultJournalLines
	}
	if opts.Bytes <= 0 {
		opts.Bytes = DefaultJournalBytes
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Journal{clock: opts.Clock, lines: opts.Lines, bytes: opts.Bytes, added: make(chan struct{})}
}

// Add appends line, stamped with the journal's clock. A line with
// newlines becomes several lines; one over 8 KiB is cut short.
func (j *Journal) Add(line string) {
	if j == nil {
		return
	}
	now := j.clock.Now()
	parts := strings.Split(strings.TrimRight(line, "\r\n"), "\n")
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range parts {
		p = strings.TrimSuffix(p, "\r")
		if len(p) > maxJournalLine {
			p = strings.ToValidUTF8(p[:maxJournalLine], "") + "…"
		}
		j.entries = append(j.entries, journalEntry{seq: j.next, time: now, line: p})
		j.next++
		j.size += len(p)
	}
	drop := 0
	for len(j.entries)-drop > j.lines || (j.size > j.bytes && len(j.entries)-drop > 1) {
		j.size -= len(j.entries[drop].line)
		drop++
	}
	if drop > 0 {
		// Copy rather than reslice, so the dropped lines can be collected.
		j.entries = append(j.entries[:0:0], j.entries[drop:]...)
	}
	close(j.added)
	j.added = make(chan struct{})
}

// Addf appends a formatted line.
func (j *Journal) Addf(format string, args ...any) {
	j.Add(fmt.Sprintf(format, args...))
}

// Len is the number of lines the journal holds.
func (j *Journal) Len() int {
	if j == nil {
		return 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// Stream writes the journal's lines to w as o says, each ended by "\n":
// those since o.SinceTime, then only the last o.TailLines of them, each
// prefixed with its RFC 3339 time (nanoseconds, as kubelet does) if
// o.Timestamps, in at most o.LimitBytes bytes (the last line cut short).
// With o.Follow it then writes each line added later, as it comes, until
// ctx ends (returning ctx's error), the limit is reached or a write fails.
// A follower that falls so far behind that lines left the ring before it
// wrote them skips them.
func (j *Journal) Stream(ctx context.Context, w io.Writer, o LogOptions) error {
	lw := &limitedWriter{w: w, left: -1}
	if o.LimitBytes != nil {
		lw.left = max(*o.LimitBytes, 0)
	}
	j.mu.Lock()
	backlog := j.since(0, o.SinceTime)
	next, added := j.next, j.added
	j.mu.Unlock()
	if o.TailLines != nil {
		n := int(max(min(*o.TailLines, int64(len(backlog))), 0))
		backlog = backlog[len(backlog)-n:]
	}
	for {
		for _, e := range backlog {
			if err := lw.line(e, o.Timestamps); err != nil {
				if err == errLimit {
					return nil
				}
				return err
			}
		}
		if !o.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-added:
		}
		j.mu.Lock()
		backlog = j.since(next, o.SinceTime)
		next, added = j.next, j.added
		j.mu.Unlock()
	}
}

// since is a copy of the entries of sequence number seq or later, stamped
// at or after t if t is set. It runs under j.mu.
func (j *Journal) since(seq uint64, t *time.Time) []journalEntry {
	var out []journalEntry
	for _, e := range j.entries {
		if e.seq < seq || (t != nil && e.time.Before(*t)) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// errLimit ends a stream at its byte limit.
var errLimit = errors.New("log byte limit reached")

// limitedWriter writes journal lines within a byte limit; left < 0 is none.
type limitedWriter struct {
	w    io.Writer
	left int64
	buf  []byte
}

func (l *limitedWriter) line(e journalEntry, timestamps bool) error {
	if l.left == 0 {
		return errLimit
	}
	b := l.buf[:0]
	if timestamps {
		b = e.time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, ' ')
	}
	b = append(b, e.line...)
	b = append(b, '\n')
	l.buf = b
	if l.left > 0 && int64(len(b)) > l.left {
		// A byte limit, as kubelet's: the last line is cut where it falls.
		b = b[:l.left]
	}
	if _, err := l.w.Write(b); err != nil {
		return err
	}
	if l.left > 0 {
		l.left -= int64(len(b))
	}
	if l.left == 0 {
		return errLimit
	}
	return nil
}
