# METADATA
# title: quarantine.fence
# description: |
#   A chassis whose kernel VM quota stuck takes no new instance until it
#   recovers. A new instance is refused while the chassis its lease holds is
#   Quarantined or Rebooting, or while that chassis' status.quarantine is
#   active (present, with no recoveredAt). The instances already on it
#   restart after the reboot. A lease that holds no chassis yet is not
#   concerned. Placement holds the same fence for an instance created before
#   the quarantine: it claims no slot on such a chassis.
# custom:
#   id: quarantine.fence
#   kinds:
#   - compute.macrack.io/MacOSInstance
#   engines: [rego]
#   inventory:
#   - lease: the MacNodeLease that spec.leaseName names, in the instance's namespace
#   - macNode: the MacNode the lease holds (the lease's status.nodeName)
package macrack.quarantine.fence

code := "quarantine.fence"

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	fenced
	msg := sprintf("quarantine.fence: chassis %s is %s: %s; new instances are refused until it recovers; %s", [serial, state, cause, outlook])
}

# fenced: the lease's chassis is in a quarantine phase, or its quarantine
# has not recovered yet.

fenced_phases := {"Quarantined", "Rebooting"}

fenced if phase in fenced_phases

fenced if active(object.get(chassis, ["status", "quarantine"], null))

# A quarantine is active until the operator stamps recoveredAt.
active(q) if {
	is_object(q)
	object.get(q, "recoveredAt", null) == null
}

# chassis is the MacNode the instance's lease holds; undefined while the
# lease holds none, or when the inventory has no MacNode of that name.
chassis := node if {
	name := object.get(input, ["inventory", "lease", "status", "nodeName"], "")
	name != ""
	node := input.inventory.macNode
	is_object(node)
	object.get(node, ["metadata", "name"], "") == name
}

phase := object.get(chassis, ["status", "phase"], "Pending")

serial := object.get(chassis, ["spec", "serial"], chassis.metadata.name)

# state is the phase, or says the quarantine where the phase does not.
state := phase if phase in fenced_phases

else := sprintf("under quarantine (phase %s)", [phase])

# A chassis that stuck more than max_quarantines_per_day times in 24 hours
# is not rebooted again: it waits for a person, and the message says so.
max_quarantines_per_day := 3 # fleetv1alpha1.MaxQuarantinesPerDay

needs_attention if object.get(chassis, ["status", "quarantine", "needsAttention"], false) == true

cause := sprintf("its kernel VM quota stuck more than %d times in 24 hours and it waits for a person to repair it", [max_quarantines_per_day]) if needs_attention

else := "its kernel VM quota stuck and MacRack is rebooting it"

outlook := "the instances you have restart once it is repaired" if needs_attention

else := "the instances you have restart after the reboot"
