package report

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// A quota report replaces the one before whole: the fields it leaves out
// are null in the patch, so that a merge does not keep them.
func TestAQuotaPatchNamesEveryField(t *testing.T) {
	at := metav1.Now()
	p, err := QuotaPatch(&fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK, BootID: "b2",
		Probe: &fleetv1alpha1.QuotaProbe{BootID: "b2", Result: fleetv1alpha1.ProbePassed, At: at}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"runningVMs", "lastErrorCode", "lastErrorAt"} {
		if v, ok := p[k]; !ok || v != nil {
			t.Errorf("%s is %v (named %v), want null", k, v, ok)
		}
	}
	if p["state"] != "OK" || p["bootID"] != "b2" || p["probe"] == nil {
		t.Errorf("the report's own fields are lost: %v", p)
	}
}
