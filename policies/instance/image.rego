# METADATA
# title: instance.image
# description: |
#   An instance boots from a golden image that exists, on a disk that holds
#   it. A new instance names a MacOSImage that exists and that the operator
#   has resolved from its artifact, and its disk is at least the minimum
#   disk the artifact declares.
# custom:
#   id: instance.image
#   kinds:
#   - compute.macrack.io/MacOSInstance
#   engines: [rego]
#   inventory:
#   - image: the MacOSImage that spec.imageName names
package macrack.instance.image

import data.macrack.lib

code := "instance.image"

violations contains {"code": code, "message": concat("", ["instance.image: ", problem])} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	some problem in problems
}

problems contains sprintf("MacOSImage %s does not exist", [image_name]) if not is_object(object.get(input, ["inventory", "image"], null))

problems contains sprintf("MacOSImage %s is not resolved yet: its minimum disk is read from its artifact, see its Resolved condition", [image_name]) if {
	image := input.inventory.image
	not minimum_disk(image)
}

problems contains sprintf("disk %s is smaller than image %s, which needs %s", [lib.show(disk), image_name, lib.show(image.status.resolved.minimumDisk)]) if {
	image := input.inventory.image
	disk := object.get(lib.new, ["spec", "disk"], null)
	lib.quantity(disk) < minimum_disk(image)
}

image_name := object.get(lib.new, ["spec", "imageName"], "")

# minimum_disk is what the operator resolved from the golden's artifact.
minimum_disk(image) := lib.quantity(image.status.resolved.minimumDisk)
