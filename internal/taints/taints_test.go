package taints

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestApply(t *testing.T) {
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}
	gpu := corev1.Taint{Key: "example.com/gpu", Value: "none", Effect: corev1.TaintEffectNoSchedule}
	unleased := Desired("")[0]
	leasedA := Desired("tenant-a")[0]
	cases := []struct {
		name        string
		current     []corev1.Taint
		desired     []corev1.Taint
		want        []corev1.Taint
		wantChanged bool
	}{
		{"leasing a free node swaps unleased for leased and keeps foreign taints in place",
			[]corev1.Taint{notReady, unleased, gpu}, Desired("tenant-a"), []corev1.Taint{notReady, gpu, leasedA}, true},
		{"releasing a node swaps leased back for unleased",
			[]corev1.Taint{leasedA, notReady}, Desired(""), []corev1.Taint{notReady, unleased}, true},
		{"a node already in the desired state is unchanged",
			[]corev1.Taint{notReady, leasedA}, Desired("tenant-a"), []corev1.Taint{notReady, leasedA}, false},
		{"a node leased to another tenant is retargeted",
			[]corev1.Taint{Desired("tenant-b")[0]}, Desired("tenant-a"), []corev1.Taint{leasedA}, true},
		{"a node without taints gets the desired one",
			nil, Desired(""), []corev1.Taint{unleased}, true},
		{"a stray macrack.io taint is removed",
			[]corev1.Taint{unleased, {Key: "macrack.io/quarantined", Effect: corev1.TaintEffectNoSchedule}}, Desired(""), []corev1.Taint{unleased}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, changed := Apply(c.current, c.desired)
			if !reflect.DeepEqual(got, c.want) || changed != c.wantChanged {
				t.Fatalf("got %v changed=%v, want %v changed=%v", got, changed, c.want, c.wantChanged)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	in := map[string]string{SerialLabel: "C02"}
	out, changed := Labels(in, "tenant-a")
	if !changed || out[TenantLabel] != "tenant-a" || out[SerialLabel] != "C02" {
		t.Fatalf("setting the tenant: %v %v", out, changed)
	}
	if _, has := in[TenantLabel]; has {
		t.Fatal("the input map was modified")
	}
	if _, changed := Labels(out, "tenant-a"); changed {
		t.Fatal("the same tenant is no change")
	}
	out, changed = Labels(out, "")
	if _, has := out[TenantLabel]; has || !changed {
		t.Fatalf("clearing the tenant: %v %v", out, changed)
	}
}
