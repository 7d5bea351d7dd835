package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
	"github.com/boualleiguie/macrack-operator/policies"
)

// TestEveryVectorsShapeIsSpecialized: partial evaluation specializes each
// rule for the shape of each of its vectors (no shape falls back to the
// whole query), and a shape the rule's guards exclude (lease.floor on a
// DELETE) is known to have no violation, while the rule's own shapes are not.
func TestEveryVectorsShapeIsSpecialized(t *testing.T) {
	e, err := policy.Load(context.Background(), policies.FS)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := vectors.Load(os.DirFS(filepath.Join("..", "..", "test", "policy")))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		in, err := c.Input()
		if err != nil {
			t.Fatal(err)
		}
		none, err := e.Specialization(c.Rule, in)
		if err != nil {
			t.Errorf("%s: runs the whole query: %v", c.ID(), err)
		}
		if none && len(c.Expect) > 0 {
			t.Errorf("%s: a denied vector's shape is said to have no violation", c.ID())
		}
		if c.Rule == "lease.floor" && in.Request.Operation == "CREATE" && none {
			t.Errorf("%s: lease.floor's CREATE is said to have no violation", c.ID())
		}
		if c.Rule == "lease.floor" && in.Request.Operation == "CREATE" {
			in.Request.Operation = "DELETE"
			if none, err := e.Specialization(c.Rule, in); err != nil || !none {
				t.Errorf("%s as a DELETE: want no violation possible, got none=%v err=%v", c.ID(), none, err)
			}
		}
	}
}
