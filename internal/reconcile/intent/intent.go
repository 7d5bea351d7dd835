// Package intent asks the policies about a status write a controller
// intends, before it makes it: the reconcilers' may-bind, may-place and
// may-release checks. The write is judged exactly as the webhook would judge
// it, with the operator as the requester and the clock injected.
package intent

import (
	"context"
	"fmt"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// Checker decides intended writes.
type Checker struct {
	// Client maps objects to their kinds and reads the inventory (a cache).
	Client client.Client
	Engine *policy.Engine
	Clock  clock.PassiveClock
	Params policy.Params
	// Identity is the operator's username, as the API server sees it.
	Identity string
	// Denials, if set, takes each refusal for the audit stream.
	Denials *denial.Buffer
}

// StatusWrite decides the operator's write of obj's status over old. With
// a nil inventory, the inventory of obj's kind is read from the cache.
func (c Checker) StatusWrite(ctx context.Context, obj, old client.Object, inv map[string]any) (policy.Decision, error) {
	newMap, err := inventory.ToMap(obj)
	if err != nil {
		return policy.Decision{}, err
	}
	oldMap, err := inventory.ToMap(old)
	if err != nil {
		return policy.Decision{}, err
	}
	gvk, err := c.Client.GroupVersionKindFor(obj)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("kind of %s: %w", obj.GetName(), err)
	}
	if inv == nil {
		if inv, err = (inventory.Builder{Reader: c.Client}).For(ctx, gvk.GroupKind(), newMap, oldMap); err != nil {
			return policy.Decision{}, err
		}
	}
	d, err := c.Engine.Decide(ctx, policy.Input{
		Object: newMap, OldObject: oldMap,
		Request: policy.Request{Operation: "UPDATE", Kind: gvk, SubResource: "status",
			UserInfo: policy.UserInfo{Username: c.Identity}},
		Params: c.Params, Now: c.Clock.Now(), Inventory: inv,
	})
	if err != nil {
		return d, fmt.Errorf("asking the policy about %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	for _, v := range d.Violations {
		c.Denials.Offer(denial.Denial{
			Layer: "reconciler", Rule: v.Rule, Code: v.Code, Revision: d.Revision, Message: v.Message,
			Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()),
			Operation: "UPDATE", User: c.Identity, Key: old.GetResourceVersion(), At: c.Clock.Now(),
		})
	}
	return d, nil
}
