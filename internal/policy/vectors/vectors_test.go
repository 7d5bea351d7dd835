package vectors

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

func vectorsDir() string { return filepath.Join("..", "..", "..", "test", "policy") }

func TestEveryVector(t *testing.T) {
	e, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Run(context.Background(), e, cases) {
		t.Run(r.Case.ID(), func(t *testing.T) {
			if r.Failure != "" {
				t.Errorf("%s (%s #%d): %s\n  rego: %v\n  cel (applies %v): %v", r.Case.ID(), r.Case.File, r.Case.Index, r.Failure, r.Rego, r.CELApplies, r.CEL)
			}
		})
	}
}

// A CEL twin that drifts from its Rego makes the vectors fail, and the
// failure names the vector and both answers.
func TestADriftingCELTwinIsCaughtByName(t *testing.T) {
	m := fstest.MapFS{}
	if err := fs.WalkDir(policies.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(policies.FS, p)
		m[p] = &fstest.MapFile{Data: data}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src := string(m["lease/floor.cel.yaml"].Data)
	drifted := strings.Replace(src, ">= duration('24h')", ">= duration('23h')", 1)
	if drifted == src {
		t.Fatal("the floor expression moved; update this test")
	}
	m["lease/floor.cel.yaml"].Data = []byte(drifted)
	e, err := policy.Load(context.Background(), m, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		t.Fatal(err)
	}
	var failures []string
	for _, r := range Run(context.Background(), e, cases) {
		if r.Failure != "" {
			failures = append(failures, r.Case.ID()+": "+r.Failure)
		}
	}
	want := "lease.floor/a 23h lease is refused: CEL answers allow, Rego answers deny(lease.floor)"
	if !slices.Contains(failures, want) {
		t.Fatalf("want the failure %q among %q", want, failures)
	}
}

func TestEveryRuleHasEightVectorsWithDenialsAndPositiveControls(t *testing.T) {
	e, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		t.Fatal(err)
	}
	total, denials := map[string]int{}, map[string]int{}
	for _, c := range cases {
		total[c.Rule]++
		if len(c.Expect) > 0 {
			denials[c.Rule]++
		}
	}
	for _, r := range e.Rules() {
		if total[r.ID] < 8 || denials[r.ID] == 0 || denials[r.ID] == total[r.ID] {
			t.Errorf("%s: %d vectors, %d denials; want at least 8, with denials and allowed controls", r.ID, total[r.ID], denials[r.ID])
		}
	}
}
