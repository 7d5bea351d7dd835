# METADATA
# title: quota.never-circumvent
# description: |
#   The kernel's hv_apple_isa_vm_quota allows two macOS VMs, and MacRack never
#   asks for more or works around it. A class's vmCapacity is at most 2. A
#   Node never advertises more than 2 macrack.io/macos-vm. A host with
#   hv_apple_isa_vm_quota in its boot-args, or with SIP off, never becomes
#   Ready.
# custom:
#   id: quota.never-circumvent
#   kinds:
#   - fleet.macrack.io/MacNodeClass
#   - fleet.macrack.io/MacNode
#   - /Node
#   engines: [rego, cel]
package macrack.quota.never_circumvent

import data.macrack.lib

code := "quota.never-circumvent"

written if lib.operation in {"CREATE", "UPDATE"}

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeClass"
	written
	cap := lib.new.spec.vmCapacity
	is_number(cap)
	cap > lib.max_vms
	msg := sprintf("quota.never-circumvent: vmCapacity %v exceeds the kernel's limit of 2 macOS VMs per chassis", [cap])
}

vm_resource := "macrack.io/macos-vm"

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	written
	some list in ["capacity", "allocatable"]
	value := lib.new.status[list][vm_resource]
	not lib.is_quantity(value)
	msg := sprintf("quota.never-circumvent: Node %s status.%s %s is not a quantity: %s", [lib.new.metadata.name, list, vm_resource, lib.show(value)])
}

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	written
	some list in ["capacity", "allocatable"]
	value := lib.new.status[list][vm_resource]
	lib.quantity(value) > lib.max_vms
	msg := sprintf("quota.never-circumvent: Node %s advertises %s %s=%s; a chassis runs at most 2 macOS VMs", [lib.new.metadata.name, list, vm_resource, lib.show(value)])
}

reported(f) := object.get(lib.new, ["status", "reported", f], null)

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	lib.enters_service
	reported("sipEnabled") != true
	msg := sprintf("quota.never-circumvent: MacNode %s cannot become %s: System Integrity Protection is not reported on", [lib.new.metadata.name, lib.new.status.phase])
}

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	lib.enters_service
	args := reported("bootArgs")
	is_string(args)
	contains(args, "hv_apple_isa_vm_quota")
	msg := sprintf("quota.never-circumvent: MacNode %s cannot become %s: its boot-args touch hv_apple_isa_vm_quota", [lib.new.metadata.name, lib.new.status.phase])
}
