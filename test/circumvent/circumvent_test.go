package circumvent

import (
	"os"
	"path/filepath"
	"testing"
)

// The examples are assembled from the package's parts, so that this file
// holds none of the forms it tests.
var (
	nv, csr, sc, q = nvramCmd, csrutilCmd, sysctlCmd, quotaName
)

// writes are write forms, each with the rule that must catch it.
var writes = []struct{ line, rule string }{
	{nv + " boot-args=-v", "an assignment to an NVRAM variable"},
	{"sudo " + nv + ` boot-args="-v ` + q + `=0xff"`, "an assignment to an NVRAM variable"},
	{"/usr/sbin/" + nv + " boot-args=serial=3", "an assignment to an NVRAM variable"},
	{"NV" + "RAM boot-args=-v", "an assignment to an NVRAM variable"},
	{nv + " 7C436110-AB2A-4BBB-A880-FE41995C9F82:boot-args=-v", "an assignment to an NVRAM variable"},
	{`exec.Command("` + nv + `", "boot-args=-v")`, "an assignment to an NVRAM variable"},
	{`exec.CommandContext(ctx, "/usr/sbin/` + nv + `", "boot-args="+args)`, "an assignment to an NVRAM variable"},
	{`args: ["` + nv + `", "auto-boot=false"]`, "an assignment to an NVRAM variable"},
	{nv + " -d boot-args", "an NVRAM delete, clear or set from a file"},
	{`exec.Command("` + nv + `", "-d", "boot-args")`, "an NVRAM delete, clear or set from a file"},
	{"sudo " + nv + " -c", "an NVRAM delete, clear or set from a file"},
	{nv + " -f /tmp/vars.txt", "an NVRAM delete, clear or set from a file"},
	{csr + " disable", "a change of System Integrity Protection"},
	{csr + " enable", "a change of System Integrity Protection"},
	{csr + " enable --without debug", "a change of System Integrity Protection"},
	{csr + " authenticated-root disable", "a change of System Integrity Protection"},
	{csr + " clear", "a change of System Integrity Protection"},
	{csr + " netboot add 10.0.0.1", "a change of System Integrity Protection"},
	{`exec.Command("/usr/bin/` + csr + `", "disable")`, "a change of System Integrity Protection"},
	{"- run: " + csr + " disable --no-internal", "a change of System Integrity Protection"},
	{"sudo " + sc + " -w kern." + q + " 4", "a sysctl write of the VM quota"},
	{`exec.Command("` + sc + `", "-w", "kern.` + q + `")`, "a sysctl write of the VM quota"},
	{sc + " -w kern." + q + "=4", "a sysctl write of the VM quota"},
	{"sudo " + sc + " kern." + q + "=4", "an assignment to the VM quota"},
	{q + "=0xff", "an assignment to the VM quota"},
	{`args := "-v ` + q + ` = 4"`, "an assignment to the VM quota"},
	// A bootArgs field on a line that also runs the command is a write.
	{`bootArgs: "x"; ` + sc + ` kern.` + q + `=4`, "an assignment to the VM quota"},
}

// reads are reads and prose, which pass.
var reads = []string{
	nv + " boot-args",
	nv + " -p",
	nv + " -xp",
	`stdout, stderr, err := d.run(ctx, "/usr/sbin/` + nv + `", "boot-args")`,
	"macrackctl image push --disk disk.img --aux " + nv + ".bin --hardware-model hw.bin",
	"// bootArgs is the host's NVRAM boot-args, verbatim.",
	"\tNVRAM Protections: enabled",
	csr + " status",
	csr + " authenticated-root status",
	csr + " netboot list",
	"System Integrity Protection status: disabled.",
	"SIP is re-enabled from recoveryOS, with the Mac's own tools",
	sc + " -n kern.bootargs",
	sc + " -n kern.bootsessionuuid",
	"// KernelVMLimit is the kernel's " + q + ": at most two macOS VMs",
	`host_problems contains "its boot-args touch ` + q + `" if {`,
	"kernel_vm_limit := 2 # " + q,
	`	contains(args, "` + q + `")`,
	`string(object.?status.?reported.?bootArgs.orValue('')).contains('` + q + `')`,
	`if ` + q + ` == limit {`,
	// The boot-args a host reports, as the tests and vectors hold them.
	`		bad.BootArgs = "` + q + `=0xff"`,
	`		Expect(mn.Status.Reported.BootArgs).To(Equal("` + q + `=0xff"), "the failing facts are stored")`,
	`    object: {<<: *ready, status: {phase: Ready, reported: {<<: *goodFacts, bootArgs: "-v ` + q + `=0xff"}}}`,
	`"reported": {"sipEnabled": true, "bootArgs": "` + q + `=0xff"}}},`,
}

func TestTheMatcherCatchesEachWriteForm(t *testing.T) {
	for _, w := range writes {
		rule, ok := Match(w.line)
		if !ok {
			t.Errorf("not caught: %s", w.line)
		} else if rule != w.rule {
			t.Errorf("%s: caught as %q, want %q", w.line, rule, w.rule)
		}
	}
}

func TestEveryRuleCatchesSomething(t *testing.T) {
	caught := map[string]bool{}
	for _, w := range writes {
		caught[w.rule] = true
	}
	for _, r := range Rules {
		if !caught[r.Name] {
			t.Errorf("no example of %q", r.Name)
		}
	}
}

func TestTheMatcherLetsReadsAndProsePass(t *testing.T) {
	for _, line := range reads {
		if rule, ok := Match(line); ok {
			t.Errorf("a read or prose caught as %q: %s", rule, line)
		}
	}
}

func TestTheScanFailsOnAFileThatWrites(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/setup.md", "Read SIP with `"+csr+" status`.\nThen run:\n\n    sudo "+nv+" boot-args=\"-v\"\n")
	write("hack/ok.sh", "#!/bin/sh\n"+nv+" boot-args\n")
	// Binaries and what bin/ and .git/ hold are not the repository's text.
	write("bin/tool", nv+" -d boot-args\n")
	write(".git/hooks/x", csr+" disable\n")
	write("blob.bin", "\x00"+csr+" disable\n")

	found, scanned, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if scanned != 3 {
		t.Errorf("scanned %d files, want docs/setup.md, hack/ok.sh and blob.bin", scanned)
	}
	if len(found) != 1 || found[0].Path != "docs/setup.md" || found[0].Line != 4 || found[0].Rule != "an assignment to an NVRAM variable" {
		t.Fatalf("found %v", found)
	}
}

func TestTheRepositoryNeverWritesTheQuotasGuards(t *testing.T) {
	root := filepath.Join("..", "..")
	found, scanned, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	// The scan read the tree, not an empty list.
	if scanned < 100 {
		t.Fatalf("scanned only %d files", scanned)
	}
	for _, f := range found {
		t.Errorf("a write form (MacRack reads SIP and the boot-args, and never writes them nor the VM quota): %s", f)
	}
	t.Logf("scanned %d files", scanned)
}
