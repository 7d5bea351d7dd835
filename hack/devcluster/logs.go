package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// logDirName is where make run writes each process's log: bin/logs, one
// file a process, truncated at each start. The terminal shows a status
// line and what needs a person; everything else is in these files.
const logDirName = "logs"

// logFiles are the log files of one make run.
type logFiles struct {
	dir string
	mu  sync.Mutex
	// files in the order they were opened, for the banner.
	files []logFile
}

type logFile struct {
	name, path string
	// macrack: the process logs MacRack's JSON lines (internal/logging),
	// which the terminal watches for errors.
	macrack bool
}

// newLogFiles makes bin/logs and removes the logs of an earlier run, which
// may have had more minis.
func newLogFiles(bin string) (*logFiles, error) {
	dir := filepath.Join(bin, logDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	return &logFiles{dir: dir}, nil
}

// path is the log of a process: bin/logs/<file>.log.
func (l *logFiles) path(file string) string {
	return filepath.Join(l.dir, file+".log")
}

// open creates the log of a process (name, as the banner says it) in
// bin/logs/<file>.log, for appending: the process may write to it by
// itself too, as nats-server does.
func (l *logFiles) open(name, file string, macrack bool) (*os.File, error) {
	path := l.path(file)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	l.add(name, path, macrack)
	return f, nil
}

// add lists a log that a process writes by itself.
func (l *logFiles) add(name, path string, macrack bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.files = append(l.files, logFile{name: name, path: path, macrack: macrack})
}

// watched are the logs in MacRack's format.
func (l *logFiles) watched() []logFile {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logFile
	for _, f := range l.files {
		if f.macrack {
			out = append(out, f)
		}
	}
	return out
}

// describe is the banner's list of logs, one a line, indented.
func (l *logFiles) describe(indent string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, f := range l.files {
		fmt.Fprintf(&b, "%s%-24s %s\n", indent, f.name, f.path)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
