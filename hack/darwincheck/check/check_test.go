package check

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The negative control: a copy of a real darwin file, as an overlay of the
// go command, with wrong vz calls planted, and a darwin test file beside it
// with one more, and a cgo import of the project's own. Each must fail the
// check at its line, and nothing else may: the rest of the copy is the real
// file, so an error elsewhere would be the checker's.

const vzDir = "../../../internal/agent/driver/vz"

type planted struct {
	old, new string
	// want is in the error's message.
	want string
}

// plants are wrong calls of three kinds: a method vz does not have, a
// missing argument, and an argument of the wrong type.
var plants = []planted{
	{"if !r.platform.HardwareModel().Supported() {", "if !r.platform.HardwareModel().IsSupported() {", "IsSupported"},
	{"vzf.NewVirtualMachineConfiguration(boot, spec.CPUCount, spec.MemoryBytes)", "vzf.NewVirtualMachineConfiguration(boot, spec.CPUCount)", "not enough arguments"},
	{"vzf.NewDiskImageStorageDeviceAttachment(spec.DiskPath, false)", `vzf.NewDiskImageStorageDeviceAttachment(spec.DiskPath, "false")`, `cannot use "false"`},
}

// lineOf is the 1-based line of the first occurrence of s in src.
func lineOf(t *testing.T, src, s string) int {
	t.Helper()
	i := strings.Index(src, s)
	if i < 0 {
		t.Fatalf("%q is not in the file", s)
	}
	return strings.Count(src[:i], "\n") + 1
}

func TestAWrongVZCallInACopyOfADarwinFileFailsTheCheck(t *testing.T) {
	dir, err := filepath.Abs(vzDir)
	if err != nil {
		t.Fatal(err)
	}
	vzGo := filepath.Join(dir, "vz.go")
	b, err := os.ReadFile(vzGo)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	if !strings.HasPrefix(src, "//go:build darwin") {
		t.Fatalf("%s is no longer darwin's alone: pick another file", vzGo)
	}
	var want []string
	for _, p := range plants {
		if strings.Count(src, p.old) != 1 {
			t.Fatalf("%q is not in %s exactly once: update the plant", p.old, vzGo)
		}
		line := lineOf(t, src, p.old)
		src = strings.Replace(src, p.old, p.new, 1)
		want = append(want, fmt.Sprintf("%s:%d:", vzGo, line), p.want)
	}
	// A test file the tree does not have: test files are checked too.
	plantedTest := filepath.Join(dir, "planted_test.go")
	testSrc := "//go:build darwin && arm64\n\npackage vz\n\nimport vzf \"github.com/Code-Hex/vz/v3\"\n\nvar _ = vzf.NewVirtualMachineConfigurations\n"
	want = append(want, plantedTest+":7:", "NewVirtualMachineConfigurations")
	// cgo of the project's own is an error, not a dependency's to skip.
	plantedCgo := filepath.Join(dir, "planted_cgo.go")
	cgoSrc := "//go:build darwin && arm64\n\npackage vz\n\nimport \"C\"\n"
	want = append(want, plantedCgo+":5:", "could not import C")

	res, err := Run(Options{Dir: filepath.Join(dir, "../../../.."), Patterns: []string{"./internal/agent/driver/vz"},
		Overlay: map[string][]byte{vzGo: []byte(src), plantedTest: []byte(testSrc), plantedCgo: []byte(cgoSrc)}})
	if err != nil {
		t.Fatal(err)
	}
	if got, wantN := len(res.Errors), len(want)/2; got != wantN {
		t.Errorf("%d errors, want %d, one per plant:\n%s", got, wantN, strings.Join(res.Errors, "\n"))
	}
	for i := 0; i < len(want); i += 2 {
		found := false
		for _, e := range res.Errors {
			if strings.HasPrefix(e, want[i]) && strings.Contains(e, want[i+1]) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error at %s about %q in:\n%s", want[i], want[i+1], strings.Join(res.Errors, "\n"))
		}
	}
	// vz's own cgo is skipped, and said to be.
	skippedVZ := false
	for _, s := range res.Skipped {
		skippedVZ = skippedVZ || strings.HasPrefix(s, "github.com/Code-Hex/vz/v3: ")
	}
	if !skippedVZ {
		t.Errorf("vz's import of C is not among the skipped: %q", res.Skipped)
	}
}

func TestTheRealDarwinFilesCheckClean(t *testing.T) {
	dir, err := filepath.Abs(vzDir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Options{Dir: filepath.Join(dir, "../../../.."), Patterns: []string{"./internal/agent/driver/vz"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("the tree's vz adapter fails the check:\n%s", strings.Join(res.Errors, "\n"))
	}
	// vz.go and its test file: a check that saw no darwin file proves nothing.
	if res.DarwinFiles < 2 {
		t.Fatalf("%d darwin files checked", res.DarwinFiles)
	}
}

// vzModule is the cgo module only darwin builds need.
const vzModule = "github.com/Code-Hex/vz/v3"

func TestALinuxBuildNeverLoadsVZ(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 100 {
		t.Fatalf("go list named %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		if p == vzModule || strings.HasPrefix(p, vzModule+"/") {
			t.Errorf("a Linux build loads %s, and would fetch its module", p)
		}
	}
}
