package pod

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// The Pod the controller makes is the one shape pod.shape lets the
// operator create; the same Pod with a hostPath volume is refused (the
// control that the rule reads these Pods at all).
func TestThePodIsTheShapePodShapeAllows(t *testing.T) {
	e, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const operator = "system:serviceaccount:macrack-system:macrack-operator"
	decide := func(p *corev1.Pod) []string {
		t.Helper()
		p.APIVersion, p.Kind = "v1", "Pod"
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.Decide(context.Background(), policy.Input{Object: obj, Now: t0,
			Params: policy.Params{AgentsNamespace: "macrack-agents", OperatorUsername: operator},
			Request: policy.Request{Operation: "CREATE", Kind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Name: p.Name, Namespace: p.Namespace, UserInfo: policy.UserInfo{Username: operator}}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Codes()
	}
	p := desiredPod(placed(computev1alpha1.VMRunning, true))
	if codes := decide(p.DeepCopy()); len(codes) != 0 {
		t.Fatalf("pod.shape refuses the operator's own Pod: %v", codes)
	}
	p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	if codes := decide(p); len(codes) != 1 || codes[0] != "pod.shape" {
		t.Fatalf("a Pod with a hostPath volume: %v, want pod.shape", codes)
	}
}
