package jobloop

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// Trace limits, gitlab-runner's defaults (common/consts.go): the job's
// log is kept up to traceLimit bytes, and sent at most tracePatchLimit
// bytes a PATCH.
const (
	traceLimit      = 4 << 20
	tracePatchLimit = 1 << 20
)

var maskedBytes = []byte(gitlab.Masked)

// masker replaces secrets in a stream written in arbitrary pieces. It
// holds back the longest tail that could still grow into a secret, so a
// secret split across two writes is masked too.
type masker struct {
	secrets [][]byte // longest first
	pending []byte
}

func newMasker(secrets []string) masker {
	var m masker
	for _, s := range secrets {
		if s != "" && !slices.ContainsFunc(m.secrets, func(b []byte) bool { return string(b) == s }) {
			m.secrets = append(m.secrets, []byte(s))
		}
	}
	slices.SortFunc(m.secrets, func(a, b []byte) int { return len(b) - len(a) })
	return m
}

// write takes the next piece and returns what is safe to emit.
func (m *masker) write(p []byte) []byte {
	if len(m.secrets) == 0 {
		return p
	}
	buf := append(m.pending, p...)
	for _, s := range m.secrets {
		buf = bytes.ReplaceAll(buf, s, maskedBytes)
	}
	hold := 0
	for _, s := range m.secrets {
		for k := min(len(s)-1, len(buf)); k > hold; k-- {
			if bytes.HasSuffix(buf, s[:k]) {
				hold = k
				break
			}
		}
	}
	out := buf[:len(buf)-hold]
	m.pending = append([]byte(nil), buf[len(buf)-hold:]...)
	return out
}

// flush returns what is held back: the stream ended, so it is no secret.
func (m *masker) flush() []byte {
	out := m.pending
	m.pending = nil
	return out
}

// traceBuffer is a job's log: what the executor writes, secrets masked,
// kept whole (up to traceLimit) so that any part can be sent again after
// a 416. It is safe for the executor to write while the loop sends.
type traceBuffer struct {
	mu     sync.Mutex
	data   []byte
	limit  int
	full   bool
	closed bool
	mask   masker
}

func newTrace(limit int, secrets ...string) *traceBuffer {
	return &traceBuffer{limit: limit, mask: newMasker(secrets)}
}

// Write never fails: past the limit, output is dropped and the job goes
// on, as gitlab-runner does. Writes after finish are dropped.
func (t *traceBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed && !t.full {
		t.append(t.mask.write(p))
	}
	return len(p), nil
}

// append adds b up to the limit, then gitlab-runner's notice. Callers
// hold mu.
func (t *traceBuffer) append(b []byte) {
	room := t.limit - len(t.data)
	if len(b) <= room {
		t.data = append(t.data, b...)
		return
	}
	t.data = append(t.data, b[:max(room, 0)]...)
	t.full = true
	t.data = fmt.Appendf(t.data, "\nJob's log exceeded limit of %d bytes.\n"+
		"Job execution will continue but no more output will be collected.\n", t.limit)
}

// finish ends the log with the runner's last line, such as "Job
// succeeded", which is always kept, and drops any later write.
func (t *traceBuffer) finish(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if rest := t.mask.flush(); !t.full {
		t.append(rest)
	}
	if n := len(t.data); n > 0 && t.data[n-1] != '\n' {
		t.data = append(t.data, '\n')
	}
	t.data = append(t.data, t.mask.write([]byte(line+"\n"))...)
	t.data = append(t.data, t.mask.flush()...)
	t.closed = true
}

// chunk copies up to n bytes from offset from.
func (t *traceBuffer) chunk(from int64, n int) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if from >= int64(len(t.data)) || from < 0 {
		return nil
	}
	end := min(int64(len(t.data)), from+int64(n))
	return slices.Clone(t.data[from:end])
}

func (t *traceBuffer) size() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.data))
}

// output describes the whole log for the final update, as
// helpers/trace/buffer.go's Checksum does.
func (t *traceBuffer) output() gitlab.JobTraceOutput {
	t.mu.Lock()
	defer t.mu.Unlock()
	return gitlab.JobTraceOutput{
		Checksum: fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(t.data)),
		Bytesize: len(t.data),
	}
}

// String is the log so far, for tests.
func (t *traceBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.data)
}
