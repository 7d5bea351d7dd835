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

kernel_vm_limit := 2 # hv_apple_isa_vm_quota

vm_resource := "macrack.io/macos-vm"

# A class asks for at most two VMs per chassis.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeClass"
	input.request.operation in {"CREATE", "UPDATE"}
	cap := input.object.spec.vmCapacity
	is_number(cap)
	cap > 2
	msg := sprintf("quota.never-circumvent: vmCapacity %v exceeds the kernel's limit of 2 macOS VMs per chassis", [cap])
}

# A Node's capacity and allocatable macrack.io/macos-vm are quantities of at
# most two.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := lib.new.status[list][vm_resource]
	some msg in advertised_problems(list, value)
}

advertised_problems(list, value) := {msg |
	not lib.is_quantity(value)
	msg := sprintf("quota.never-circumvent: Node %s status.%s %s is not a quantity: %s", [lib.new.metadata.name, list, vm_resource, lib.show(value)])
} | {msg |
	lib.quantity(value) > kernel_vm_limit
	msg := sprintf("quota.never-circumvent: Node %s advertises %s %s=%s; a chassis runs at most 2 macOS VMs", [lib.new.metadata.name, list, vm_resource, lib.show(value)])
}

# A MacNode enters service (Ready or Leased) only with SIP on and boot-args
# that leave the VM quota alone.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	lib.enters_service
	some problem in host_problems
	msg := sprintf("quota.never-circumvent: MacNode %s cannot become %s: %s", [lib.new.metadata.name, lib.new.status.phase, problem])
}

host_problems contains "System Integrity Protection is not reported on" if reported("sipEnabled") != true

host_problems contains "its boot-args touch hv_apple_isa_vm_quota" if {
	args := reported("bootArgs")
	is_string(args)
	contains(args, "hv_apple_isa_vm_quota")
}

reported(f) := object.get(lib.new, ["status", "reported", f], null)
