package vectors

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

func vectorsDir() string { return filepath.Join("..", "..", "..", "test", "policy") }

func TestEveryVector(t *testing.T) {
	e, err := policy.Load(context.Background(), policies.FS)
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
