package node

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// compliant remembers, per chassis, that the policies let it enter service,
// with what that verdict read: node.commercial and quota.never-circumvent
// judge the agent's reported facts against the class, and nothing else of
// the MacNode. Most passes come from a change elsewhere (a condition, a
// slot, the binding, the journal), and one whose facts and class are those
// of a clean verdict reuses it, instead of copying the MacNode, journal
// included, twice, converting both copies and running both engines on
// them: at N = 1,000 that was the node controller's largest share of the
// operator's heap in flight.
//
// Only a verdict with no violation at all is kept: a refusal, a policy
// error or a disagreement is asked again on every pass, as before, and goes
// to the audit stream each time.
type compliant struct {
	mu     sync.Mutex
	byName map[string]verdict
}

// verdict is what a clean verdict read.
type verdict struct {
	uid          types.UID
	classVersion string
	revision     string
	reported     *fleetv1alpha1.ReportedFacts
}

// holds reports whether mn's facts, under class and the policies'
// revision, are those of a clean verdict.
func (c *compliant) holds(mn *fleetv1alpha1.MacNode, class *fleetv1alpha1.MacNodeClass, revision string) bool {
	c.mu.Lock()
	v, ok := c.byName[mn.Name]
	c.mu.Unlock()
	return ok && v.uid == mn.UID && v.classVersion == class.ResourceVersion && v.revision == revision &&
		equality.Semantic.DeepEqual(v.reported, mn.Status.Reported)
}

// keep records a clean verdict on mn.
func (c *compliant) keep(mn *fleetv1alpha1.MacNode, class *fleetv1alpha1.MacNodeClass, revision string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]verdict{}
	}
	c.byName[mn.Name] = verdict{uid: mn.UID, classVersion: class.ResourceVersion, revision: revision,
		reported: mn.Status.Reported.DeepCopy()}
}

// forget drops a chassis' verdict: it was refused, or it is gone.
func (c *compliant) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byName, name)
}
