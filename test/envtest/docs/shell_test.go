package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/test/docs"
)

// The shell the pages run in, without a cluster: it fails where a reader
// would stop, carries variables from block to block, names each block's
// identity, and ends what a block leaves in the background.
func TestTheShellFailsWhereAReaderWould(t *testing.T) {
	dir := t.TempDir()
	w := workspace{dir: dir, bin: filepath.Join(dir, "bin")}
	if err := os.Mkdir(w.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := newShell(t, w, dir)
	run := func(as, body string) (string, int) {
		t.Helper()
		out, code, err := sh.run(docs.Block{Run: true, As: as, Body: body})
		if err != nil {
			t.Fatalf("%q: %v\n%s", body, err, out)
		}
		return out, code
	}

	if out, code := run(docs.AsTenant, "echo one\nfalse\necho two"); code != 1 || strings.Contains(out, "two") {
		t.Errorf("a failing command must end the block with its status: %d %q", code, out)
	}
	if out, code := run(docs.AsTenant, "echo ok | cat\nexit 3"); code != 3 || !strings.Contains(out, "ok") {
		t.Errorf("exit 3: %d %q", code, out)
	}
	if _, code := run(docs.AsTenant, "false | cat"); code == 0 {
		t.Error("a failing command in a pipeline must fail the block (pipefail)")
	}
	if out, code := run(docs.AsTenant, "GITLAB=https://127.0.0.1:1234\nNS=my-team"); code != 0 {
		t.Fatalf("setting variables: %d %s", code, out)
	}
	if out, _ := run(docs.AsAdmin, `echo "$GITLAB $NS $KUBECONFIG"`); out != "https://127.0.0.1:1234 my-team "+filepath.Join(w.bin, "kubeconfig")+"\n" {
		t.Errorf("variables carry to the next block, the identity does not: %q", out)
	}
	if out, _ := run(docs.AsTenant, `echo "$KUBECONFIG"; echo ~`); out != filepath.Join(w.bin, "tenant.kubeconfig")+"\n"+sh.home+"\n" {
		t.Errorf("the tenant's kubeconfig and home: %q", out)
	}
	began := time.Now()
	if _, code := run(docs.AsTenant, "sleep 300 &\necho $! > bg.pid"); code != 0 {
		t.Fatal("a block with a background command")
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("a background command held the block open for %s", d)
	}
	// Gone, or a zombie its new parent has not reaped yet.
	if out, code := run(docs.AsTenant, `s=$(ps -o stat= -p "$(cat bg.pid)" || true); case $s in ""|Z*) echo gone ;; *) echo "alive $s" ;; esac`); code != 0 || out != "gone\n" {
		t.Errorf("what a block leaves in the background must end with it: %q", out)
	}
}
