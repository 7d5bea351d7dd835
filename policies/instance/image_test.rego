package macrack.instance.image_test

import data.macrack.instance.image

create(disk, img) := {
	"request": {"operation": "CREATE", "kind": {"kind": "MacOSInstance"}},
	"object": {"spec": {"imageName": "sequoia", "disk": disk}},
	"inventory": img,
}

test_a_disk_the_size_of_the_image_is_enough if {
	count(image.violations) == 0 with input as create("120Gi", {"image": {"status": {"resolved": {"minimumDisk": "120Gi"}}}})
}

test_the_message_gives_both_sizes if {
	some v in image.violations with input as create("100Gi", {"image": {"status": {"resolved": {"minimumDisk": "120Gi"}}}})
	v.message == "instance.image: disk 100Gi is smaller than image sequoia, which needs 120Gi"
}

test_a_missing_image_is_named if {
	some v in image.violations with input as create("200Gi", {})
	v.message == "instance.image: MacOSImage sequoia does not exist"
}

test_an_unresolved_image_is_refused_until_resolved if {
	some v in image.violations with input as create("200Gi", {"image": {"spec": {}}})
	v.message == "instance.image: MacOSImage sequoia is not resolved yet: its minimum disk is read from its artifact, see its Resolved condition"
}
