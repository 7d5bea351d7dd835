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

# Every check opens with a guard on the request's kind (and, where it
# narrows, the operation), which OPA's rule index decides before it evaluates
# a body; the checks read the input directly and write the limit (2) out, as
# a reference to a rule costs more than a check.

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeClass"
	input.request.operation in {"CREATE", "UPDATE"}
	cap := input.object.spec.vmCapacity
	is_number(cap)
	cap > 2
	msg := sprintf("quota.never-circumvent: vmCapacity %v exceeds the kernel's limit of 2 macOS VMs per chassis", [cap])
}

# A Node's capacity and allocatable macrack.io/macos-vm: a quantity, and at
# most 2. A whole number is a quantity; a fractional one, or anything but a
# number or a string, is not.

violations contains {"code": code, "message": not_a_quantity(list, value)} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := input.object.status[list]["macrack.io/macos-vm"]
	not is_string(value)
	not is_number(value)
}

violations contains {"code": code, "message": not_a_quantity(list, value)} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := input.object.status[list]["macrack.io/macos-vm"]
	is_number(value)
	value != floor(value)
}

violations contains {"code": code, "message": not_a_quantity(list, value)} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := input.object.status[list]["macrack.io/macos-vm"]
	is_string(value)
	not regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`, value)
}

# Above the limit: whole numbers, plain quantity strings (units.parse, as
# lib.quantity reads them, inlined), and the n and u suffixes (lib.quantity).

violations contains {"code": code, "message": advertises(list, value)} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := input.object.status[list]["macrack.io/macos-vm"]
	is_number(value)
	value == floor(value)
	value > 2
}

violations contains {"code": code, "message": advertises(list, value)} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := input.object.status[list]["macrack.io/macos-vm"]
	is_string(value)
	not endswith(value, "n")
	not endswith(value, "u")
	regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`, value)
	units.parse(value) > 2
}

violations contains {"code": code, "message": advertises(list, value)} if {
	input.request.kind.kind == "Node"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	some list in ["capacity", "allocatable"]
	value := input.object.status[list]["macrack.io/macos-vm"]
	is_string(value)
	regex.match(`[nu]$`, value)
	lib.quantity(value) > 2
}

advertises(list, value) := sprintf("quota.never-circumvent: Node %s advertises %s %s=%s; a chassis runs at most 2 macOS VMs", [lib.new.metadata.name, list, vm_resource, lib.show(value)])

vm_resource := "macrack.io/macos-vm"

not_a_quantity(list, value) := sprintf("quota.never-circumvent: Node %s status.%s %s is not a quantity: %s", [lib.new.metadata.name, list, vm_resource, lib.show(value)])

# A MacNode enters service (Ready or Leased) only with SIP on and boot-args
# that leave the VM quota alone.

reported(f) := object.get(lib.new, ["status", "reported", f], null)

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	lib.enters_service
	reported("sipEnabled") != true
	msg := sprintf("quota.never-circumvent: MacNode %s cannot become %s: System Integrity Protection is not reported on", [lib.new.metadata.name, lib.new.status.phase])
}

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	lib.enters_service
	args := reported("bootArgs")
	is_string(args)
	contains(args, "hv_apple_isa_vm_quota")
	msg := sprintf("quota.never-circumvent: MacNode %s cannot become %s: its boot-args touch hv_apple_isa_vm_quota", [lib.new.metadata.name, lib.new.status.phase])
}
