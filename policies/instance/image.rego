# METADATA
# title: instance.image
# description: |
#   An instance boots from a golden image that exists, on a disk that holds
#   it. A new instance names a MacOSImage that exists, and its disk is at
#   least that image's size.
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

problems contains sprintf("disk %s is smaller than image %s, which needs %s", [lib.show(disk), image_name, lib.show(image.spec.size)]) if {
	image := input.inventory.image
	disk := object.get(lib.new, ["spec", "disk"], null)
	lib.quantity(disk) < image_size(image)
}

image_name := object.get(lib.new, ["spec", "imageName"], "")

# image_size is the smallest disk the image fits on: its spec.size today.
# Every reader goes through here, so that the size can move to what the
# operator resolves from the image's artifact.
image_size(image) := lib.quantity(image.spec.size)
