package report

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// fields is status.reported as the parts compose it, by field, each value
// whole. Every field is one part's: the quota, inventory, images and wipes
// name theirs, and the facts every other one. A part never published names
// none.
func (p parts) fields() (map[string]json.RawMessage, error) {
	out := map[string]any{}
	if p.facts != nil {
		facts, err := wholePatch(p.facts)
		if err != nil {
			return nil, err
		}
		for k, v := range facts {
			if !theirs()[k] {
				out[k] = v
			}
		}
	}
	rest, err := p.others()
	if err != nil {
		return nil, err
	}
	for k, v := range rest {
		out[k] = v
	}
	raw := make(map[string]json.RawMessage, len(out))
	for k, v := range out {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw[k] = b
	}
	return raw, nil
}

// others renders the parts but the facts.
func (p parts) others() (map[string]any, error) {
	out := map[string]any{}
	quota := p.quota
	if quota == nil && p.facts != nil {
		// Until the instance loop reports, the facts source's word.
		quota = p.facts.Quota
	}
	if quota != nil {
		q, err := QuotaPatch(quota)
		if err != nil {
			return nil, err
		}
		out["quota"] = q
	}
	if p.inventory != nil {
		out["inventory"] = inventoryFields(*p.inventory)
	}
	if p.images != nil {
		out["images"] = orEmpty(p.images.Images)
		out["imageCache"] = p.images.Cache
		out["imagePulls"] = orNull(p.images.Pulls)
	}
	if p.wipes != nil {
		out["wipes"] = orEmpty(*p.wipes)
	}
	return out, nil
}

// theirs are the fields the parts but the facts name, found by rendering
// each once: the facts own every field that is not one of these.
var theirs = sync.OnceValue(func() map[string]bool {
	all := parts{quota: &fleetv1alpha1.QuotaReport{}, inventory: &fleetv1alpha1.HostInventory{},
		images: &Images{}, wipes: &[]fleetv1alpha1.WipeEvidence{}}
	rendered, err := all.others()
	if err != nil {
		panic(err) // zero values always marshal
	}
	out := map[string]bool{}
	for k := range rendered {
		out[k] = true
	}
	return out
})

// inventoryFields is status.reported.inventory. An empty list is sent as
// null, which removes it: left out, a merge patch would keep the list
// reported before, and a chassis emptied would still look full.
func inventoryFields(inv fleetv1alpha1.HostInventory) map[string]any {
	return map[string]any{"vms": orNull(inv.VMs), "disks": orNull(inv.Disks),
		"observedAt": inv.ObservedAt, "quarantinedAt": inv.QuarantinedAt}
}

// QuotaPatch is q as a merge patch's status.reported.quota that replaces
// the quota reported before whole: every field of QuotaReport is named,
// those q leaves out as null. Merged, a field left out would survive from
// an older report: a stale probe of an earlier boot, an old error code.
func QuotaPatch(q *fleetv1alpha1.QuotaReport) (map[string]any, error) {
	return wholePatch(q)
}

// wholePatch is v, a struct pointer, as a merge patch that names every
// field of its type, the ones v leaves out as null.
func wholePatch[T any](v *T) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if _, ok := out[name]; !ok && name != "" && name != "-" {
			out[name] = nil
		}
	}
	return out, nil
}

// orNull is s, or JSON null when empty.
func orNull[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

// orEmpty is s, or an empty JSON list when nil.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
