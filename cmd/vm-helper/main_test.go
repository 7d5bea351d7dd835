package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

func writeSpec(t *testing.T, dir, uid string) string {
	t.Helper()
	spec := vmspec.VMSpec{
		Name: "tenant-a/" + uid, UID: uid, CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: "/instances/disk.img", DiskBytes: 200 << 30,
		BootLoader: vmspec.BootLoaderMacOS, HardwareModel: []byte("model"), MachineIdentifier: []byte("id"),
		AuxiliaryStoragePath: "/instances/aux.img",
		Network:              vmspec.NetworkNAT, MACAddress: vmspec.MACAddress(uid).String(),
		Vsock: true, Display: vmspec.DefaultDisplay(),
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, uid+".spec.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	specPath := writeSpec(t, dir, "u1")
	good := options{socket: filepath.Join(dir, "s"), driver: "sim", stateDir: dir, instanceUID: "u1", specPath: specPath}
	cases := []struct {
		name   string
		mutate func(*options)
		want   string
	}{
		{"a helper without a socket is refused", func(o *options) { o.socket = "" }, "are required"},
		{"a helper without an instance UID is refused", func(o *options) { o.instanceUID = "" }, "are required"},
		{"a spec of another instance is refused", func(o *options) { o.instanceUID = "u2" }, `not "u2"`},
		{"a missing spec file is refused", func(o *options) { o.specPath = filepath.Join(dir, "none.json") }, "reading spec"},
		{"an unknown driver is refused", func(o *options) { o.driver = "qemu" }, `unknown --driver "qemu"`},
		{"the sim driver without a state directory is refused", func(o *options) { o.stateDir = "" }, "needs --state-dir"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := good
			c.mutate(&o)
			err := run(logr.Discard(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
