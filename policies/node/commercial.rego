# METADATA
# title: node.commercial
# description: |
#   Only commercial hardware is leased. A MacNodeClass has a disk of at least
#   1T (10^12 bytes, about 931Gi) and a NIC of at least 10 Gb. A MacNode moves
#   into Ready (or Leased) only when its reported facts meet its class and the
#   floors, and its agent carries the virtualization entitlement. Reported
#   facts themselves are always admitted, so that the operator can say why a
#   node is not Ready.
# custom:
#   id: node.commercial
#   kinds:
#   - fleet.macrack.io/MacNodeClass
#   - fleet.macrack.io/MacNode
#   engines: [rego, cel]
#   inventory:
#   - nodeClass: the MacNode's class
package macrack.node.commercial

import data.macrack.lib

code := "node.commercial"

violations contains {"code": code, "message": concat("", ["node.commercial: ", problem])} if {
	input.request.kind.kind == "MacNodeClass"
	input.request.operation in {"CREATE", "UPDATE"}
	some problem in class_problems
}

violations contains {"code": code, "message": sprintf("node.commercial: MacNode %s cannot become %s: %s", [node_name, lib.new.status.phase, problem])} if {
	input.request.kind.kind == "MacNode"
	lib.enters_service
	some problem in node_problems
}

# A class has a disk of at least 1T and a NIC of at least 10 Gb.

class_problems contains sprintf("disk %s is not a quantity", [lib.show(disk)]) if {
	disk := lib.new.spec.disk
	not lib.is_quantity(disk)
}

class_problems contains sprintf("disk %s is below the 1T commercial floor", [lib.show(disk)]) if {
	disk := lib.new.spec.disk
	lib.quantity(disk) < lib.one_terabyte
}

class_problems contains sprintf("networkGbps %s is not a number", [lib.show(gbps)]) if {
	gbps := lib.new.spec.networkGbps
	not is_number(gbps)
}

class_problems contains sprintf("networkGbps %v is below the 10 Gb commercial floor", [gbps]) if {
	gbps := lib.new.spec.networkGbps
	is_number(gbps)
	gbps < lib.min_network_gbps
}

# A MacNode enters service (Ready or Leased) only when what its agent
# reports meets the commercial floors and its class.

node_problems contains "its class is unknown" if not is_object(object.get(input, ["inventory", "nodeClass"], null))

node_problems contains "no disk size is reported" if not lib.is_quantity(reported("disk"))

node_problems contains sprintf("the reported disk %s is below the 1T commercial floor", [lib.show(reported("disk"))]) if {
	lib.quantity(reported("disk")) < lib.one_terabyte
}

node_problems contains sprintf("the reported disk %s is below the class's %s", [lib.show(reported("disk")), lib.show(class_field("disk"))]) if {
	lib.quantity(reported("disk")) < lib.quantity(class_field("disk"))
}

node_problems contains "no NIC speed is reported" if not is_number(reported("networkGbps"))

node_problems contains sprintf("the reported NIC %v Gb is below the 10 Gb commercial floor", [reported("networkGbps")]) if {
	is_number(reported("networkGbps"))
	reported("networkGbps") < lib.min_network_gbps
}

node_problems contains sprintf("the reported NIC %v Gb is below the class's %v Gb", [reported("networkGbps"), class_field("networkGbps")]) if {
	is_number(reported("networkGbps"))
	is_number(class_field("networkGbps"))
	reported("networkGbps") < class_field("networkGbps")
}

node_problems contains "the agent lacks the com.apple.security.virtualization entitlement" if {
	reported("virtualizationEntitlement") != true
}

reported(f) := object.get(lib.new, ["status", "reported", f], null)

class_field(f) := object.get(input, ["inventory", "nodeClass", "spec", f], null)

node_name := object.get(lib.new, ["metadata", "name"], "")
