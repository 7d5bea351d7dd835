package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// After the banner, make run's terminal holds one status line, redrawn in
// place on a terminal (a plain line when it changes, or every
// plainEvery, when stdout is a file or a pipe), and, above it, the errors
// of MacRack's processes: what needs a person. Everything else is in
// bin/logs.
const (
	statusEvery = 2 * time.Second
	plainEvery  = time.Minute
	// tailEvery is how often the logs are read for new errors.
	tailEvery = 500 * time.Millisecond
)

// fleetStatus is what the status line says.
type fleetStatus struct {
	ready, leased, quarantined int
	bound, held                int
	running                    int
	// backlog is the audit records waiting for the stream (the operator's
	// macrack_audit_backlog_records); -1 when the metrics did not answer.
	backlog float64
}

func (s fleetStatus) String() string {
	backlog := "?"
	if s.backlog >= 0 {
		backlog = strconv.FormatFloat(s.backlog, 'f', -1, 64)
	}
	return fmt.Sprintf("chassis %d Ready, %d Leased, %d Quarantined | leases %d Bound, %d Held | instances %d Running | audit backlog %s",
		s.ready, s.leased, s.quarantined, s.bound, s.held, s.running, backlog)
}

// summarize counts the phases the status line shows.
func summarize(nodes []fleetv1alpha1.MacNode, leases []leasingv1alpha1.MacNodeLease, instances []computev1alpha1.MacOSInstance) fleetStatus {
	var s fleetStatus
	for _, n := range nodes {
		switch n.Status.Phase {
		case fleetv1alpha1.MacNodeReady:
			s.ready++
		case fleetv1alpha1.MacNodeLeased:
			s.leased++
		case fleetv1alpha1.MacNodeQuarantined:
			s.quarantined++
		}
	}
	for _, l := range leases {
		switch l.Status.Phase {
		case leasingv1alpha1.LeaseBound:
			s.bound++
		case leasingv1alpha1.LeaseHeld:
			s.held++
		}
	}
	for _, i := range instances {
		if i.Status.Runtime != nil && i.Status.Runtime.Phase == computev1alpha1.VMRunning {
			s.running++
		}
	}
	return s
}

// auditBacklog sums macrack_audit_backlog_records over its sources in a
// Prometheus text exposition; ok is false if the metric is absent.
func auditBacklog(r io.Reader) (total float64, ok bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, "macrack_audit_backlog_records")
		if !found || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			total += v
			ok = true
		}
	}
	return total, ok
}

// sampleStatus reads the fleet from the API server and the backlog from
// the operator's metrics.
func sampleStatus(ctx context.Context, c client.Reader, metricsURL string) (fleetStatus, error) {
	nodes := &fleetv1alpha1.MacNodeList{}
	leases := &leasingv1alpha1.MacNodeLeaseList{}
	instances := &computev1alpha1.MacOSInstanceList{}
	for _, l := range []client.ObjectList{nodes, leases, instances} {
		if err := c.List(ctx, l); err != nil {
			return fleetStatus{}, fmt.Errorf("listing for the status line: %w", err)
		}
	}
	s := summarize(nodes.Items, leases.Items, instances.Items)
	s.backlog = -1
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return s, err
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		if v, ok := auditBacklog(resp.Body); ok {
			s.backlog = v
		}
		_ = resp.Body.Close()
	}
	return s, nil
}

// terminal is make run's stdout after the banner: a status line and the
// alerts above it.
type terminal struct {
	out io.Writer
	tty bool
	// width is the terminal's, so that the status line never wraps (a
	// wrapped line cannot be redrawn with a carriage return); 0: unknown.
	width int

	mu          sync.Mutex
	line        string
	printed     string
	lastPrinted time.Time
}

func newTerminal(f *os.File) *terminal {
	t := &terminal{out: f}
	if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		t.tty = true
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
			t.width = int(ws.Col)
		}
	}
	return t
}

// clear is the escape that takes the cursor to the start of the line and
// erases it.
const clear = "\r\x1b[K"

// status shows line as the status, sampled at now (which it is prefixed
// with).
func (t *terminal) status(line string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	stamped := now.Format("15:04:05") + " " + line
	t.line = stamped
	if t.tty {
		fmt.Fprint(t.out, clear+t.fit(stamped))
		return
	}
	if line != t.printed || now.Sub(t.lastPrinted) >= plainEvery {
		fmt.Fprintln(t.out, stamped)
		t.printed, t.lastPrinted = line, now
	}
}

// alert writes a line above the status line.
func (t *terminal) alert(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.tty {
		fmt.Fprintln(t.out, line)
		return
	}
	fmt.Fprint(t.out, clear+line+"\n")
	if t.line != "" {
		fmt.Fprint(t.out, t.fit(t.line))
	}
}

// done ends the status line, so that what follows starts on a line of its
// own.
func (t *terminal) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tty && t.line != "" {
		fmt.Fprintln(t.out)
	}
	t.line = ""
}

func (t *terminal) fit(line string) string {
	if t.width > 1 && len(line) >= t.width {
		return line[:t.width-1]
	}
	return line
}

// runStatus refreshes the status line every statusEvery until ctx ends.
func runStatus(ctx context.Context, t *terminal, c client.Reader, metricsURL string) {
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, statusEvery)
		s, err := sampleStatus(sctx, c, metricsURL)
		cancel()
		now := time.Now()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t.status("status unavailable: "+err.Error(), now)
		} else {
			t.status(s.String(), now)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// logLine is what an alert needs of a MacRack JSON log line
// (internal/logging).
type logLine struct {
	Level  string `json:"level"`
	TS     string `json:"ts"`
	Logger string `json:"logger"`
	Msg    string `json:"msg"`
	Error  string `json:"error"`
}

// needsAPerson reports whether a log line is an error (or worse) of
// MacRack's, and the alert that says it. Info and debug lines, and lines
// that are not MacRack's JSON, stay in the file.
func needsAPerson(process string, raw []byte) (string, bool) {
	var l logLine
	if err := json.Unmarshal(raw, &l); err != nil {
		return "", false
	}
	switch l.Level {
	case "error", "dpanic", "panic", "fatal":
	default:
		return "", false
	}
	at := l.TS
	if ts, err := time.Parse("2006-01-02T15:04:05.000Z0700", l.TS); err == nil {
		at = ts.Local().Format("15:04:05")
	}
	s := fmt.Sprintf("%s %s %s: %s", at, strings.ToUpper(l.Level), process, l.Msg)
	if l.Error != "" {
		s += ": " + l.Error
	}
	return s, true
}

// tailErrors reads the new lines of each MacRack log every tailEvery and
// writes its errors above the status line, until ctx ends. It starts at
// each file's end: what was logged before the banner is in the files.
func tailErrors(ctx context.Context, t *terminal, files []logFile) {
	offsets := make([]int64, len(files))
	partial := make([][]byte, len(files))
	for i, f := range files {
		if fi, err := os.Stat(f.path); err == nil {
			offsets[i] = fi.Size()
		}
	}
	tick := time.NewTicker(tailEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for i, f := range files {
			offsets[i], partial[i] = readLines(f.path, offsets[i], partial[i], func(line []byte) {
				if alert, ok := needsAPerson(f.name, line); ok {
					t.alert(alert)
				}
			})
		}
	}
}

// readLines calls each with every whole line of path from offset on, and
// returns the new offset and the unfinished last line.
func readLines(path string, offset int64, partial []byte, each func([]byte)) (int64, []byte) {
	f, err := os.Open(path)
	if err != nil {
		return offset, partial
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < offset {
		offset, partial = 0, nil // truncated
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, partial
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil {
		return offset, partial
	}
	offset += int64(len(b))
	data := append(partial, b...)
	for {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			break
		}
		each(data[:nl])
		data = data[nl+1:]
	}
	return offset, append([]byte(nil), data...)
}
