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
	in := map[string]string{SerialLabel: "C02", "kubernetes.io/os": "darwin"}
	out, changed := Labels(in, DesiredLabels("C02", "m4", "tenant-a"))
	if !changed || out[TenantLabel] != "tenant-a" || out[SerialLabel] != "C02" || out[ClassLabel] != "m4" || out["kubernetes.io/os"] != "darwin" {
		t.Fatalf("setting the tenant: %v %v", out, changed)
	}
	if _, has := in[TenantLabel]; has {
		t.Fatal("the input map was modified")
	}
	if _, changed := Labels(out, DesiredLabels("C02", "m4", "tenant-a")); changed {
		t.Fatal("the same labels are no change")
	}
	out, changed = Labels(out, DesiredLabels("C02", "m4", ""))
	if _, has := out[TenantLabel]; has || !changed {
		t.Fatalf("clearing the tenant: %v %v", out, changed)
	}
	// A macrack.io/ label an agent wrote (another chassis' serial, a
	// label of its own) is the operator's to correct.
	forged := map[string]string{SerialLabel: "C02OTHER", ClassLabel: "m4", "macrack.io/extra": "x"}
	out, changed = Labels(forged, DesiredLabels("C02", "m4", ""))
	if !changed || out[SerialLabel] != "C02" || out["macrack.io/extra"] != "" {
		t.Fatalf("correcting forged labels: %v %v", out, changed)
	}
	if _, has := out["macrack.io/extra"]; has {
		t.Fatalf("an unknown macrack.io/ label stayed: %v", out)
	}
}
