//go:build !(darwin && arm64)

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

func TestTheVZDriverIsRefusedOffAppleSilicon(t *testing.T) {
	dir := t.TempDir()
	err := run(logr.Discard(), options{
		socket: filepath.Join(dir, "s"), driver: "vz", instanceUID: "u1", specPath: writeSpec(t, dir, "u1"),
	})
	if err == nil || !strings.Contains(err.Error(), "the vz driver needs macOS on Apple silicon") {
		t.Fatalf("got %v, want a clear refusal", err)
	}
}
