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

violations contains {"code": code, "message": msg} if {
	lib.operation == "CREATE"
	not is_object(object.get(input, ["inventory", "image"], null))
	msg := sprintf("instance.image: MacOSImage %s does not exist", [image_name])
}

violations contains {"code": code, "message": msg} if {
	lib.operation == "CREATE"
	image := input.inventory.image
	disk := object.get(lib.new, ["spec", "disk"], null)
	lib.is_quantity(disk)
	lib.quantity(disk) < image_size(image)
	msg := sprintf("instance.image: disk %s is smaller than image %s, which needs %s", [lib.show(disk), image_name, lib.show(image.spec.size)])
}

image_name := object.get(lib.new, ["spec", "imageName"], "")

# image_size is the smallest disk the image fits on: its spec.size today.
# Every reader goes through here, so that the size can move to what the
# operator resolves from the image's artifact.
image_size(image) := lib.quantity(image.spec.size)
