package policy

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boualleiguie/macrack-operator/policies"
)

func TestSmoke(t *testing.T) {
	start := time.Now()
	e, err := Load(context.Background(), policies.FS)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d rules in %v rev %s", len(e.Rules()), time.Since(start), e.Revision())
	for _, d := range []string{"23h", "24h", "1d", "1440m"} {
		dec, err := e.Decide(context.Background(), Input{
			Object:  map[string]any{"metadata": map[string]any{"name": "l", "namespace": "t"}, "spec": map[string]any{"minimumDuration": d, "nodeClassName": "x"}},
			Request: Request{Operation: "CREATE", Kind: schema.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}, UserInfo: UserInfo{Username: "alice"}},
			Now:     time.Now(),
		})
		t.Logf("%s: %v %+v", d, err, dec)
	}
}
