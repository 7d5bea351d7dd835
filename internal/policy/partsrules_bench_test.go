package policy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
	"github.com/boualleiguie/macrack-operator/policies"
)

// stored dresses obj as the API server stores it, less the managedFields
// that the input builder strips before anything reads them: kubectl's
// last-applied annotation and the server's metadata.
func stored(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	b, _ := json.Marshal(obj)
	var out map[string]any
	_ = utiljson.Unmarshal(b, &out)
	meta, _ := out["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		out["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	ann["kubectl.kubernetes.io/last-applied-configuration"] = string(b)
	meta["annotations"] = ann
	meta["resourceVersion"] = "123456"
	meta["generation"] = int64(3)
	meta["creationTimestamp"] = "2026-06-01T12:00:00Z"
	return out
}

// BenchmarkRuleParts splits each rule's RuleDecoded decision (its first
// allowed vector) into its parts, each timed alone: converting the input
// (prepare), Rego (the query specialized for the request's shape) and the
// CEL twin, where it concerns the request.
func BenchmarkRuleParts(b *testing.B) {
	e, err := policy.Load(context.Background(), policies.FS)
	if err != nil {
		b.Fatal(err)
	}
	cases, err := vectors.Load(os.DirFS(filepath.Join("..", "..", "test", "policy")))
	if err != nil {
		b.Fatal(err)
	}
	done := map[string]bool{}
	for _, c := range cases {
		if done[c.Rule] || len(c.Expect) != 0 {
			continue
		}
		done[c.Rule] = true
		in, _ := c.Input()
		in.Object, in.OldObject = stored(in.Object), stored(in.OldObject)
		p := policy.NewParts(e, c.Rule)
		ctx := context.Background()
		stop, release := policy.CancelOnDone(ctx)
		pr, err := p.Prepare(in)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.Rule+"/prepare", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_, _ = p.Prepare(in)
			}
		})
		b.Run(c.Rule+"/rego", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				p.Rego(ctx, stop, pr)
			}
		})
		b.Run(c.Rule+"/cel", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				p.CEL(ctx, pr)
			}
		})
		release()
	}
}
