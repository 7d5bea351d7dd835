package simguest

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// A host opens an exec and logs session on a sim guest through the real
// protocol: its commands run in the VM's own directory, sw_vers answers as
// a Mac does, and its journal tells its boot and the session.
func TestTheSimGuestServesExecAndLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := sim.New(sim.NewMemKernel(), sim.WithBootTime(0),
		sim.WithGuestHandler(Handler(ctx, Reporter{XcodeVersions: []string{"16.4"}, HeadroomBytes: 1 << 30, Clock: clock.RealClock{}}, logr.Discard())))
	vm, spec := newVMWithSpec(t, d, "ci-1")
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := vm.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	s, err := guest.NewClient(conn).Session(ctx, "admin")
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	defer s.Close()
	run := func(argv ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := s.Exec(ctx, guest.ExecOptions{Command: argv, Stdout: &out, Stderr: &errOut}); err != nil {
			t.Fatalf("Exec %q: %v (stderr %q)", argv, err, errOut.String())
		}
		return out.String()
	}

	if got, want := run("sw_vers"), "ProductName:\t\tmacOS\nProductVersion:\t\t15.5\nBuildVersion:\t\t24F74\n"; got != want {
		t.Errorf("sw_vers: %q, want %q", got, want)
	}
	for opt, want := range map[string]string{"-productName": "macOS\n", "-productVersion": "15.5\n", "-buildVersion": "24F74\n"} {
		if got := run("sw_vers", opt); got != want {
			t.Errorf("sw_vers %s: %q, want %q", opt, got, want)
		}
	}
	home := filepath.Join(Dir(spec), "home")
	if Dir(spec) != spec.DiskPath+".sim-guest" {
		t.Errorf("the guest's directory is %s, want it beside the disk", Dir(spec))
	}
	if got := run("pwd"); got != home+"\n" {
		t.Errorf("pwd: %q, want the VM's own %q", got, home)
	}
	if got := run("sh", "-c", `echo "$HOME"`); got != home+"\n" {
		t.Errorf("HOME: %q, want %q", got, home)
	}
	// The same connection's other calls are the session's now; a new
	// connection still reports, unchanged.
	conn2, err := vm.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	c2 := guest.NewClient(conn2)
	defer c2.Close()
	if r, err := c2.Report(ctx); err != nil || !r.ReadyForWork {
		t.Fatalf("a report beside a session: %+v, %v", r, err)
	}

	var logs bytes.Buffer
	if err := s.Logs(ctx, guest.LogOptions{}, &logs); err != nil {
		t.Fatalf("Logs: %v", err)
	}
	for _, want := range []string{"guest agent sim started", "boot stage: booting", "boot stage: agent-started", "boot stage: ready",
		"session opened for user admin", "exec sw_vers: exit code 0", "exec pwd: exit code 0"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the journal does not say %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "productVersion") {
		t.Errorf("the journal quotes an argument:\n%s", logs.String())
	}
}
