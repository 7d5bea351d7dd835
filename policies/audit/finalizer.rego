# METADATA
# title: audit.finalizer
# description: |
#   A released lease, or a deleted instance, MacNode or MacOSImage, stays
#   until its last audit records are exported: nobody but the operator
#   removes the macrack.io/audit finalizer, at any time. A tenant who could
#   would skip their own billing records. (lease.release guards a lease's
#   finalizers only until earliestReleaseAt.)
# custom:
#   id: audit.finalizer
#   kinds:
#   - leasing.macrack.io/MacNodeLease
#   - compute.macrack.io/MacOSInstance
#   - fleet.macrack.io/MacNode
#   - fleet.macrack.io/MacOSImage
#   engines: [rego, cel]
#   params:
#   - operatorUsername: the operator's own identity
package macrack.audit.finalizer

import data.macrack.lib

code := "audit.finalizer"

audit_finalizer := "macrack.io/audit"

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind in {"MacNodeLease", "MacOSInstance", "MacNode", "MacOSImage"}
	input.request.operation == "UPDATE"
	audit_finalizer in lib.removed_finalizers
	not lib.is_operator
	msg := sprintf("audit.finalizer: only the operator removes %s from %s %s, once its audit records are exported; not %s", [
		audit_finalizer, input.request.kind.kind, lib.show(object.get(lib.old, ["metadata", "name"], "")), lib.username,
	])
}
