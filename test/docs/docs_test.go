package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every page the doc test runs parses: each shell block marked, each
// "ran above" block the same as one that ran.
func TestThePagesAreMarked(t *testing.T) {
	for _, p := range Pages {
		data, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := Parse(data)
		if err != nil {
			t.Errorf("%s:\n%v", p, err)
		}
		run := 0
		for _, b := range blocks {
			if b.Run {
				run++
			}
		}
		if run == 0 {
			t.Errorf("%s runs no block", p)
		}
	}
}

const page = "# A page\n\n" +
	"<!-- run: as=tenant -->\n```sh\nkubectl get mnl\n```\n\n" +
	"<!-- output -->\n```text\nNAME   PHASE\nbuild-mini   Bound\n```\n\n" +
	"<!-- run: as=admin exit=1 -->\n```bash\nkubectl apply -f short.yaml\n```\n\n" +
	"<!-- norun: needs a real Mac -->\n```console\nssh mac\n```\n\n" +
	"<!-- norun: ran above, in Try it locally -->\n```sh\nkubectl get mnl\n```\n\n" +
	"```yaml\nkind: MacNodeLease\n```\n"

func TestParseReadsMarkersIdentitiesAndOutput(t *testing.T) {
	blocks, err := Parse([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 {
		t.Fatalf("want 4 shell blocks (the yaml is none), got %+v", blocks)
	}
	b := blocks[0]
	if !b.Run || b.As != AsTenant || b.Body != "kubectl get mnl" || !b.HasOutput || !strings.HasPrefix(b.Output, "NAME") || b.Line != 4 {
		t.Errorf("block 1: %+v", b)
	}
	if b := blocks[1]; !b.Run || b.As != AsAdmin || b.Exit != 1 || b.HasOutput {
		t.Errorf("block 2: %+v", b)
	}
	if b := blocks[2]; b.Run || b.NoRun != "needs a real Mac" || b.Lang != "console" {
		t.Errorf("block 3: %+v", b)
	}
	if b := blocks[3]; b.Run || !strings.HasPrefix(b.NoRun, "ran above") {
		t.Errorf("block 4: %+v", b)
	}
}

func TestParseRefusesWhatTheConventionDoesNot(t *testing.T) {
	for name, bad := range map[string]string{
		"no marker":                "Text\n```sh\nkubectl get mi\n```\n",
		"a marker two lines above": "<!-- run: as=tenant -->\n\n```sh\nkubectl get mi\n```\n",
		"an unknown identity":      "<!-- run: as=root -->\n```sh\nkubectl get mi\n```\n",
		"no identity":              "<!-- run: -->\n```sh\nkubectl get mi\n```\n",
		"an unknown option":        "<!-- run: as=tenant sudo -->\n```sh\nkubectl get mi\n```\n",
		"a norun with no reason":   "<!-- norun: -->\n```sh\nkubectl get mi\n```\n",
		"ran above, but did not":   "<!-- run: as=tenant -->\n```sh\nkubectl get mi\n```\n<!-- norun: ran above -->\n```sh\nkubectl get mnl\n```\n",
		"output of a norun block":  "<!-- norun: needs a Mac -->\n```sh\nsw_vers\n```\n<!-- output -->\n```text\nmacOS\n```\n",
		"an indented block":        "1. Lease it:\n\n   ```sh\n   kubectl get mnl\n   ```\n",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// The control: the same blocks, marked, parse.
	if _, err := Parse([]byte("<!-- run: as=tenant -->\n```sh\nkubectl get mi\n```\n<!-- norun: ran above -->\n```sh\nkubectl get mi\n```\n")); err != nil {
		t.Errorf("a marked page: %v", err)
	}
}

func TestMatchIsLooseWhereRunsDiffer(t *testing.T) {
	for name, c := range map[string]struct{ want, got string }{
		"ages and times": {
			"NAME         PHASE   CLASS       SERIAL         BOUND AT   EARLIEST RELEASE       AGE\n" +
				"build-mini   Bound   m4-16g-1t   C02SIM000001   4s         2026-11-30T22:20:27Z   4s",
			"NAME         PHASE   CLASS       SERIAL         BOUND AT   EARLIEST RELEASE       AGE\n" +
				"build-mini   Bound   m4-16g-1t   C02SIM000001   2m13s      2026-12-07T20:01:02Z   2m14s\n"},
		"a column added, and rows before": {
			"NAME          PHASE     READY\nci-runner-2   Running   true",
			"NAME          LEASE        PHASE     REASON   READY   AGE\n" +
				"ci-runner-1   build-mini   Running            true    1s\n" +
				"ci-runner-2   build-mini   Running            true    1s\n"},
		"a wrapped message": {
			"denied the request: instance.cap: lease build-mini\nalready has 2 live instances",
			"Error from server (Forbidden): error when creating \"STDIN\": admission webhook \"vmacosinstance.macrack.io\" denied the request: instance.cap: lease build-mini already has 2 live instances (ci-runner-1, ci-runner-2); a chassis runs at most 2\n"},
		"ids, ports and ellipses": {
			`Running with macrack jobloop, system ID: s_bfa850ce4fda` + "\n" + `{"id":1000,"state":"success",...}` + "\nat https://127.0.0.1:41431/",
			`Running with macrack jobloop, system ID: s_0123456789ab` + "\n" + `{"id":1000,"state":"success","runner_id":1}` + "\nat https://127.0.0.1:39999/\n"},
	} {
		if err := Match(c.want, c.got); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestMatchCatchesWhatChanged(t *testing.T) {
	for name, c := range map[string]struct{ want, got string }{
		"a phase": {
			"NAME         PHASE   AGE\nbuild-mini   Bound   4s",
			"NAME         PHASE     AGE\nbuild-mini   Pending   4s\n"},
		"a column gone": {
			"NAME          PHASE     READY\nci-runner-1   Running   true",
			"NAME          PHASE\nci-runner-1   Running\n"},
		"a row missing": {
			"NAME          PHASE\nci-runner-1   Running\nci-runner-2   Running",
			"NAME          PHASE\nci-runner-1   Running\n"},
		"rows out of order": {
			"NAME          PHASE\nci-runner-2   Running\nci-runner-1   Running",
			"NAME          PHASE\nci-runner-1   Running\nci-runner-2   Running\n"},
		"a message": {
			"instance.cap: lease build-mini already has 2 live instances",
			"instance.tenant: lease my-team/build-mini is Held, not Bound\n"},
		"a version": {
			"ProductVersion:\t\t15.5",
			"ProductVersion:\t\t15.6\n"},
		"the literal around a variable": {
			"system ID: s_bfa850ce4fda",
			"system id: s_bfa850ce4fda\n"},
	} {
		if err := Match(c.want, c.got); err == nil {
			t.Errorf("%s: matched", name)
		}
	}
}
